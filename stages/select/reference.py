"""Host-side facts of the selection: the scoring's first-digit histograms as numpy computes
them, the input checks, and the exact top-k by a sort (sharing nothing with the kernel)."""
from __future__ import annotations

import numpy as np

from layouts.scores import (FIRST_DIGIT_BINS, FIRST_DIGIT_SHIFT, GROUP_KEYS, MAX_KEYS,
                            REFINED_BINS, TOPK, exact_topk_positions, ordered_key,
                            refined_digit)

from .config import DIAG_WORDS, MAX_PAGE, PAGE, SelectConfig


# ----------------------------------------------------------------------------- host side

def segment_histograms(cfg: SelectConfig, scores: np.ndarray, n_keys) -> np.ndarray:
    """[rows, segments, 64] u32: what the scoring publishes in score_hist."""
    R, seg = scores.shape[0], cfg.segment
    out = np.zeros((R, cfg.segments, FIRST_DIGIT_BINS), np.uint32)
    for r in range(R):
        n = int(n_keys[r])
        keys = ordered_key(scores[r, :n]) >> FIRST_DIGIT_SHIFT
        for g in range(-(-n // seg)):
            out[r, g] = np.bincount(keys[g * seg:(g + 1) * seg], minlength=FIRST_DIGIT_BINS)
    return out


def fine_histograms(cfg: SelectConfig, scores: np.ndarray, n_keys) -> np.ndarray:
    """[fine_parts, rows, 1024] u32: refined first-digit counts of each row's visible keys
    split into cfg.fine_parts contiguous parts (any split sums to the row's counts, which is
    all the selection reads; the scoring's parts are its jobs)."""
    R, J = scores.shape[0], cfg.fine_parts
    out = np.zeros((J, R, REFINED_BINS), np.uint32)
    for r in range(R):
        n = int(n_keys[r])
        digits = refined_digit(ordered_key(scores[r, :n]))
        for j in range(J):
            out[j, r] = np.bincount(digits[j * n // J:(j + 1) * n // J], minlength=REFINED_BINS)
    return out


def group_maxima(cfg: SelectConfig, scores: np.ndarray, n_keys) -> np.ndarray:
    """[rows, capacity / GROUP_KEYS] f32: the maximum of each aligned 16-key group of a row's
    visible keys, +inf where one of them is NaN or -inf (its group is then always scanned:
    the selection counts those keys), -inf past them: the select_hist kind's score_gmax
    (SelectConfig.group_skip)."""
    R, G = scores.shape[0], cfg.capacity // GROUP_KEYS
    out = np.full((R, G), -np.inf, np.float32)
    for r in range(R):
        n = int(n_keys[r])
        pad = -(-n // GROUP_KEYS) * GROUP_KEYS
        s = np.full(pad, -np.inf, np.float32)
        s[:n] = scores[r, :n]
        bad = np.zeros(pad, bool)
        bad[:n] = ~(s[:n] > -np.inf)  # NaN or -inf
        m = np.where(bad, -np.inf, s).reshape(-1, GROUP_KEYS).max(axis=1)
        m[bad.reshape(-1, GROUP_KEYS).any(axis=1)] = np.inf
        out[r, :len(m)] = m
    return out


def validate_inputs(cfg: SelectConfig, scores, n_keys, block_table):
    """The host's check of what the kernel also rejects (sel_h0's error word): a clear
    ValueError naming the bad value, before anything is launched."""
    n_keys = np.asarray(n_keys)
    bt = np.asarray(block_table)
    if np.asarray(scores).shape != (cfg.rows, cfg.capacity):
        raise ValueError(f"scores shape {np.asarray(scores).shape} != ({cfg.rows}, {cfg.capacity})")
    if bt.shape != (cfg.rows, cfg.bt_width):
        raise ValueError(f"block table shape {bt.shape} != ({cfg.rows}, {cfg.bt_width})")
    for r in range(cfg.rows):
        n = int(n_keys[r])
        if n > MAX_KEYS:
            raise ValueError(f"row {r}: {n} keys exceed the selection's limit of {MAX_KEYS} "
                             "(512K keys)")
        if not 0 <= n <= cfg.capacity:
            raise ValueError(f"row {r}: n_keys = {n} outside 0..{cfg.capacity} (the scores' "
                             "capacity)")
        pages = bt[r, :-(-n // PAGE)]
        bad = np.flatnonzero((pages < 0) | (pages > MAX_PAGE))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"row {r}: block_table[{r}, {i}] = {int(pages[i])} for visible "
                             f"keys {i * PAGE}..{min(n, (i + 1) * PAGE) - 1} (a page must be "
                             f">= 0)")


def reference_select(scores, n_keys, block_table, k: int = TOPK):
    """(slots [rows, k] int32, diag [rows, 4] u32: NaNs, selected, -inf or NaN, visible) by
    the independent reference layouts.scores.exact_topk_positions."""
    scores = np.asarray(scores, np.float32)
    R = scores.shape[0]
    out = np.full((R, k), -1, np.int32)
    diag = np.zeros((R, DIAG_WORDS), np.uint32)
    for r in range(R):
        n = int(n_keys[r])
        pos = exact_topk_positions(scores[r, :n], k)
        pages = np.asarray(block_table[r], np.int64)[pos // PAGE]
        if (pages < 0).any():
            raise ValueError(f"row {r}: a selected key's page is {int(pages.min())}")
        out[r, :pos.size] = (pages * PAGE + pos % PAGE).astype(np.int32)
        row = scores[r, :n]
        diag[r] = (int(np.isnan(row).sum()), pos.size,
                   int((np.isnan(row) | np.isneginf(row)).sum()), n)
    return out, diag

