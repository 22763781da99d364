"""Run launches on seeded inputs and dump a digest of everything they write; compare dumps.

    python -m tools.check_layer [--kind front] [--config tiny] [--tp T] [--rows 2,4,8]
                                [--kv fp8,bf16] [--launches 2] [--seed 0]
                                [--backend interp|cuda|hip] [--chip gfx950] [--mode inorder]
                                [--workload W1,W2] [--dump DIR] [--perturb]
    python -m tools.check_layer --compare A B

For every (kind, config, tp, rows, kv) it builds the launch for the backend's target, zeroes
one arena and runs `--launches` launches on it (steps 0, 1, ...: the arena is never reset,
so later launches prove the tags), each on fresh inputs from the kind's inputs function,
seeded by (--seed, launch). Per launch it records the sha256 of the bytes of every output
buffer ("output/<name>") and of every arena region ("arena/<name>": the region's whole span,
tags and counters included), and the max-norm relative error of every output and region
against the stages' float64 reference (Launch.reference) with the stage's tolerance, and
the exact checks a launch offers (Launch.exact_errors: kind index's top-k against an
independent exact top-k of the scores the run wrote, tolerance 0). It writes DIR/<config>/tp<T>/r<R>/<kv>/<kind>.json and prints one row per launch; exits 1 if an
error exceeds its tolerance (or a launch fails).

`--compare A B` matches the files of two dumps and every digest in them, prints each digest
that differs (or is missing on one side) and exits 1 if any does, 0 if all are equal. The
same backend and inputs must give identical digests run after run.

`--workload W1,W2` (kinds with a key cache: index, index_scoring; ignored with a note for
the others; DESIGN.md section 8): W1 (default) = one request of R rows; W2 = R/2 requests
of 2 rows whose block tables map the same physical pages for every page they only read
(tools.common.workload_inputs), dumped to <kind>.W2.json. Their scores are checked against
the float64 reference and against float64 scores of the kernel's own FP8 operands
(tools.common.score_errors).

`--perturb` (the negative control) flips ONE input bit before every launch: element 0 of the
first floating-point input buffer in ABI order (outputs excluded), its most significant
mantissa bit (f32 bit 22, bf16 bit 6, e4m3 bit 2). The dump records which; its digests must
differ from an unperturbed dump's.

Backends: interp (the numpy interpreter; --mode inorder|random|relaxed|acquire_only), cuda (an NVIDIA GPU,
sm_90a PTX), hip (an AMD GPU through libamdhip64, the code object for --chip; untested: no
AMD GPU is available to the project, and it fails with a clear message without ROCm).
Defaults: kind front (synthetic until front is registered), config tiny, TP 1 for tiny and 8
for GLM configs, rows 2,4,8, kv fp8,bf16, 2 launches, backend interp.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from monokernel.interp import MODES
from tools import common

FORMAT = "monokernel-digests/1"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.check_layer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_spec_options(ap, config='tiny', kv=['fp8', 'bf16'],
                            kind_help="comma list of launch kinds (default front; synthetic until front exists)")
    common.add_workload_option(ap)
    ap.add_argument("--launches", type=int, default=2,
                    help="launches per spec on one never-reset arena (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    ap.add_argument("--backend", choices=("interp", "cuda", "hip"), default="interp",
                    help="where the launches run (default interp)")
    ap.add_argument("--chip", choices=("gfx950", "gfx942"), default="gfx950",
                    help="with --backend hip: the code object's chip (default gfx950)")
    ap.add_argument("--mode", choices=MODES, default="inorder",
                    help="with --backend interp: the interpreter's memory mode (default inorder)")
    ap.add_argument("--dump", default="digests", help="output folder (default digests)")
    ap.add_argument("--perturb", action="store_true",
                    help="flip one input bit (see above): the digests must change")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"),
                    help="compare two dumps instead of running")
    return ap


def run_one(kind, spec, backend, *, launches: int, seed: int, perturb: bool,
            workload: str = "W1", tunes=()) -> dict:
    L = common.launch_for(kind, spec, tunes)
    arena = backend.new_arena(L)
    flipped = common.perturb_target(L) if perturb else None
    records = []
    for i in range(launches):
        inputs, _ = common.workload_inputs(kind, L, spec, np.random.default_rng([seed, i]), None,
                                           workload)
        if flipped:
            common.flip_bit(inputs, *flipped)
        prepared = backend.prepare(inputs)
        t0 = time.time()
        res = backend.run(L, prepared, arena, i)
        secs = time.time() - t0
        outs = backend.outputs(L, res, prepared, inputs)
        host_arena = res.arena if isinstance(res.arena, np.ndarray) else np.asarray(res.arena)
        digests = {f"output/{n}": common.sha(v) for n, v in sorted(outs.items())}
        for p in L.arena:
            digests[f"arena/{p.name}"] = common.sha(common.region_bytes(L, host_arena, p.name))
        errors = common.reference_errors(L, inputs, outs, res.regions)
        # outputs exact on the kernel's own intermediates (kind index: its top-k of the
        # scores it computed), which no float64 reference is: Launch.exact_errors
        exact = getattr(L, "exact_errors", None)
        errors.update(exact(inputs, outs, res.regions) if exact else {})
        records.append(dict(launch=i, step=i, tag=int(res.tag), seconds=round(secs, 3),
                            digests=digests, errors=errors))
    return dict(format=FORMAT, kind=kind.name, spec=spec.to_json(), backend=backend.name,
                seed=seed, workload=workload, perturb=None if not flipped else dict(
                    buffer=flipped[0], element=flipped[1], bit=flipped[2]),
                launches=records)


def _ratio(err: dict) -> float:
    """An error over its tolerance (an exact check, tolerance 0: 0 or infinity)."""
    if err["tol"]:
        return err["rel_err"] / err["tol"]
    return float("inf") if err["rel_err"] else 0.0


def combined(digests: dict) -> str:
    import hashlib
    h = hashlib.sha256()
    for k in sorted(digests):
        h.update(f"{k}={digests[k]}\n".encode())
    return h.hexdigest()[:16]


def run(args, ap) -> int:
    from stages import kinds
    tp = common.resolve_tp(ap, args.config, args.tp)
    names = args.kind or common.preferred_kind("front")
    if args.launches < 1:
        ap.error(f"--launches {args.launches} must be at least 1")
    try:
        be = common.backend(args.backend, chip=args.chip, mode=args.mode, seed=args.seed)
    except Exception as e:  # noqa: BLE001 - a missing GPU stack: say which and stop
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = Path(args.dump)
    plan, noted = [], {}
    for k in names:
        for r in args.rows:
            for kv in args.kv:
                spec = common.make_spec(args.config, tp, r, kv, be.target)
                wls = common.workloads_for(kinds.kind(k).launch(spec), args.workload)
                if wls == ["-"] and args.workload != ["W1"] and not noted.get(k):
                    print(f"note: {k} has no key cache; --workload ignored", flush=True)
                    noted[k] = True
                plan += [(k, r, kv, wl) for wl in wls]
    print(f"check_layer: {len(plan)} specs x {args.launches} launches on {be.name}; kinds "
          f"{', '.join(names)}; {args.config} TP {tp}"
          + ("; PERTURBED (one input bit flipped)" if args.perturb else ""), flush=True)
    rows, failed = [], 0
    prog = common.Progress(len(plan), "run")
    for kname, r, kv, wl in plan:
        spec = common.make_spec(args.config, tp, r, kv, be.target)
        kind = kinds.kind(kname)
        try:
            rec = run_one(kind, spec, be, launches=args.launches, seed=args.seed,
                          perturb=args.perturb, workload=wl, tunes=args.tune)
        except Exception as e:  # noqa: BLE001 - a failed launch is reported, the rest run
            failed += 1
            rows.append(dict(kind=kname, spec=spec.path, wl=wl, launch="-", digest="-",
                             worst="-", status=f"FAILED: {type(e).__name__}: {e}"))
            prog.update(f"{kname} {spec.path} FAILED")
            continue
        # W1 (and kinds without a key cache) keep the dump's file name: W2 gets its own
        path = root / spec.path / (f"{kname}.json" if wl != "W2" else f"{kname}.W2.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        for lr in rec["launches"]:
            errs = lr["errors"]
            worst = max(errs.items(), key=lambda kv_: _ratio(kv_[1]),
                        default=None)
            ok = all(e["ok"] for e in errs.values())
            failed += not ok
            rows.append(dict(kind=kname, spec=spec.path, wl=wl, launch=lr["launch"],
                             tag=lr["tag"],
                             digest=combined(lr["digests"]), n=len(lr["digests"]),
                             worst=f"{worst[0]} {worst[1]['rel_err']:.2e} (tol {worst[1]['tol']:.0e})"
                             if worst else "-", s=lr["seconds"], status="ok" if ok else "ERROR"))
        prog.update(f"{kname} {spec.path}")
    prog.close()
    print(common.table(rows, ("kind", "spec", ("wl", "workload"), "launch", "tag",
                              ("n", "digests"),
                              ("digest", "combined digest"), ("worst", "worst error vs float64"),
                              "s", "status")))
    print(f"\ndigests in {root.resolve()}/")
    if failed:
        print(f"error: {failed} launch(es) failed or exceeded their tolerance", file=sys.stderr)
        return 1
    return 0


def load_dump(root: Path) -> dict:
    """{(file, launch, digest name): sha256} of a dump folder."""
    out = {}
    for f in sorted(root.rglob("*.json")):
        try:
            d = json.loads(f.read_text())
        except ValueError:
            continue
        if d.get("format") != FORMAT:
            continue
        rel = str(f.relative_to(root))
        for lr in d["launches"]:
            for name, h in lr["digests"].items():
                out[(rel, lr["launch"], name)] = h
    return out


def compare(a: Path, b: Path) -> int:
    for p in (a, b):
        if not p.is_dir():
            print(f"error: {p} is not a dump folder", file=sys.stderr)
            return 2
    da, db = load_dump(a), load_dump(b)
    if not da and not db:
        print(f"error: neither {a} nor {b} holds check_layer digests", file=sys.stderr)
        return 2
    diffs = 0
    for key in sorted(set(da) | set(db)):
        ha, hb = da.get(key), db.get(key)
        if ha != hb:
            diffs += 1
            f, launch, name = key
            print(f"DIFF {f} launch {launch} {name}: {(ha or 'missing')[:16]} != "
                  f"{(hb or 'missing')[:16]}")
    n = len(set(da) | set(db))
    if diffs:
        print(f"{diffs} of {n} digests differ")
        return 1
    print(f"all {n} digests equal")
    return 0


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.compare:
        return compare(Path(args.compare[0]), Path(args.compare[1]))
    return run(args, ap)


if __name__ == "__main__":
    sys.exit(main())
