"""The bucketed tail finish (SelectConfig.tail_finish, stages/select/tail.py): sel_h1 writes
its candidates bucketed by their second digit, and sel_out, deciding on message 1, gathers
the row's threshold bucket of every slice, resolves the plan's remaining digits by LDS
histogram passes (or ranks them), places and emits its slice. Checked here: the exact top-k
(independent numpy order) and the same slots and diagnostics as the exchange rounds, bit for
bit, on every check_topk distribution (relaxed memory mode: a missing fence shows), with the
candidates held in LDS and read again from the buckets (a row with more than the LDS holds),
ranked and by histogram passes, with 1 and 3 waves; the buckets against a numpy counting
sort; the stages it builds (no sel_h2 ..); bad settings rejected by name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import FIRST_DIGIT_SHIFT, ScoresLayout, ordered_key
from stages import select as sel
from stages.select import (SelectConfig, make_inputs, random_block_table, request_positions,
                           select_launch, slice_bounds)
from stages.select import config as sel_config
from tools.check_topk import DISTS, check_rows, scores_for
from tools.common import apply_tunes

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs (test_select_finish's CFG)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, defer_fat_bins=True,
                   digits=(6, 9, 9, 8))


def _run(cfg, s, n, bt, waves=3, mode="relaxed", tunes=()):
    L = apply_tunes(select_launch(cfg, grid=3, waves=waves), tunes)
    r = L.run_interp(make_inputs(cfg, s, n, bt), step=0, mode=mode, seed=11)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
    return r


def _case(dist, seed=31):
    rng = np.random.default_rng([seed, sorted(DISTS).index(dist)])
    n = request_positions(12000, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    return s, n, random_block_table(CFG, rng)


def _stepped_or(dist, seed):
    """(scores, n_keys, block table): a check_topk distribution, or "steps": normal scores on
    a grid of 1/64 (many equal keys at the threshold and within a bucket)."""
    rng = np.random.default_rng(seed)
    n = request_positions(12000, CFG.rows)
    if dist == "steps":
        s = (np.round(rng.standard_normal((CFG.rows, CFG.capacity)) * 64) / 64
             ).astype(np.float32)
    else:
        s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    return s, n, random_block_table(CFG, rng)


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_bucketed_finish_selects_what_the_rounds_select(dist):
    s, n, bt = _case(dist)
    rounds = _run(CFG, s, n, bt)
    cfg = dataclasses.replace(CFG, tail_finish=True)
    finished = _run(cfg, s, n, bt)
    for name in ("topk", "topk_diag"):
        assert np.array_equal(finished.outputs[name], rounds.outputs[name]), name


@pytest.mark.parametrize("dist,waves", [("normal", 1), ("allequal", 3), ("few", 1),
                                        ("above2048", 3)])
def test_candidates_read_again_from_the_buckets(dist, waves, monkeypatch):
    """A row with more candidates than the LDS holds (here: any row past 8) takes the same
    passes over the buckets themselves: the same selection."""
    s, n, bt = _case(dist, seed=7)
    cfg = dataclasses.replace(CFG, tail_finish=True)
    held = _run(cfg, s, n, bt, waves=waves, mode="random").outputs["topk"]
    monkeypatch.setattr(sel_config, "TAIL_FINISH_LDS", 8)
    reread = _run(cfg, s, n, bt, waves=waves, mode="random").outputs["topk"]
    assert np.array_equal(held, reread)


@pytest.mark.parametrize("dist,seed", [("normal", 5), ("steps", 6), ("above2049", 7)])
def test_ranked_and_histogram_passes_agree(dist, seed, monkeypatch):
    """The candidates ranked by key (a lane each) and the plan's remaining digits as LDS
    histogram passes: the same threshold, so the same selection ("steps": normal scores on
    a grid of 1/64, many equal keys at the threshold, so the finish splits their ties)."""
    s, n, bt = _stepped_or(dist, seed)
    cfg = dataclasses.replace(CFG, tail_finish=True)
    rounds = _run(CFG, s, n, bt).outputs
    ranked = _run(cfg, s, n, bt, tunes=[("sel_out", "tail_rank", "1")]).outputs
    passes = _run(cfg, s, n, bt).outputs
    for name in ("topk", "topk_diag"):
        assert np.array_equal(ranked[name], rounds[name]), name
        assert np.array_equal(passes[name], rounds[name]), name


@pytest.mark.parametrize("dist", ["normal", "steps"])
def test_the_buckets_are_a_counting_sort_of_the_candidates(dist):
    """Slice s's bucketed list: its candidates (selectable keys of the first threshold
    digit), bucket b (second digit b) at #(second digit > b), each bucket's keys the
    slice's keys of that digit (in any order)."""
    s, n, bt = _stepped_or(dist, 5)
    cfg = dataclasses.replace(CFG, tail_finish=True)
    r = _run(cfg, s, n, bt)
    lk = cfg.max_slice_keys()
    got = r.regions[cfg.list_bucket_keys].reshape(cfg.rows, cfg.max_slices, lk)
    B = cfg.bins(1)
    shift = 32 - cfg.digits[0] - cfg.digits[1]
    checked = 0
    for row in range(cfg.rows):
        keys = ordered_key(s[row, :n[row]])
        first = keys >> FIRST_DIGIT_SHIFT
        cum = np.cumsum(np.bincount(first, minlength=64)[::-1])[::-1]
        b0 = int((cum >= cfg.topk).sum()) - 1
        sc = slice_bounds(int(n[row]), cfg.segment, cfg.max_slices, 0)[0]
        for sl in range(sc):
            lo, hi = slice_bounds(int(n[row]), cfg.segment, cfg.max_slices, sl)[1:]
            ks = keys[lo:hi]
            cand = ks[(ks != 0) & ((ks >> FIRST_DIGIT_SHIFT) == b0)]
            digit = (cand >> shift) & (B - 1)
            at = 0
            for b in range(B - 1, -1, -1):
                want = np.sort(cand[digit == b])
                assert np.array_equal(np.sort(got[row, sl, at:at + want.size]), want), \
                    (row, sl, b)
                at += want.size
            checked += cand.size
    assert checked > 100  # the test saw candidates


def test_the_stages_stop_after_two_exchanged_digits():
    names = [st.name for st in sel.select_stages(dataclasses.replace(CFG, tail_finish=True))]
    assert names == ["sel_h0", "sel_h1", "sel_out"]
    assert [st.name for st in sel.select_stages(CFG)] == ["sel_h0", "sel_h1", "sel_h2",
                                                          "sel_h3", "sel_out"]


@pytest.mark.parametrize("bad,match", [
    (dict(tail_finish=True, digits=(6, 26)), "plan of 3 or more digits"),
    (dict(tail_finish=True, finish_max=64), "excludes finish_max"),
    (dict(tail_finish=True, solo_max_candidates=1024), "excludes finish_max")])
def test_bad_bucket_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(CFG, **bad)
