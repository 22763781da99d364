"""Static SASS statistics of a launch's loops (sm_90a): what a profiler's instruction view
would show, without a profiler.

    python -m tools.sass --kind index_scoring --config glm5 --rows 8 [--tune ...]
                         [--min-loop 200] [--ptx FILE.ptx] [--listing 0xADDR]

Builds the launch's PTX (or reads FILE.ptx), assembles it with ptxas (-O3, the driver's
level), disassembles the cubin with nvdisasm and prints, for every loop (a backward branch)
of at least --min-loop instructions: its instruction count, the sum of the static stall
counts ptxas scheduled (the fewest clocks one warp needs to issue it, before any wait on
memory, shuffles or the tensor cores), the variable-latency waits, and the count of the
instruction kinds that matter in these kernels (global / shared memory, atomics, wgmma,
shuffles, FMNMX / FFMA, reconvergence regions, barriers, spills). bench/NOTES.md v10 used it
to find where the scoring epilogue's clocks go. `--listing FROM` also prints the loop that
starts at FROM, an instruction a line with its stall and waits, and its opcodes by count.

The control word: on Volta and later each 128-bit instruction carries its scheduling in the
top bits of its high 64-bit word (bits 41-44 the stall count, 45 the yield flag, 46-48 the
scoreboard it sets on write and 49-51 on read (7 = none), 52-57 the scoreboards it waits
for, 58-61 operand reuse), as the public microbenchmark studies and assemblers of these
chips decode it (e.g. Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking"). ptxas and nvdisasm come with CUDA (or the nvidia-cuda-nvcc /
nvidia-cuda-nvdisasm wheels); set PTXAS / NVDISASM to point at them, else they are looked
for on PATH and in /usr/local/cuda/bin. Without them the tool says so and exits 2.
"""
from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

NO_SCOREBOARD = 7
CUDA_BIN = "/usr/local/cuda/bin"
# instruction kinds counted per loop: label -> opcode prefix pattern
KINDS = {"LDG": r"LDG", "STG": r"STG", "LDS": r"LDS", "ATOMS": r"ATOMS", "GMMA": r"[HQ]GMMA",
         "SHFL": r"SHFL", "FMNMX": r"FMNMX", "FFMA": r"FFMA", "BSSY": r"BSSY", "BAR": r"BAR\.",
         "spill": r"(LDL|STL)"}


@dataclass(frozen=True)
class Instr:
    addr: int
    text: str
    stall: int
    write_sb: int | None  # the scoreboard this instruction sets when its result lands
    read_sb: int | None   # the scoreboard it sets until its sources are read
    waits: frozenset      # scoreboards it waits for before issuing


def decode_control(hi: int) -> tuple:
    """(stall, write scoreboard, read scoreboard, waited scoreboards) of a high word."""
    stall = (hi >> 41) & 0xF
    wb, rb = (hi >> 46) & 7, (hi >> 49) & 7
    mask = (hi >> 52) & 0x3F
    return (stall, None if wb == NO_SCOREBOARD else wb, None if rb == NO_SCOREBOARD else rb,
            frozenset(b for b in range(6) if mask >> b & 1))


_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]+) \*/")
_HIGH = re.compile(r"^\s*/\* (0x[0-9a-f]+) \*/\s*$")
_LABEL = re.compile(r"^(\.L_x_\d+):")
_BRANCH = re.compile(r"BRA\s+`\((\.L_x_\d+)\)")


def parse(listing: str) -> tuple[list[Instr], dict]:
    """nvdisasm -hex -c text -> (instructions in address order, label -> address)."""
    lines = listing.splitlines()
    out, labels, pending = [], {}, []
    i = 0
    while i < len(lines):
        m = _LABEL.match(lines[i])
        if m:
            pending.append(m.group(1))
            i += 1
            continue
        m = _LINE.match(lines[i])
        if m and i + 1 < len(lines) and _HIGH.match(lines[i + 1]):
            addr = int(m.group(1), 16)
            hi = int(_HIGH.match(lines[i + 1]).group(1), 16)
            out.append(Instr(addr, m.group(2), *decode_control(hi)))
            for name in pending:
                labels[name] = addr
            pending = []
            i += 2
            continue
        i += 1
    return out, labels


def loops(instrs: list[Instr], labels: dict, min_len: int = 1) -> list[list[Instr]]:
    """Every backward branch's body (from its target to the branch), at least min_len long."""
    at = {x.addr: n for n, x in enumerate(instrs)}
    out = []
    for n, x in enumerate(instrs):
        m = _BRANCH.search(x.text)
        target = labels.get(m.group(1)) if m else None
        if target is None or target >= x.addr:
            continue
        body = instrs[at[target]:n + 1]
        if len(body) >= min_len:
            out.append(body)
    return out


def inner_loop_spills(instrs: list[Instr], labels: dict) -> list[Instr]:
    """Spill code (LDL / STL) inside any loop but the largest (a persistent kernel's job
    loop): a value spilled there is reloaded once a job, one in a key loop every step."""
    bodies = sorted(loops(instrs, labels), key=len)
    spill = re.compile(KINDS["spill"])
    return [x for body in bodies[:-1] for x in body if spill.match(opcode(x.text))]


def loop_stats(body: list[Instr]) -> dict:
    """A loop's instruction count, static stall sum, waits on scoreboards and kinds."""
    row = {"from": f"{body[0].addr:#x}", "to": f"{body[-1].addr:#x}", "instructions": len(body),
           "stall clocks": sum(x.stall for x in body),
           "scoreboard waits": sum(1 for x in body if x.waits)}
    ops = [opcode(x.text) for x in body]
    for name, pat in KINDS.items():
        row[name] = sum(1 for op in ops if re.match(pat, op))
    return row


def opcode_counts(body: list[Instr]) -> list[tuple[str, int]]:
    """A loop's opcodes (with their modifiers, e.g. IMAD.WIDE) by count, most first: where
    an iteration's instructions go (bench/NOTES.md v16 / v17 read sel_h1's loop this way)."""
    counts = collections.Counter(opcode(x.text) for x in body)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def listing(body: list[Instr]) -> str:
    """A loop's instructions, one a line: address, static stall clocks, the scoreboards it
    waits for (the variable-latency results it needs) and the instruction."""
    lines = []
    for x in body:
        waits = ",".join(str(b) for b in sorted(x.waits)) or "-"
        lines.append(f"{x.addr:#07x}  {x.stall:2d}  {waits:>7}  {x.text}")
    return "\n".join(lines)


def opcode(text: str) -> str:
    """The instruction's opcode (after its predicate, if any)."""
    parts = text.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def find_tool(name: str) -> str | None:
    """$NAME (upper case) if set (None if it names no file), else PATH, else CUDA_BIN, else
    the bin folders of NVIDIA's PyPI wheels (the test extra installs nvidia-cuda-nvdisasm)."""
    env = os.environ.get(name.upper())
    if env:
        return env if os.path.exists(env) else None
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join([CUDA_BIN,
                                                                          *wheel_bins()]))


def wheel_bins() -> list[str]:
    """The `bin` folders of the installed `nvidia-*` wheels (e.g. nvidia/cu13/bin)."""
    try:
        import nvidia
    except ImportError:
        return []
    return sorted(p for root in nvidia.__path__ for p in glob.glob(os.path.join(root, "*", "bin")))


def disassemble(ptx: str, arch: str = "sm_90a") -> str:
    """ptxas then nvdisasm -hex -c on `ptx`; RuntimeError naming a missing tool."""
    ptxas, nvdisasm = find_tool("ptxas"), find_tool("nvdisasm")
    missing = [n for n, p in (("ptxas", ptxas), ("nvdisasm", nvdisasm)) if p is None]
    if missing:
        raise RuntimeError(f"{' and '.join(missing)} not found (set {missing[0].upper()}, or "
                           f"install CUDA / the nvidia-cuda-nvcc and nvidia-cuda-nvdisasm wheels)")
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run([ptxas, f"-arch={arch}", "-O3", src, "-o", cubin], check=True,
                       capture_output=True, text=True)
        return subprocess.run([nvdisasm, "-hex", "-c", cubin], check=True,
                              capture_output=True, text=True).stdout


def _parser():
    from . import common
    ap = argparse.ArgumentParser(prog="python -m tools.sass", description=__doc__.split("\n")[0])
    common.add_spec_options(ap, config="glm5", kv=["fp8"],
                            kind_help="comma list of launch kinds (default index_scoring)")
    ap.add_argument("--min-loop", type=int, default=200,
                    help="smallest loop listed, in instructions (default 200)")
    ap.add_argument("--ptx", default=None, help="a PTX file instead of building a launch")
    ap.add_argument("--listing", type=lambda t: int(t, 0), default=None, metavar="FROM",
                    help="also print the loop starting at address FROM (e.g. 0x4d90, the "
                         "table's 'from'): its instructions with their stalls and waits, "
                         "and its opcodes by count")
    return ap


def _ptx_of(args) -> list[tuple[str, str]]:
    if args.ptx:
        with open(args.ptx) as f:
            return [(args.ptx, f.read())]
    import stages  # noqa: F401  (registers the kinds)
    from monokernel.build import build_many
    from stages import kinds

    from . import common
    out = []
    for kname in args.kind or ["index_scoring"]:
        for rows in args.rows:
            for kv in args.kv:
                spec = common.make_spec(args.config, args.tp, rows, kv, "sm_90a")
                L = common.launch_for(kinds.kind(kname), spec, args.tune)
                (art,) = build_many([L.kernel("sm_90a")])
                out.append((f"{kname} {spec.path}", art.data.decode()))
    return out


def main(argv=None) -> int:
    from . import common
    args = _parser().parse_args(argv)
    try:
        listings = [(name, disassemble(ptx)) for name, ptx in _ptx_of(args)]
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cols = ["from", "to", "instructions", "stall clocks", "scoreboard waits", *KINDS]
    for name, text in listings:
        instrs, labels = parse(text)
        rows = [loop_stats(b) for b in loops(instrs, labels, args.min_loop)]
        print(f"\n{name}: {len(instrs)} instructions, {len(rows)} loop(s) of >= "
              f"{args.min_loop}")
        print(common.table(rows, cols) if rows else "  (none)")
        if args.listing is not None:
            body = next((b for b in loops(instrs, labels) if b[0].addr == args.listing), None)
            if body is None:
                print(f"error: no loop starts at {args.listing:#x} in {name}", file=sys.stderr)
                return 2
            print(f"\nloop {args.listing:#x}: address, stall clocks, waited scoreboards")
            print(listing(body))
            print("\nopcodes: " + ", ".join(f"{op} {n}" for op, n in opcode_counts(body)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
