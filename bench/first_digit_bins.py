"""How crowded a row's threshold bin is at each width of the first radix digit, on the
indexer's own scores (the float64 reference of kind `index_scoring`, CPU only):

    python3 bench/first_digit_bins.py [--rows 8] [--pos 131071] [--k 512] [--workload W1]

Why: the selection lists a slice's keys at or above the first digit's threshold bin; a bin
that holds much of the row makes the list long, so SelectConfig.defer_fat_bins lists such a
row only after a second scan. The 6-bit first digit (sign and 5 exponent bits: 8 binades a
bin) is the scoring's contract; SelectConfig.fine_digits refines it to 10 bits. Prints, per
row, the share of its keys in the bin of its K-th largest key for digits of 6 .. 15 bits, and
(`--groups`) the share of aligned G-key groups holding a key sel_h1 lists (at or above the
refined 10-bit threshold bin): what a scan that skips groups by their maximum would still read
(bench/NOTES.md v39's design).
`--k`: the top-k taken; at a context shorter than 512K, K * pos / 512K keeps the quantile of
top-2048 at 512K (the default: 512 of 128K).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from layouts.scores import KEY_BITS, REFINED_SHIFT, ordered_key  # noqa: E402
from spec import BuildSpec  # noqa: E402
from stages import kinds  # noqa: E402
from stages.index_ref import reference  # noqa: E402
from tools import common  # noqa: E402

WIDTHS = (6, 8, 10, 11, 12, 15)
GROUP_SIZES = (16, 32, 64)  # keys a group: a warp's keys of a head-sum step (16), a page (64)


def shares(scores: np.ndarray, n: np.ndarray, k: int) -> list[dict]:
    """Per row {width: fraction of its n keys in the bin of its k-th largest key}."""
    out = []
    for r in range(scores.shape[0]):
        keys = ordered_key(scores[r, :n[r]]).astype(np.int64)
        kth = np.sort(keys)[-k]
        out.append({w: float(((keys >> (KEY_BITS - w)) == (kth >> (KEY_BITS - w))).mean())
                    for w in WIDTHS})
    return out


def group_shares(scores: np.ndarray, n: np.ndarray, k: int) -> list[dict]:
    """Per row {G: fraction of its aligned G-key groups (those holding a key below n) with a
    key at or above the refined first digit's threshold bin, i.e. a key sel_h1 lists}."""
    out = []
    for r in range(scores.shape[0]):
        keys = ordered_key(scores[r, :n[r]]).astype(np.int64)
        kth = np.sort(keys)[-k]
        listed = (keys >> REFINED_SHIFT) >= (kth >> REFINED_SHIFT)
        row = {"listed": float(listed.mean())}
        for g in GROUP_SIZES:
            padded = np.zeros(-(-len(listed) // g) * g, bool)
            padded[:len(listed)] = listed
            row[g] = float(padded.reshape(-1, g).any(axis=1).mean())
        out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--pos", type=int, default=131071)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--workload", default="W1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", action="store_true",
                    help="also the share of G-key groups holding a listed key")
    a = ap.parse_args(argv)
    kind = kinds.kind("index_scoring")
    spec = BuildSpec.make("glm5", rows=a.rows, target="sm_90a")
    L = kind.launch(spec)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(a.seed), a.pos,
                                    a.workload)
    scores = reference(L.plan, inp)["scores"].astype(np.float32)
    n = np.asarray(inp["positions"]).reshape(-1) + 1
    print(f"glm5 rows {a.rows} pos {a.pos} {a.workload}: share of a row's keys in the bin of "
          f"its {a.k}-th largest key, by first-digit width")
    print("row  " + "  ".join(f"{w:>2} bits" for w in WIDTHS))
    for r, row in enumerate(shares(scores, n, a.k)):
        print(f"{r:>3}  " + "  ".join(f"{100 * row[w]:6.2f}%" for w in WIDTHS))
    if a.groups:
        print("row  listed  " + "  ".join(f"{g:>2}-key groups" for g in GROUP_SIZES))
        for r, row in enumerate(group_shares(scores, n, a.k)):
            print(f"{r:>3}  {100 * row['listed']:5.2f}%  " +
                  "  ".join(f"{100 * row[g]:12.2f}%" for g in GROUP_SIZES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
