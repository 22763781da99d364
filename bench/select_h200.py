"""The selection (`select` kind) on the H200 against torch.topk in the same process.

    python3 bench/select_h200.py [--rows 2,8] [--pos 65536,524287] [--kinds select,select_hist]

Ours: tools.time_layers' measurement (graph replays, inputs rotated, checked against the
float64 reference first). Peer: torch.topk(k=2048) on the same [rows, keys] f32 scores,
graph-replayed the same way (torch.topk returns values and indices and orders them; ours
returns ascending positions: the comparison is of the work, as the issue asks).
Kinds: `select` makes its own first-digit pass over the scores; `select_hist` takes the
first digits as the scoring publishes them (what the fused index launch does), so it reads
the scores once (sel_h1, which compacts the candidate lists the later passes read).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from monokernel.launch import timing  # noqa: E402
from spec import BuildSpec  # noqa: E402
from stages import kinds  # noqa: E402
from tools import time_layers  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="2,8")
    ap.add_argument("--pos", default="65536,524287")
    ap.add_argument("--kinds", default="select,select_hist")
    a = ap.parse_args()
    args = time_layers._parser().parse_args(["--kind", "select", "--backend", "cuda"])
    ceil = timing.ceilings()
    print(f"ceilings: copy {ceil['copy_TBps']:.2f} TB/s", flush=True)
    print(f"{'kind':>11} {'rows':>4} {'keys':>7} {'ours us':>8} {'x floor':>8} "
          f"{'torch.topk us':>13} {'status'}")
    for rows in map(int, a.rows.split(",")):
        for pos in map(int, a.pos.split(",")):
            spec = BuildSpec.make("glm5", rows=rows, target="sm_90a")
            res = {name: time_layers.time_one(kinds.kind(name), spec, args, ceil, pos)
                   for name in a.kinds.split(",")}
            keys = pos + 1
            copies = timing.rotation(rows * keys * 4)
            scores = [torch.randn(rows, keys, device="cuda") for _ in range(copies)]
            st = {"i": 0}

            def peer():
                st["i"] += 1
                return torch.topk(scores[st["i"] % copies], 2048, dim=1)
            us_t = timing.timed_graph(peer, per_graph=max(20, copies))
            for name, r in res.items():
                print(f"{name:>11} {rows:>4} {keys:>7} {r['us']:8.2f} {r['x_floor'] or 0:8.2f} "
                      f"{us_t:13.2f} {r['status']}", flush=True)


if __name__ == "__main__":
    main()
