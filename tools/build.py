"""Build one persistent kernel per launch kind and spec, write it with its manifest, and print
the register table.

    python -m tools.build [--config glm5] [--tp 8] [--rows 2,4,8] [--kv fp8]
                          [--target gfx950,gfx942] [--kind K1,K2] [--out out] [--workers N]
    python -m tools.build --proofs [--target ...] [--kernel rmsnorm,...] [--out out]

Writes DIR/<config>/tp<T>/r<R>/<kv>/<kind>.<target>.co (.ptx for sm_90a) and
<kind>.<target>.json beside it: the spec, the kernarg ABI, the arena layout, the schedule,
the register / spill / LDS figures with the chip's budget, and the bytes the launch moves.
The table's vgpr is the unified total the code object reports (arch VGPRs aligned to 4, then
the AGPRs); arch = vgpr - agpr.
Defaults: config glm5, TP 8 (1 for tiny), rows 2,4,8, kv fp8, targets gfx950 and gfx942,
every registered launch kind except test-only ones (name those with --kind, e.g. synthetic).
Identical kernels (same LLVM IR and target) are compiled once. Exits non-zero on any spill or
scratch use; `python -m tools.lint DIR` checks the written files against their manifests.

`--proofs` builds the compiler's proof kernels (monokernel.proofs) at the model's shapes
instead, into DIR/proofs/<kernel>.<target>.co.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from monokernel.build import Artifact, emit_llvm
from monokernel.backend.toolchain import Job, compile_many
from monokernel.codeobject import read_code_object
from monokernel.targets import AMD_TARGETS, target as get_target

from tools import common
from tools.lint import arch_vgprs, budget, unified_used

COLUMNS = ("kind", "spec", "target", "vgpr", "arch", "agpr", "sgpr", "vgpr_spill", "sgpr_spill",
           "scratch", "lds", "kernarg", "grid", "jobs", "MB")
PROOF_COLUMNS = ("kernel", "target", "vgpr", "sgpr", "agpr", "vgpr_spill", "sgpr_spill",
                 "scratch", "lds", "kernarg")
MANIFEST_FORMAT = "monokernel-launch/1"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_spec_options(ap, config='glm5', kv=['fp8'],
                            kind_help="comma list of launch kinds (default: every kind but test-only ones)")
    ap.add_argument("--target", type=common.target_list, default=["gfx950", "gfx942"],
                    help="comma list of gfx950, gfx942, sm_90a (default gfx950,gfx942)")
    ap.add_argument("--out", default="out", help="output folder (default out)")
    ap.add_argument("--workers", type=int, default=None,
                    help="parallel compiles (default: the machine's cores)")
    ap.add_argument("--proofs", action="store_true",
                    help="build the proof kernels (monokernel.proofs) instead of launch kinds")
    ap.add_argument("--kernel", default="", help="with --proofs: comma list of proof kernels")
    return ap


def spilled(fig: dict) -> bool:
    return bool(fig.get("vgpr_spill") or fig.get("sgpr_spill") or fig.get("scratch"))


def schedule_json(L) -> dict:
    s = L.schedule
    return dict(grid=s.num_ctas, jobs=s.num_jobs, entries=int(L.table.data[3]), policy=s.policy,
                makespan_estimate_ns=round(float(s.makespan), 3),
                stages=[dict(name=st.name, jobs=len(st.jobs())) for st in L.stages],
                table_sha256=hashlib.sha256(L.table.data.tobytes()).hexdigest(),
                cta_jobs=[[f"{k[0]}[{k[1]}]" for k in lst] for lst in s.cta_jobs])


def register_notes(fig: dict, kernel, target: str) -> dict:
    t = get_target(target)
    b = budget(t, kernel.threads, kernel.wave_size)
    notes = dict(budget=b)
    if fig.get("vgpr") is not None:
        notes["vgpr_note"] = ("vgpr is the unified total (arch VGPRs aligned to 4, then the "
                              "AGPRs); arch = vgpr - agpr")
        notes["arch_vgpr"] = arch_vgprs(fig["vgpr"], fig["agpr"])
        notes["unified_used"] = unified_used(fig["vgpr"])
        notes["within_budget"] = bool(
            notes["arch_vgpr"] <= b["vgpr"] and fig["agpr"] <= b["agpr"]
            and notes["unified_used"] <= b["unified"] and fig["sgpr"] <= b["sgpr"]
            and fig["lds"] <= b["lds"] and not spilled(fig))
    else:
        notes["note"] = ("PTX: registers and spills are decided by the driver's JIT (ptxas) at "
                         "load; the launcher reports them (CudaKernel.regs, local_bytes)")
    return notes


_LOCAL = re.compile(r"%([A-Za-z_][\w]*?)\.(\d+)\b")


def ir_key(ir: str) -> str:
    """The IR with its numbered local names renumbered from first use: two launches whose
    kernels differ only in the builder's global value counter compile once."""
    seen: dict = {}

    def sub(m):
        return f"%{m.group(1)}.{seen.setdefault(m.group(0), len(seen))}"
    return _LOCAL.sub(sub, ir)


def _compile(uniq: list[tuple[str, str]], workers: int | None, progress) -> dict:
    """Compile each unique (llvm_ir, target) in the toolchain's child processes."""
    out = {}
    n = max(1, min(len(uniq), workers or 64))
    with ThreadPoolExecutor(max_workers=n) as ex:
        futs = {ex.submit(compile_many, [Job(ir, tgt)], return_exceptions=True): (ir, tgt)
                for ir, tgt in uniq}
        for f in as_completed(futs):
            key = futs[f]
            try:
                out[key] = f.result()[0]
            except Exception as e:  # noqa: BLE001 - reported per artifact below
                out[key] = e
            progress.update(f"{'FAILED' if isinstance(out[key], Exception) else 'compiled'} "
                            f"for {key[1]}")
    return out


def build_kinds(args, ap) -> int:
    from stages import kinds
    t0 = time.time()
    tp = common.resolve_tp(ap, args.config, args.tp)
    names = args.kind or common.default_kinds()
    if args.kind is None and not kinds.default_names():
        print(f"note: no default launch kind is registered yet; building {', '.join(names)}")
    items = []  # (kind, spec, Launch, kernel)
    plan = [(k, r, kv, t) for k in names for r in args.rows for kv in args.kv for t in args.target]
    print(f"building {len(plan)} launches: kinds {', '.join(names)}; {args.config} TP {tp}; "
          f"rows {','.join(map(str, args.rows))}; kv {','.join(args.kv)}; "
          f"targets {','.join(args.target)}", flush=True)
    prog = common.Progress(len(plan), "link")
    for kname, rows, kv, tgt in plan:
        try:
            spec = common.make_spec(args.config, tp, rows, kv, tgt)
        except ValueError as e:
            ap.error(str(e))
        try:  # (a setting this launch cannot take: named before anything is written)
            L = common.launch_for(kinds.kind(kname), spec, args.tune)
            items.append((kname, spec, L, L.kernel(tgt)))
        except ValueError as e:
            prog.close()
            ap.error(f"{kname} {spec.path} {tgt}: {e}")
        prog.update(f"{kname} {spec.path} {tgt}")
    prog.close()
    irs = [emit_llvm(kern, kern.target) for _, _, _, kern in items]  # DSL errors raise here
    keys = [(ir_key(ir), kern.target) for ir, (_, _, _, kern) in zip(irs, items)]
    first = {}
    for ir, key in zip(irs, keys):
        first.setdefault(key, ir)
    uniq = [(first[k], k[1]) for k in first]
    prog = common.Progress(len(uniq), "compile")
    by_ir = _compile(uniq, args.workers, prog)
    compiled = {k: by_ir[(first[k], k[1])] for k in first}
    prog.close()
    out_root = Path(args.out)
    rows, bad, paths, errors = [], [], [], []
    for (kname, spec, L, kern), ir, key in zip(items, irs, keys):
        data = compiled[key]
        if isinstance(data, Exception):
            errors.append(f"{kname}.{kern.target} ({spec.path}): {type(data).__name__}: "
                          f"{str(data).strip().splitlines()[0] if str(data).strip() else ''}")
            rows.append(dict(kind=kname, spec=spec.path, target=kern.target,
                             grid=L.table.grid, jobs=L.schedule.num_jobs))
            continue
        if kern.target in AMD_TARGETS:
            art = Artifact(kern, kern.target, data, ir, read_code_object(data))
        else:
            art = Artifact(kern, kern.target, data.encode(), ir)
        fig = art.figures()
        moved = L.bytes_moved()
        art.extra = dict(
            format=MANIFEST_FORMAT, launch_kind=kname, file=f"{kname}.{kern.target}.{art.suffix}",
            spec=spec.to_json(), model=spec.config.to_json(),
            arena=L.arena.to_json(), schedule=schedule_json(L),
            registers=register_notes(fig, kern, kern.target),
            bytes_moved=dict(total=sum(moved.values()), items=moved),
            llvm_ir_sha256=hashlib.sha256(ir.encode()).hexdigest(),
            tunes=[f"{s}.{a}={v}" for s, a, v in args.tune])
        paths.append(art.write(out_root / spec.path, f"{kname}.{kern.target}"))
        row = dict(fig, kind=kname, spec=spec.path, grid=L.table.grid,
                   arch=None if fig.get("vgpr") is None else arch_vgprs(fig["vgpr"], fig["agpr"]),
                   jobs=L.schedule.num_jobs, MB=round(sum(moved.values()) / 1e6, 2))
        rows.append(row)
        if spilled(fig):
            bad.append(f"{kname}.{kern.target} ({spec.path})")
    print(common.table(rows, COLUMNS))
    print(f"\n{len(paths)} artifacts ({len(uniq)} distinct compiles) in {out_root.resolve()}/ "
          f"({time.time() - t0:.1f} s)")
    for e in errors:
        print(f"error: compiling {e}", file=sys.stderr)
    if bad:
        print(f"error: spills or scratch in {', '.join(bad)}", file=sys.stderr)
    return 1 if bad or errors else 0


def build_proofs(args, ap) -> int:
    from monokernel.build import build_many
    from monokernel.proofs import PROOFS
    t0 = time.time()
    known = list(PROOFS)  # (the registry loads lazily: list it before asking what it holds)
    names = common.csv(args.kernel) or known
    for n in names:
        if n not in known:
            ap.error(f"unknown kernel {n!r}; choose from {', '.join(PROOFS)}")
    kernels = [PROOFS[n].build(t, **PROOFS[n].full) for n in names for t in args.target
               if t in PROOFS[n].targets]
    print(f"building {len(kernels)} proof kernels for {', '.join(args.target)} ...", flush=True)
    arts = build_many(kernels, workers=args.workers)
    out = Path(args.out) / "proofs"
    paths = [a.write(out) for a in arts]
    print(common.table([a.figures() for a in arts], PROOF_COLUMNS))
    print(f"\n{len(paths)} artifacts in {out.resolve()}/ ({time.time() - t0:.1f} s)")
    bad = [a.figures() for a in arts if spilled(a.figures())]
    if bad:
        print(f"error: spills or scratch in {[b['kernel'] + '.' + b['target'] for b in bad]}",
              file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.kernel and not args.proofs:
        ap.error("--kernel names proof kernels: use it with --proofs")
    return build_proofs(args, ap) if args.proofs else build_kinds(args, ap)


if __name__ == "__main__":
    sys.exit(main())
