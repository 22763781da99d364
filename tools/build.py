"""Build the default code objects and print their register figures.

    python -m tools.build [--out DIR] [--target gfx950,gfx942] [--kernel rmsnorm,...]

Until the launch kinds exist the defaults are the compiler's proof kernels (monokernel.proofs)
at the model's shapes, for gfx950 and gfx942 (and sm_90a PTX on request). Writes
DIR/proofs/<kernel>.<target>.co (.ptx) with a JSON manifest beside each.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from monokernel.build import build_many
from monokernel.proofs import PROOFS
from monokernel.targets import TARGETS

COLUMNS = ("kernel", "target", "vgpr", "sgpr", "agpr", "vgpr_spill", "sgpr_spill", "scratch",
           "lds", "kernarg")


def _csv(s):
    return [x for x in s.split(",") if x]


def table(rows, columns=COLUMNS) -> str:
    cells = [[str(r.get(c, "")) if r.get(c) is not None else "-" for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="out", help="output folder (default: out)")
    ap.add_argument("--target", default="gfx950,gfx942", help="comma list of gfx950, gfx942, sm_90a")
    ap.add_argument("--kernel", default="", help="comma list of proof kernels (default: all)")
    ap.add_argument("--workers", type=int, default=None, help="parallel compiles (default: cores)")
    args = ap.parse_args(argv)
    targets = _csv(args.target)
    for t in targets:
        if t not in TARGETS or t == "interp":
            ap.error(f"unknown target {t!r}; choose from gfx950, gfx942, sm_90a")
    names = _csv(args.kernel) or list(PROOFS)
    for n in names:
        if n not in PROOFS:
            ap.error(f"unknown kernel {n!r}; choose from {', '.join(PROOFS)}")
    t0 = time.time()
    kernels = []
    for n in names:
        p = PROOFS[n]
        for t in targets:
            if t in p.targets:
                kernels.append(p.build(t, **p.full))
    print(f"building {len(kernels)} kernels for {', '.join(targets)} ...", flush=True)
    arts = build_many(kernels, workers=args.workers)
    out = Path(args.out) / "proofs"
    paths = [a.write(out) for a in arts]
    print(table([a.figures() for a in arts]))
    print(f"\n{len(paths)} artifacts in {out.resolve()}/ ({time.time() - t0:.1f} s)")
    bad = [a.figures() for a in arts if (a.figures().get("vgpr_spill") or a.figures().get("sgpr_spill")
                                          or a.figures().get("scratch"))]
    if bad:
        print(f"error: spills or scratch in {[b['kernel'] + '.' + b['target'] for b in bad]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
