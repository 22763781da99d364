"""LLVM IR text -> AMDGCN code objects (gfx950, gfx942) and PTX (sm_90a).

The pipeline (DESIGN.md section 6): parse + verify the module, run LLVM's new-pass-manager
optimisation pipeline at `opt_level`, emit an object with the target machine, and for AMD
link it with `ld.lld -shared` (the one in the `ziglang` wheel) into a code object.

LLVM never runs in the caller's process. LLVM aborts the process on some bad input (for
example "LLVM ERROR: Cannot select" for a gfx950-only intrinsic built for gfx942), so every
build runs in a child process (`compile_worker.py`). Children are long-lived and reused, so
a build pays a Python + llvmlite start (~0.2 s) once per child, not once per kernel; up to
`max_workers()` children run at once (`compile_many` fills them). A child that dies mid-job
becomes a `BackendCrash` naming the chip, the kernel and what the child wrote on stderr;
the caller goes on and the next build starts a fresh child.

Errors:
    ValueError    an unknown chip / SM name or PTX version, before LLVM runs
    LLVMError     the IR does not parse or verify (LLVM's message)
    BackendCrash  the child died while LLVM ran (abort, segfault) or ran past `timeout`
    LinkError     ld.lld refused the object
    BackendError  the base of the three above; also a code object whose e_flags name a
                  chip other than the one asked for
A build that works but makes LLVM write to stderr issues a `BackendWarning` with the text.

The same IR always gives the same bytes: lld runs with `--build-id=none` on fixed relative
file names in a fresh folder, and nothing else in the output depends on time or paths.
"""
from __future__ import annotations

import atexit
import os
import pickle
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

from ..targets import AMD_TARGETS, Target

AMDGCN_TRIPLE = "amdgcn-amd-amdhsa"
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"

# EF_AMDGPU_MACH_* (llvm/include/llvm/BinaryFormat/ELF.h).
EF_AMDGPU_MACH = {"gfx942": 0x04C, "gfx950": 0x04F}
EF_AMDGPU_MACH_MASK = 0x0FF
EM_AMDGPU = 224

# The oldest PTX ISA each SM accepts in LLVM 22 (older aborts LLVM).
_MIN_PTX = {"sm_90": 78, "sm_90a": 80}
DEFAULT_PTX_VERSION = 80  # PTX ISA 8.0 (CUDA 12.0): the oldest that has sm_90a

_WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_worker.py")
_HDR = struct.Struct("<I")
_RETIRE_AFTER = 500  # jobs a child serves before it is replaced (bounds LLVM's heap growth)


class BackendError(RuntimeError):
    """A backend build failed."""


class LLVMError(BackendError):
    """LLVM rejected the IR (parse or verifier error)."""

    def __init__(self, message: str, *, chip: str = "", kernel: str = "", llvm_message: str = ""):
        super().__init__(message)
        self.chip = chip
        self.kernel = kernel
        self.llvm_message = llvm_message


class BackendWarning(UserWarning):
    """LLVM wrote to stderr during a build that succeeded."""


class LinkError(BackendError):
    """ld.lld failed."""


class BackendCrash(BackendError):
    """The child process running LLVM died (LLVM abort, segfault) or timed out."""

    def __init__(self, message: str, *, chip: str, kernel: str, stderr: str,
                 returncode: int | None):
        super().__init__(message)
        self.chip = chip
        self.kernel = kernel
        self.stderr = stderr
        self.returncode = returncode


# ----------------------------------------------------------------------------------------
# linker


_LLD: list[str] | None = None


def lld_command() -> list[str]:
    """The argv prefix that runs ld.lld: $MONOKERNEL_LLD, else the `zig` binary of the
    `ziglang` wheel (`zig ld.lld`, ~5 ms a link), else `python -m ziglang ld.lld`."""
    global _LLD
    if _LLD is None:
        env = os.environ.get("MONOKERNEL_LLD")
        if env:
            _LLD = env.split()
        else:
            import importlib.util

            spec = importlib.util.find_spec("ziglang")
            zig = None
            if spec is not None and spec.submodule_search_locations:
                for d in spec.submodule_search_locations:
                    for name in ("zig", "zig.exe"):
                        p = os.path.join(d, name)
                        if os.path.isfile(p) and os.access(p, os.X_OK):
                            zig = p
                            break
            if zig is not None:
                _LLD = [zig, "ld.lld"]
            elif spec is not None:
                _LLD = [sys.executable, "-m", "ziglang", "ld.lld"]
            elif shutil.which("ld.lld"):
                _LLD = [shutil.which("ld.lld")]
            else:
                raise BackendError("no ld.lld: install the `ziglang` package "
                                   "(pip install ziglang) or set MONOKERNEL_LLD")
    return list(_LLD)


# ----------------------------------------------------------------------------------------
# child processes


def max_workers() -> int:
    """How many LLVM children may run at once: $MONOKERNEL_BUILD_JOBS, else the CPUs this
    process may use (at most 16)."""
    env = os.environ.get("MONOKERNEL_BUILD_JOBS")
    if env:
        return max(1, int(env))
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return max(1, min(n, 16))


class _Died(Exception):
    pass


class _Worker:
    def __init__(self) -> None:
        self.errfile = tempfile.TemporaryFile(prefix="mk-llvm-stderr-")
        self.proc = subprocess.Popen(
            [sys.executable, "-P", _WORKER_PATH],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errfile,
            bufsize=0, close_fds=True)
        self.jobs = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def request(self, msg: dict, timeout: float | None) -> dict:
        """Sends one request and returns the reply; raises _Died if the child dies or
        runs past `timeout` (then it is killed)."""
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(_HDR.pack(len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _Died("the child closed its input") from None
        self.jobs += 1
        deadline = None if timeout is None else time.monotonic() + timeout
        hdr = self._read(_HDR.size, deadline)
        body = self._read(_HDR.unpack(hdr)[0], deadline)
        return pickle.loads(body)

    def _read(self, n: int, deadline: float | None) -> bytes:
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                r = select.select([fd], [], [], max(0.0, left))[0] if left > 0 else []
                if not r:
                    self.kill()
                    raise _Died("timed out")
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise _Died("the child closed its output")
            buf += chunk
        return bytes(buf)

    def stderr_text(self) -> str:
        fd = self.errfile.fileno()
        try:
            return os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", "replace")
        except OSError:
            return ""

    def wait(self, timeout: float = 5.0) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.wait(2.0)
        for f in (self.proc.stdout, self.errfile):
            try:
                f.close()
            except OSError:
                pass


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.idle: list[_Worker] = []
        self.count = 0
        self.closed = False

    def acquire(self) -> _Worker:
        with self.cond:
            while True:
                if self.idle:
                    return self.idle.pop()
                if self.count < max_workers():
                    self.count += 1
                    break
                self.cond.wait()
        try:
            return _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise

    def release(self, w: _Worker, healthy: bool) -> None:
        keep = healthy and w.jobs < _RETIRE_AFTER and w.proc.poll() is None
        with self.cond:
            if keep and not self.closed:
                self.idle.append(w)
                self.cond.notify()
                return
            self.count -= 1
            self.cond.notify()
        w.close()

    def shutdown(self) -> None:
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.count -= len(idle)
        for w in idle:
            w.close()


_POOL: _Pool | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> _Pool:
    global _POOL
    with _POOL_LOCK:
        # After a fork the children belong to the parent process: start our own.
        if _POOL is None or _POOL.pid != os.getpid() or _POOL.closed:
            _POOL = _Pool()
        return _POOL


def shutdown() -> None:
    """Stops the idle LLVM children (a later build starts new ones). Runs at exit."""
    with _POOL_LOCK:
        pool = _POOL
    if pool is not None and pool.pid == os.getpid():
        pool.shutdown()


atexit.register(shutdown)


def warm_up(n: int | None = None) -> list[int]:
    """Starts up to `n` (default `max_workers()`) children in parallel and loads llvmlite
    in each, so the first builds do not pay for it. Returns their pids."""
    n = max_workers() if n is None else max(1, min(n, max_workers()))
    pool = _pool()
    workers = [pool.acquire() for _ in range(n)]
    pids = []
    try:
        for w in workers:  # all children are already starting; this waits for each
            try:
                pids.append(w.request({"op": "ping"}, 60.0)["result"])
            except _Died:
                w.kill()
    finally:
        for w in workers:
            pool.release(w, w.proc.poll() is None)
    return pids


def worker_pids() -> list[int]:
    """The pids of the idle children (for tests and diagnostics)."""
    with _POOL_LOCK:
        pool = _POOL
    if pool is None:
        return []
    with pool.cond:
        return [w.pid for w in pool.idle]


# ----------------------------------------------------------------------------------------
# builds

_KERNEL_RE = re.compile(
    r'^\s*define\b[^@\n]*\b(?:amdgpu_kernel|ptx_kernel)\b[^@\n]*@("(?:[^"\\]|\\.)*"|[-\w$.]+)',
    re.M)


def kernel_names(llvm_ir: str) -> list[str]:
    """The kernels (amdgpu_kernel / ptx_kernel functions) an IR text defines."""
    return [m.group(1).strip('"') for m in _KERNEL_RE.finditer(llvm_ir)]


def _describe_kernels(llvm_ir: str, stderr: str = "") -> str:
    m = re.search(r"In function: (\S+)", stderr)
    if m:
        return m.group(1)
    names = kernel_names(llvm_ir)
    return ", ".join(names) if names else "<no kernel>"


def _chip_name(chip: str | Target) -> str:
    return chip.name if isinstance(chip, Target) else chip


def _check_amd_chip(chip: str | Target) -> str:
    name = _chip_name(chip)
    if name not in AMD_TARGETS:
        raise ValueError(f"unknown AMD chip {name!r}: the AMDGCN backend builds for "
                         f"{', '.join(AMD_TARGETS)}")
    return name


_SM_RE = re.compile(r"^sm_[0-9]{2,3}[af]?$")


def _check_sm(sm: str | Target, ptx_version: int) -> str:
    name = _chip_name(sm)
    if not isinstance(name, str) or not _SM_RE.match(name):
        raise ValueError(f"unknown NVIDIA SM {name!r}: expected a name like 'sm_90a'")
    if not isinstance(ptx_version, int) or ptx_version < 60:
        raise ValueError(f"bad PTX version {ptx_version!r}: give e.g. 80 for PTX ISA 8.0")
    need = _MIN_PTX.get(name)
    if need is not None and ptx_version < need:
        raise ValueError(f"{name} needs PTX ISA {need // 10}.{need % 10} or newer "
                         f"(ptx_version={need}); got {ptx_version}")
    return name


def _check_opt(opt_level: int) -> int:
    if opt_level not in (0, 1, 2, 3):
        raise ValueError(f"opt_level must be 0..3, got {opt_level!r}")
    return opt_level


def _run(req: dict, chip: str, timeout: float | None):
    """Runs one request in a child; returns its result or raises."""
    pool = _pool()
    w = pool.acquire()
    healthy = False
    try:
        try:
            reply = w.request(req, timeout)
        except _Died as died:
            rc = w.wait()
            stderr = w.stderr_text()
            kernel = _describe_kernels(req["ir"], stderr)
            if str(died) == "timed out":
                how = f"ran past the {timeout} s timeout and was killed"
            elif rc is not None and rc < 0:
                try:
                    how = f"died with {signal.Signals(-rc).name}"
                except ValueError:
                    how = f"died with signal {-rc}"
            else:
                how = f"exited with status {rc}"
            raise BackendCrash(
                f"LLVM crashed building kernel {kernel} for {chip}: the compile child "
                f"{how}; its stderr:\n{stderr.strip() or '<empty>'}",
                chip=chip, kernel=kernel, stderr=stderr, returncode=rc) from None
        healthy = True
    finally:
        pool.release(w, healthy)
    if reply["ok"]:
        text = reply.get("stderr", "").strip()
        if text:  # LLVM said something on a build that worked: pass it on
            warnings.warn(f"LLVM, building {_describe_kernels(req['ir'])} for {chip}:\n"
                          f"{text}", BackendWarning, stacklevel=3)
        return reply["result"]
    kind, message = reply["kind"], reply["message"]
    kernel = _describe_kernels(req["ir"])
    if kind == "llvm":
        raise LLVMError(f"LLVM rejected the IR of {kernel} for {chip}: {message}",
                        chip=chip, kernel=kernel, llvm_message=message)
    if kind == "link":
        raise LinkError(f"linking {kernel} for {chip} failed: {message}")
    raise BackendError(f"building {kernel} for {chip} failed in the compile child: "
                       f"{message}\n{reply.get('stderr', '')}".rstrip())


def _check_e_flags(data: bytes, chip: str) -> None:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        raise BackendError(f"the linker's output for {chip} is not an ELF64 file")
    (machine,) = struct.unpack_from("<H", data, 18)
    (flags,) = struct.unpack_from("<I", data, 48)
    if machine != EM_AMDGPU:
        raise BackendError(f"the code object for {chip} has e_machine {machine}, "
                           f"not EM_AMDGPU ({EM_AMDGPU})")
    mach = flags & EF_AMDGPU_MACH_MASK
    if mach != EF_AMDGPU_MACH[chip]:
        got = {v: k for k, v in EF_AMDGPU_MACH.items()}.get(mach, f"0x{mach:03x}")
        raise BackendError(f"asked for {chip} but the code object's e_flags "
                           f"(0x{flags:x}) name {got}")


def compile_amdgcn(llvm_ir: str, chip: str | Target, opt_level: int = 3, *,
                   features: str = "", timeout: float | None = None) -> bytes:
    """Builds an AMDGCN code object (an ELF shared object for the HSA loader) from LLVM IR
    text. `chip` is one of targets.AMD_TARGETS; `features` is an LLVM feature string such
    as "+xnack" (empty: the chip's defaults, xnack and sramecc "any")."""
    chip = _check_amd_chip(chip)
    req = {"op": "object", "ir": llvm_ir, "triple": AMDGCN_TRIPLE, "cpu": chip,
           "features": features, "opt": _check_opt(opt_level), "lld": lld_command()}
    data = _run(req, chip, timeout)
    _check_e_flags(data, chip)
    return data


def compile_amdgcn_asm(llvm_ir: str, chip: str | Target, opt_level: int = 3, *,
                       features: str = "", timeout: float | None = None) -> str:
    """The AMDGCN assembly text LLVM emits for the IR after the same pipeline as
    `compile_amdgcn` (for ISA checks: llvmlite exposes no disassembler)."""
    chip = _check_amd_chip(chip)
    req = {"op": "asm", "ir": llvm_ir, "triple": AMDGCN_TRIPLE, "cpu": chip,
           "features": features, "opt": _check_opt(opt_level), "lld": None}
    return _run(req, chip, timeout)


def compile_ptx(llvm_ir: str, sm: str | Target = "sm_90a",
                ptx_version: int = DEFAULT_PTX_VERSION, opt_level: int = 3, *,
                timeout: float | None = None) -> str:
    """PTX text for the IR, for `sm` and PTX ISA `ptx_version` (80 = 8.0)."""
    sm = _check_sm(sm, ptx_version)
    req = {"op": "asm", "ir": llvm_ir, "triple": NVPTX_TRIPLE, "cpu": sm,
           "features": f"+ptx{ptx_version}", "opt": _check_opt(opt_level), "lld": None}
    return _run(req, sm, timeout)


@dataclass(frozen=True)
class Job:
    """One build for `compile_many`. `chip` "gfx950"/"gfx942" builds a code object (or
    assembly text with output="asm"); an "sm_*" chip builds PTX text."""
    llvm_ir: str
    chip: str
    opt_level: int = 3
    output: str = "object"  # "object" | "asm" (AMD only; PTX is always text)
    ptx_version: int = DEFAULT_PTX_VERSION
    features: str = ""


def _build(job: Job, timeout: float | None):
    chip = _chip_name(job.chip)
    if chip.startswith("sm_"):
        return compile_ptx(job.llvm_ir, chip, job.ptx_version, job.opt_level,
                           timeout=timeout)
    if job.output == "asm":
        return compile_amdgcn_asm(job.llvm_ir, chip, job.opt_level, features=job.features,
                                  timeout=timeout)
    if job.output != "object":
        raise ValueError(f"Job.output must be 'object' or 'asm', got {job.output!r}")
    return compile_amdgcn(job.llvm_ir, chip, job.opt_level, features=job.features,
                          timeout=timeout)


def compile_many(jobs: Iterable[Job | tuple], *, workers: int | None = None,
                 return_exceptions: bool = False, timeout: float | None = None) -> list:
    """Builds every job, up to `workers` (default `max_workers()`) at once, each in a
    child process. A job is a `Job` or a tuple of its fields, e.g. (ir, "gfx950").
    Returns the results in the order of `jobs`. With return_exceptions the failed jobs'
    exceptions stand in the list; without it, the first failure (in job order) is
    raised once every job has finished."""
    jobs = [j if isinstance(j, Job) else Job(*j) for j in jobs]
    if not jobs:
        return []
    for j in jobs:  # the cheap checks first: a bad name fails before any LLVM work
        if not _chip_name(j.chip).startswith("sm_"):
            _check_amd_chip(j.chip)
    n = min(len(jobs), workers or max_workers(), max_workers())

    def one(job: Job):
        try:
            return _build(job, timeout)
        except Exception as e:  # noqa: BLE001 - handed back or re-raised below
            return e

    if n == 1:
        results = [one(j) for j in jobs]
    else:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="mk-build") as ex:
            results = list(ex.map(one, jobs))
    if not return_exceptions:
        for r in results:
            if isinstance(r, Exception):
                raise r
    return results
