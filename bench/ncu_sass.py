"""Read an Nsight Compute source page (SASS, per instruction) exported as CSV.

    ncu --import X.ncu-rep --page source --csv --print-source sass > X.csv  (gzip allowed)
    python3 bench/ncu_sass.py X.csv[.gz]                 stall reasons, the hottest instructions
    python3 bench/ncu_sass.py X.csv --regions            runs of instructions executed alike
    python3 bench/ncu_sass.py X.csv --span 3121 3517     one region: its stalls, instruction by
                                                         instruction (index = the CSV's row)

Why: the warp-state samples say where a kernel's warps wait and for what (long scoreboard =
a global load, barrier = a CTA barrier or a wgmma wait, no_inst = instruction fetch, ...),
instruction by instruction; bench/NOTES.md v19 read the scoring and the selection this way.
"""
from __future__ import annotations

import argparse
import csv
import gzip

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def load(path: str):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr = rows[1]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    return rows[2:], ix, stalls


def _int(r, ix, name):
    return int(r[ix[name]] or 0)


def stall_line(data, ix, stalls, total) -> str:
    agg = {s: sum(_int(r, ix, s) for r in data) for s in stalls}
    part = max(sum(agg.values()), 1)
    return " ".join(f"{k[6:]}={v / part:.1%}" for k, v in sorted(agg.items(), key=lambda x: -x[1])
                    if v)


def show(i, r, ix, stalls, total) -> str:
    top = sorted(((_int(r, ix, k), k[6:]) for k in stalls), reverse=True)[:3]
    return (f"{i:5d} {_int(r, ix, SAMPLES) / total:6.2%} {r[ix[EXECUTED]]:>9} "
            f"{r[ix['Source']].strip()[:64]:64s} " + " ".join(f"{k}:{v}" for v, k in top if v))


def regions(data, ix, total, min_share=0.01):
    """Runs of consecutive instructions executed about as often (a loop body, a prologue)."""
    out, start, acc, cur = [], 0, 0, None
    for i, r in enumerate(data + [None]):
        e = None if r is None else _int(r, ix, EXECUTED)
        if cur is not None and (r is None or (e != cur and not (cur and e and 0.8 < e / cur < 1.25))):
            if acc / total >= min_share:
                out.append((start, i - 1, acc / total, cur))
            start, acc = i, 0
        if r is None:
            break
        if cur is None or e != cur and not (cur and e and 0.8 < e / cur < 1.25):
            cur = e
        acc += _int(r, ix, SAMPLES)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30, help="hottest instructions shown")
    ap.add_argument("--regions", action="store_true")
    ap.add_argument("--span", type=int, nargs=2, metavar=("FIRST", "LAST"))
    ap.add_argument("--min", type=float, default=0.002, help="smallest share shown in a span")
    a = ap.parse_args(argv)
    data, ix, stalls = load(a.csv)
    total = max(sum(_int(r, ix, SAMPLES) for r in data), 1)
    print(f"{total} samples over {len(data)} instructions")
    print(stall_line(data, ix, stalls, total))
    if a.regions:
        for lo, hi, share, ex in regions(data, ix, total):
            print(f"{lo:5d}-{hi:5d} {share:6.1%}  executed ~{ex}  {data[lo][ix['Source']].strip()[:50]}")
    elif a.span:
        lo, hi = a.span
        seg = data[lo:hi + 1]
        print(f"span {lo}-{hi}: {sum(_int(r, ix, SAMPLES) for r in seg) / total:.1%} of samples; "
              + stall_line(seg, ix, stalls, total))
        for i, r in enumerate(seg, lo):
            if _int(r, ix, SAMPLES) / total >= a.min:
                print(show(i, r, ix, stalls, total))
    else:
        hot = sorted(range(len(data)), key=lambda i: -_int(data[i], ix, SAMPLES))[:a.top]
        for i in sorted(hot):
            print(show(i, data[i], ix, stalls, total))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
