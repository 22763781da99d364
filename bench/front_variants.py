"""The front launch's K-split and wave count, timed side by side on the H200.

    python3 bench/front_variants.py [--rows 2,8] [--splits 3,6,12] [--waves 8] [--grids 132]

Each variant is checked against the float64 reference and timed exactly as
`tools.time_layers --kind front` times the default plan (graph replays, inputs rotated beyond
L2), then its timeline summary (per stage: first start, last end, median job) is printed:
the K-split decides how many rounds of projection jobs the 132 SMs run (246 jobs of 64 KB
at S = 6: two rounds; 123 jobs of 128 KB at S = 3: one round on 123 SMs).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from monokernel.launch import timing  # noqa: E402
from spec import BuildSpec  # noqa: E402
from stages import kinds  # noqa: E402
from stages.front import front_launch  # noqa: E402
from tools import common, time_layers  # noqa: E402


def _ints(s):
    return [int(x) for x in s.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="2,8")
    ap.add_argument("--splits", default="3,6,12")
    ap.add_argument("--waves", default="8")
    ap.add_argument("--grids", default="132", help="CTAs (264: two a SM, if registers allow)")
    common.add_tune_option(ap, "stage tunables for every variant (e.g. front_proj.straight=1)")
    a = ap.parse_args()
    args = time_layers._parser().parse_args(["--kind", "front", "--backend", "cuda",
                                             "--timeline"])
    ceil = timing.ceilings()
    print(f"ceilings: copy {ceil['copy_TBps']:.2f} TB/s", flush=True)
    kind = kinds.kind("front")
    for rows in _ints(a.rows):
        spec = BuildSpec.make("glm5", rows=rows, target="sm_90a")
        for waves, grid, splits in [(w, g, s) for w in _ints(a.waves) for g in _ints(a.grids)
                                for s in _ints(a.splits)]:
            L = common.apply_tunes(front_launch(spec, splits=splits, waves=waves, grid=grid),
                                   a.tune)
            # a failure (e.g. a grid that cannot be co-resident) is reported, the rest timed
            r = time_layers.time_or_report(kind, spec, args, ceil, 0, launch=L)
            if r["status"].startswith("FAILED"):
                print(f"rows {rows} waves {waves} grid {grid} splits {splits}: {r['status']}",
                      flush=True)
                continue
            line = (f"rows {rows} waves {waves} grid {grid} splits {splits} "
                    f"({L.plan.tiles * splits} proj jobs): {r['us']:.2f} us "
                    f"= {r['x_floor']:.2f}x floor ({r['status']})")
            if "_timeline" in r:
                Lt, host, scale, _ = r["_timeline"]
                for st in time_layers.stage_rows(Lt.timeline(host), scale, "us",
                                                 [s.name for s in Lt.stages]):
                    line += ("\n    " + "  ".join(f"{k} {v:.2f}" if isinstance(v, float)
                                                   else f"{k} {v}" for k, v in st.items()))
            print(line, flush=True)


if __name__ == "__main__":
    main()
