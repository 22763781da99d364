"""The child process that runs LLVM for `monokernel.backend.toolchain`.

LLVM aborts the whole process on some bad input (a "Cannot select" on an intrinsic the
chip lacks, a PTX version too old for the target, ...). So LLVM never runs in the caller:
it runs here, in a long-lived child that serves one job after another over its stdin and
stdout, and the parent turns a dead child into a Python exception.

Protocol (parent -> child and child -> parent alike): a 4-byte little-endian length, then
that many bytes of a pickled dict. A request is
    {"op": "object" | "asm", "ir": str, "triple": str, "cpu": str, "features": str,
     "opt": int, "lld": list[str] | None}
(for "object" with "lld" set, the object is linked with `lld -shared` into a code object);
a reply is
    {"ok": True, "result": bytes | str, "stderr": str}
    {"ok": False, "kind": "llvm" | "link" | "error", "message": str, "stderr": str}

Standard error: the parent hands the child a file as its fd 2. Before each job the child
empties it, so when the child dies mid-job the file holds exactly that job's output
(LLVM's "LLVM ERROR: ..." line). The child's fd 1 is pointed at the same file once the
protocol stream has been taken from it, so a stray print cannot corrupt the stream.

This module imports only the standard library and llvmlite, so that starting a child
costs a Python start plus llvmlite's load (about 0.2 s), whatever the rest of the package
imports. It is run by file path (`python -P .../compile_worker.py`), and also works as
`python -m monokernel.backend.compile_worker`.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tempfile

_HDR = struct.Struct("<I")


def _read_exact(f, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _send(out, msg: dict) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HDR.pack(len(data)) + data)
    out.flush()


def _reset_stderr() -> None:
    sys.stderr.flush()
    try:
        os.ftruncate(2, 0)
        os.lseek(2, 0, os.SEEK_SET)
    except OSError:  # stderr is not a regular file (run by hand): nothing to reset
        pass


def _read_stderr() -> str:
    sys.stderr.flush()
    try:
        size = os.fstat(2).st_size
        return os.pread(2, size, 0).decode("utf-8", "replace")
    except OSError:
        return ""


class _Llvm:
    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        self.llvm = llvm
        self._machines: dict[tuple, object] = {}

    def machine(self, triple: str, cpu: str, features: str, opt: int):
        key = (triple, cpu, features, opt)
        tm = self._machines.get(key)
        if tm is None:
            target = self.llvm.Target.from_triple(triple)
            tm = target.create_target_machine(cpu=cpu, features=features, opt=opt,
                                              reloc="pic", codemodel="default")
            self._machines[key] = tm
        return tm

    def build(self, req: dict):
        """Returns ("ok", result) or ("llvm", message)."""
        llvm = self.llvm
        triple, opt = req["triple"], int(req["opt"])
        tm = self.machine(triple, req["cpu"], req["features"], opt)
        ctx = llvm.create_context()
        try:
            mod = llvm.parse_assembly(req["ir"], context=ctx)
            mod.verify()
        except RuntimeError as e:
            return "llvm", str(e).strip()
        if mod.triple and mod.triple != triple:
            return "llvm", (f"module triple {mod.triple!r} does not match the target "
                            f"triple {triple!r}")
        if not mod.triple:
            mod.triple = triple
        if not mod.data_layout:
            mod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=opt)
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        mpm.run(mod, pb)
        if req["op"] == "asm":
            return "ok", tm.emit_assembly(mod)
        obj = tm.emit_object(mod)
        lld = req.get("lld")
        if not lld:
            return "ok", obj
        return _link(lld, obj)


def _link(lld: list[str], obj: bytes):
    # Fixed relative file names in a fresh folder: nothing of the folder's path can reach
    # the output, so the same object always links to the same bytes.
    with tempfile.TemporaryDirectory(prefix="mk-link-") as d:
        with open(os.path.join(d, "kernel.o"), "wb") as f:
            f.write(obj)
        cmd = [*lld, "-shared", "--no-undefined", "--build-id=none",
               "-o", "kernel.hsaco", "kernel.o"]
        p = subprocess.run(cmd, cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        if p.returncode != 0:
            return "link", (f"{' '.join(cmd)} exited with {p.returncode}:\n"
                            + p.stdout.decode("utf-8", "replace"))
        with open(os.path.join(d, "kernel.hsaco"), "rb") as f:
            return "ok", f.read()


def main() -> int:
    # Take the protocol stream off fd 1, then point fd 1 at stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = sys.stdin.buffer
    llvm = None
    while True:
        hdr = _read_exact(inp, _HDR.size)
        if hdr is None:
            return 0
        body = _read_exact(inp, _HDR.unpack(hdr)[0])
        if body is None:
            return 0
        req = pickle.loads(body)
        if req.get("op") == "ping":
            _send(out, {"ok": True, "result": os.getpid(), "stderr": ""})
            continue
        _reset_stderr()
        try:
            if llvm is None:
                llvm = _Llvm()
            kind, result = llvm.build(req)
        except Exception as e:  # a Python-level failure, not an LLVM abort
            kind, result = "error", f"{type(e).__name__}: {e}"
        if kind == "ok":
            _send(out, {"ok": True, "result": result, "stderr": _read_stderr()})
        else:
            _send(out, {"ok": False, "kind": kind, "message": result,
                        "stderr": _read_stderr()})


if __name__ == "__main__":
    sys.exit(main())
