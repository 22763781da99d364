"""The selection (`select` kind) on the H200 against torch.topk in the same process.

    python3 bench/select_h200.py [--rows 2,8] [--pos 65536,524287]

Ours: tools.time_layers' measurement (graph replays, inputs rotated, checked against the
float64 reference first). Peer: torch.topk(k=2048) on the same [rows, keys] f32 scores,
graph-replayed the same way (torch.topk returns values and indices and orders them; ours
returns ascending positions: the comparison is of the work, as the issue asks).
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
    a = ap.parse_args()
    args = time_layers._parser().parse_args(["--kind", "select", "--backend", "cuda"])
    ceil = timing.ceilings()
    print(f"ceilings: copy {ceil['copy_TBps']:.2f} TB/s", flush=True)
    kind = kinds.kind("select")
    print(f"{'rows':>4} {'keys':>7} {'ours us':>8} {'x floor':>8} {'torch.topk us':>13} {'status'}")
    for rows in map(int, a.rows.split(",")):
        for pos in map(int, a.pos.split(",")):
            spec = BuildSpec.make("glm5", rows=rows, target="sm_90a")
            r = time_layers.time_one(kind, spec, args, ceil, pos)
            keys = pos + 1
            copies = timing.rotation(rows * keys * 4)
            scores = [torch.randn(rows, keys, device="cuda") for _ in range(copies)]
            st = {"i": 0}

            def peer():
                st["i"] += 1
                return torch.topk(scores[st["i"] % copies], 2048, dim=1)
            us_t = timing.timed_graph(peer, per_graph=max(20, copies))
            print(f"{rows:>4} {keys:>7} {r['us']:8.2f} {r['x_floor'] or 0:8.2f} {us_t:13.2f} "
                  f"{r['status']}", flush=True)


if __name__ == "__main__":
    main()
