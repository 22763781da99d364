"""The contract between indexer scoring (producer) and top-k selection (consumer).

Scores: f32, one row of `capacity` entries per decode row, entry p = the score of the key at
logical token position p of that row's request (positions past the row's visible bound are
never read). Scoring works in SEGMENTS of `segment` keys (a scoring job covers whole
segments); selection works in SLICES of whole segments (up to MAX_SLICES per row), run by
different CTAs that exchange per-digit histograms.

Order (DESIGN.md section 7): larger score first; -0.0 == +0.0; ties to the lower token
position; -inf and NaN never selected (NaNs counted). `ordered_key` maps a score to a u32
whose unsigned order is the score order, with every unselectable score mapped to 0:
    +0.0 / -0.0      -> 0x80000000
    x > 0            -> bits(x) | 0x80000000
    x < 0 (finite)   -> ~bits(x)
    -inf, NaN        -> 0 (NOT_SELECTABLE)
A finite negative never maps to 0 (~bits of a finite negative >= ~0xFF7FFFFF = 0x00800000),
so key 0 means exactly "never selected". The first radix digit is the top FIRST_DIGIT_BITS
bits: key >> 26, 64 bins; the scoring stage histograms it per (row, segment) into the
`score_hist` region so the selection can skip its first pass.

Refined first digits (optional, SelectConfig.fine_digits): the scoring also counts the top
REFINED_BITS = 10 bits (sign, the 8 exponent bits, one mantissa bit: half a binade a bin) per
(scoring job, row) into a `score_fine` region [jobs, rows, 1024]; the selection decides the
64-bin first digit as before, then the FINE_DIGIT_BITS below it from the 16 sub-bins of its
threshold bin summed over the jobs. Why: a 6-bit bin spans 8 binades, and the indexer's
scores put 6-86% of a row in the threshold's bin (a crowded row, listed only after a second
scan); half-binade bins leave 0.4-1.8% there (bench/first_digit_bins.py, bench/NOTES.md v30).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_BITS = 32
FIRST_DIGIT_BITS = 6
FIRST_DIGIT_BINS = 1 << FIRST_DIGIT_BITS
FIRST_DIGIT_SHIFT = KEY_BITS - FIRST_DIGIT_BITS  # 26
FINE_DIGIT_BITS = 4  # the refined first digit's bits below the 6-bit one
FINE_DIGIT_BINS = 1 << FINE_DIGIT_BITS  # sub-bins of one first-digit bin
REFINED_BITS = FIRST_DIGIT_BITS + FINE_DIGIT_BITS  # 10: sign, exponent, 1 mantissa bit
REFINED_BINS = 1 << REFINED_BITS  # 1024 counts a (job, row) in `score_fine`
REFINED_SHIFT = KEY_BITS - REFINED_BITS  # 22
NOT_SELECTABLE = 0
# score_gmax (IndexPlan.group_max, sm_90a): the maximum of each aligned GROUP_KEYS-key group
# of a row's scores, NaNs passed over and -inf as it is (a row holding either is scanned
# whole: its refined bin 0), +inf where the fix-up rescored a key (its old maximum may be
# stale); the group holding the row's bound an upper bound (the scores of the keys past the
# bound count; groups wholly past it hold anything: no reader looks); the scoring's head-sum
# D holds 16 keys a warp (index_score_sm90), and at 16 keys 7-33% of a row's groups hold a
# key the selection lists (bench/NOTES.md v39). The select_hist kind's input of the same
# name (SelectConfig.group_skip) is exact, +inf where a group holds a NaN or -inf
GROUP_KEYS = 16
GROUP_SHIFT = GROUP_KEYS.bit_length() - 1  # a key's group: position >> GROUP_SHIFT
GROUP_MAX_REGION = "score_gmax"


def group_max_word(capacity: int, row, key):
    """The score_gmax word [rows, capacity / GROUP_KEYS] of row `row`'s group holding `key`
    (ints or kernel values): the scoring's stores and the selection's loads agree on it."""
    return row * (capacity // GROUP_KEYS) + (key >> GROUP_SHIFT)
MAX_SLICES = 64
MAX_KEYS = 1 << 19  # 512K scores per row: the selection's stated limit
TOPK = 2048


def ordered_key(scores: np.ndarray) -> np.ndarray:
    """Host definition of the ordered key (the kernels implement the same rule)."""
    s = np.asarray(scores, np.float32)
    bits = s.view(np.uint32)
    neg = (bits >> 31).astype(bool)
    key = np.where(neg, ~bits, bits | np.uint32(0x80000000)).astype(np.uint32)
    key = np.where(s == 0, np.uint32(0x80000000), key)  # -0.0 == +0.0
    bad = np.isnan(s) | (s == -np.inf)
    return np.where(bad, np.uint32(NOT_SELECTABLE), key).astype(np.uint32)


def first_digit(keys: np.ndarray) -> np.ndarray:
    return (np.asarray(keys, np.uint32) >> FIRST_DIGIT_SHIFT).astype(np.int64)


def refined_digit(keys: np.ndarray) -> np.ndarray:
    """The refined first digit (REFINED_BITS from the top) of ordered keys: first_digit(key)
    * FINE_DIGIT_BINS + its sub-bin."""
    return (np.asarray(keys, np.uint32) >> REFINED_SHIFT).astype(np.int64)


@dataclass(frozen=True)
class ScoresLayout:
    rows: int
    capacity: int  # scores per row (>= the longest visible context)
    segment: int  # keys per scoring segment (first-digit histogram granularity)

    def __post_init__(self):
        if self.capacity > MAX_KEYS:
            raise ValueError(f"{self.capacity} scores per row exceed the selection's limit of "
                             f"{MAX_KEYS} (512K keys)")
        if self.capacity % self.segment:
            raise ValueError(f"capacity {self.capacity} must be whole segments of {self.segment}")

    @property
    def segments(self) -> int:
        return self.capacity // self.segment

    def slices(self, n_keys: int, max_slices: int = MAX_SLICES) -> list[tuple[int, int]]:
        """Split a row's first n_keys positions into at most max_slices runs of whole
        segments, as even as whole segments allow: [(start, end)), covering [0, n_keys)."""
        if n_keys > self.capacity:
            raise ValueError(f"{n_keys} keys exceed the row capacity {self.capacity}")
        nseg = -(-n_keys // self.segment)
        s = max(1, min(max_slices, nseg))
        bounds = [round(i * nseg / s) * self.segment for i in range(s + 1)]
        return [(bounds[i], min(bounds[i + 1], n_keys)) for i in range(s) if bounds[i] < n_keys]


def exact_topk_positions(scores: np.ndarray, k: int = TOPK) -> np.ndarray:
    """The reference selection by independent code: a sort by (-score, position) over the
    selectable scores (not through ordered_key), returned in ascending position."""
    s = np.asarray(scores, np.float64)
    pos = np.arange(len(s))
    ok = ~(np.isnan(s) | (s == -np.inf))
    s0 = np.where(s == 0, 0.0, s)  # -0.0 == +0.0
    order = np.lexsort((pos[ok], -s0[ok]))
    return np.sort(pos[ok][order[:k]])
