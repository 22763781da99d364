"""The row finish (SelectConfig.finish_max, stages/select.py `SelectPass._finish_row`): a
histogram pass from sel_h2 on whose decision leaves at most finish_max keys of a row with the
prefix found gathers them from every slice's list, decides the remaining digits locally,
places and emits its own slice, and flags it emitted in its message; later rounds pass the
row through. Checked here: the same topk slots and diagnostics as the rounds, bit for bit,
in the relaxed memory mode; which pass finished which row (normal scores after the second
digit, a crowded row whose lists sel_h2 builds only after the third, all-equal scores
never, nor a row the rounds decide final before (2049 keys above a tie)); bad settings
rejected by name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import ScoresLayout
from stages import select as sel
from stages.select import (SelectConfig, make_inputs, random_block_table, request_positions,
                           select_launch)
from tools.check_topk import check_rows, scores_for

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs of 3 waves (test_select_lists' CFG)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, defer_fat_bins=True)
FINISH = 256


def _scores(dist, rng, n):
    if dist == "binade":  # every key in the first-digit bin [1, 2): the row defers
        return rng.uniform(1.0, 2.0, (CFG.rows, CFG.capacity)).astype(np.float32)
    if dist == "steps":  # normal scores on a grid of 1/64: ~5 keys a value at the threshold,
        # one value a 15-bit prefix there, so the finish takes part of the threshold's ties
        return (np.round(rng.standard_normal((CFG.rows, CFG.capacity)) * 64) / 64
                ).astype(np.float32)
    return scores_for(dist, rng, n, CFG.capacity, CFG.topk)


def _emitted_by(cfg, r):
    """Per message q: the X_EMITTED flags of every (row, slice) it carries."""
    return [r.regions[cfg.msg(q)].reshape(cfg.rows, cfg.max_slices, -1)
            [:, :, cfg.state_word + sel.X_EMITTED] for q in range(cfg.passes)]


@pytest.mark.parametrize("dist,digits,seed,finished_at", [
    ("normal", (6, 9, 9, 8), 31, 2), ("nan", (6, 9, 9, 8), 31, 2),
    ("steps", (6, 9, 9, 8), 31, 2),
    ("above2049", (6, 7, 7, 6, 6), [31, 9, 5], 3), ("binade", (6, 7, 7, 6, 6), 3, 3),
    ("allequal", (6, 9, 9, 8), 31, None)])
def test_row_finish_selects_what_the_rounds_select(dist, digits, seed, finished_at):
    """(binade: the rows defer, so their lists exist only after sel_h2; seeds fixed where the
    data leave a row unfinished by the rounds' own final decisions)"""
    rng = np.random.default_rng(seed)
    n = request_positions(12000, CFG.rows)
    s = _scores(dist, rng, n)
    bt = random_block_table(CFG, rng)
    runs = []
    for fm in (FINISH, None):
        cfg = dataclasses.replace(CFG, digits=digits, finish_max=fm)
        L = select_launch(cfg, grid=3, waves=3)
        r = L.run_interp(make_inputs(cfg, s, n, bt), step=0, mode="relaxed", seed=11)
        assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], CFG.topk)
        runs.append((cfg, r))
    for name in ("topk", "topk_diag"):
        assert np.array_equal(runs[0][1].outputs[name], runs[1][1].outputs[name]), name
    flags, never = (_emitted_by(cfg, r) for cfg, r in runs)
    assert not any(f.any() for f in never)
    for q, f in enumerate(flags):  # every slice of every row flagged from its finish on
        want = finished_at is not None and q >= finished_at
        assert (f.all() if want else not f.any()), (q, f)


def test_a_single_candidate_is_never_finished():
    """One key left with the prefix makes the rounds' decision final (it is the one still
    needed), so a bound of 1 never finishes a row; the selection is the same."""
    rng = np.random.default_rng(32)
    n = request_positions(12000, CFG.rows)
    s = _scores("normal", rng, n)
    bt = random_block_table(CFG, rng)
    outs = []
    for fm in (FINISH, 1):
        cfg = dataclasses.replace(CFG, digits=(6, 7, 7, 6, 6), finish_max=fm)
        r = select_launch(cfg, grid=3, waves=2).run_interp(make_inputs(cfg, s, n, bt), step=0,
                                                            mode="random", seed=3)
        outs.append(r.outputs["topk"])
        if fm == 1:
            assert not any(f.any() for f in _emitted_by(cfg, r))
    assert np.array_equal(*outs)


@pytest.mark.parametrize("bad,match", [
    (dict(finish_max=0), "finish_max = 0"),
    (dict(finish_max=sel.FINISH_MAX_LIMIT + 1), f"finish_max = {sel.FINISH_MAX_LIMIT + 1}"),
    (dict(finish_max=64, solo_max_candidates=1024), "exclude each other")])
def test_bad_finish_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(CFG, **bad)
