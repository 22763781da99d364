"""The standalone selection (`select_hist`) timed on the scores the fused `index` launch
computed, beside the same selection on normal scores, in one process.

    python3 bench/select_on_index_scores.py [--rows 8] [--pos 524287] [--workload W1]

Why: in the fused launch sel_h1 takes ~27 us a job against ~17 us standalone on normal
scores (bench/NOTES.md v8). Run on the indexer's own scores, the standalone kernel tells
whether the gap is the scores (how many keys share the threshold's first-digit bin) or the
fused kernel around them. Prints, per score source, the launch time and the timeline
(`tools.time_layers --timeline`), and how many of each row's keys fall in its threshold's
first-digit bin.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from layouts.scores import FIRST_DIGIT_SHIFT, ordered_key  # noqa: E402
from spec import BuildSpec  # noqa: E402
from stages import kinds  # noqa: E402
import stages.select as sel  # noqa: E402
from tools import common, time_layers  # noqa: E402


def index_scores(rows: int, pos: int, workload: str) -> tuple[np.ndarray, np.ndarray]:
    """One fused `index` launch on the H200: its scores [rows, capacity] and each row's
    key count (position + 1)."""
    kind = kinds.kind("index")
    spec = BuildSpec.make("glm5", rows=rows, target="sm_90a")
    L = kind.launch(spec)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(0), pos, workload)
    be = common.backend("cuda")
    res = be.run(L, be.prepare(inp), be.new_arena(L), 0)
    scores = np.asarray(res.regions["scores"], np.float32).reshape(rows, -1)
    return scores, np.asarray(inp["positions"], np.int64).reshape(-1) + 1


def threshold_bin_share(scores: np.ndarray, n: np.ndarray, k: int) -> list[float]:
    out = []
    for r in range(scores.shape[0]):
        keys = ordered_key(scores[r, :n[r]]) >> FIRST_DIGIT_SHIFT
        kth = np.sort(keys)[-k] if n[r] >= k else 0
        out.append(float((keys == kth).mean()))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--pos", type=int, default=524287)
    ap.add_argument("--workload", default="W1")
    a = ap.parse_args(argv)
    scores, n = index_scores(a.rows, a.pos, a.workload)
    share = threshold_bin_share(scores, n, sel.TOPK)
    print("keys in the threshold's first-digit bin, per row: "
          + " ".join(f"{x:.3f}" for x in share), flush=True)
    make = sel.make_inputs
    tl = ["--kind", "select_hist", "--config", "glm5", "--rows", str(a.rows), "--pos",
          str(a.pos), "--backend", "cuda", "--timeline"]
    print("== select_hist on normal scores", flush=True)
    time_layers.main(tl)

    def from_index(cfg, s, n_keys, *rest, **kw):  # the index launch's rows, not `s`
        own = scores[:, :cfg.capacity].copy()
        for r in range(cfg.rows):
            own[r, int(n_keys[r]):] = 0.0
        return make(cfg, own, n_keys, *rest, **kw)
    sel.make_inputs = from_index
    try:
        print("== select_hist on the index launch's scores", flush=True)
        time_layers.main(tl)
    finally:
        sel.make_inputs = make
    return 0


if __name__ == "__main__":
    sys.exit(main())
