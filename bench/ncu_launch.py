"""Launch one kind a few times, nothing else on the GPU between, for Nsight Compute.

    ncu --clock-control none -k regex:'^KIND$' --launch-skip 1 --launch-count 1 --set full \
        -o $OUT/KIND python3 bench/ncu_launch.py --kind KIND [--rows 8] [--pos 524287] \
        [--workload W1] [--tune STAGE.ATTR=VALUE]

Why: time_layers replays CUDA graphs of many launches with rotated inputs, a poor subject for
a profiler that replays each kernel once per metric pass. Here the inputs are made and copied
to the GPU first (torch's own kernels run before the first launch; `-k` filters them out), then
the launch runs `--launches` times on one arena with a fresh tag each (as a decode step's
launches do); `--launch-skip 1` profiles the second, with its code loaded and the caches as a
steady stream leaves them. ncu saves and restores the memory a kernel writes between its
passes, so every pass sees the same arena and the same mailboxes.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from stages import kinds  # noqa: E402
from tools import common  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", default="index_scoring")
    ap.add_argument("--config", default="glm5")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--pos", type=int, default=524287)
    ap.add_argument("--workload", default="W1", type=common.workload_list)
    common.add_tune_option(ap, "stage tunables (repeatable or a comma list)")
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args(argv)
    kind = kinds.kind(a.kind)
    spec = common.make_spec(a.config, common.resolve_tp(ap, a.config, None), a.rows, "fp8",
                            "sm_90a")
    L = common.launch_for(kind, spec, a.tune)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(0), a.pos,
                                    a.workload[0])
    be = common.backend("cuda")
    prepared = be.prepare(inp)
    arena = be.new_arena(L)
    for step in range(a.launches):
        be.run(L, prepared, arena, step)
    print(f"{a.launches} launches of {L.name} rows {a.rows} pos {a.pos} {a.workload[0]}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
