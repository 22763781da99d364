"""sel_h1 summing its row's first digits itself (SelectConfig.fold_first_digits): no sel_h0
stage and no message 0; every slice reads its row's segment histograms in bands from the top
until the row holds K keys at or above the last band read. Checked here: the exact top-k
(independent numpy order) and the same slots and diagnostics as sel_h0's round, bit for bit,
on every check_topk distribution in relaxed memory mode (rows whose threshold lies in the
top band, in a lower one, or that take every key), with bands of 4, 16 and 64 bins and 1
and 3 waves; the stages it builds; the fused index through it; bad settings rejected."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import ScoresLayout
from stages.select import (SelectConfig, make_inputs, random_block_table, request_positions,
                           select_launch)
from tools.check_topk import DISTS, check_rows, scores_for
from tools.common import apply_tunes

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs (test_select_tail's CFG)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, defer_fat_bins=True,
                   digits=(6, 9, 9, 8))
FOLD = dataclasses.replace(CFG, fold_first_digits=True)


def _case(dist, seed=51, pos=12000):
    rng = np.random.default_rng([seed, sorted(DISTS).index(dist)])
    n = request_positions(pos, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    return s, n, random_block_table(CFG, rng)


def _run(cfg, s, n, bt, waves=3, tunes=()):
    L = apply_tunes(select_launch(cfg, grid=3, waves=waves, hist="buffer"), tunes)
    r = L.run_interp(make_inputs(cfg, s, n, bt, hist="buffer"), step=0, mode="relaxed",
                     seed=9)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
    return r


def _same(a, b):
    """The same outputs, and the same message 1 (sel_h1's decision on the first digit in its
    state, and its next digit's counts): a fold that stopped short of the threshold would
    still select exactly (taking every key on the first digit), but decide nothing there."""
    for name in ("topk", "topk_diag"):
        assert np.array_equal(a.outputs[name], b.outputs[name]), name
    msg = CFG.msg(1)
    assert np.array_equal(a.regions[msg], b.regions[msg]), msg


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_the_fold_selects_what_sel_h0s_round_selects(dist):
    s, n, bt = _case(dist)
    _same(_run(FOLD, s, n, bt), _run(CFG, s, n, bt))


@pytest.mark.parametrize("bins,waves,dist", [(4, 3, "normal"), (4, 1, "zeros"),
                                             (64, 3, "neginf"), (16, 1, "few"),
                                             (4, 3, "allequal")])
def test_any_band_width_selects_the_same(bins, waves, dist):
    """Bands of 4 bins reach the threshold after several bands for normal scores; -inf, zeros
    and equal scores put it low (every band read)."""
    s, n, bt = _case(dist, seed=52)
    ref = _run(CFG, s, n, bt, waves=waves)
    _same(_run(FOLD, s, n, bt, waves=waves, tunes=[("sel_h1", "fold_bins", str(bins))]), ref)


def test_rows_of_fewer_keys_than_k_take_them_all():
    s, n, bt = _case("normal", seed=53, pos=100)
    _same(_run(FOLD, s, n, bt), _run(CFG, s, n, bt))


def test_the_fold_builds_no_sel_h0_and_reads_the_row():
    L = select_launch(FOLD, grid=3, waves=1, hist="buffer")
    names = [st.name for st in L.stages]
    assert names[0] == "sel_h1" and "sel_h0" not in names
    reads = {u.region for u in L.stages[0].reads(0)}
    assert FOLD.msg(0) not in reads and FOLD.rdy(0) not in reads
    rounds = select_launch(CFG, grid=3, waves=1, hist="buffer").stages[1]
    assert {CFG.msg(0), CFG.rdy(0)} <= {u.region for u in rounds.reads(0)}


def test_the_fused_index_selects_the_same_through_the_fold():
    from tools import check_topk
    assert check_topk.main(["--through", "index", "--rows", "2", "--pos", "2049",
                            "--tune", "launch.fold_first_digits=1"]) == 0


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="fold_first_digits"):
        select_launch(FOLD, grid=3, waves=1, hist=None)
    with pytest.raises(ValueError, match="fold_first_digits"):
        select_launch(FOLD, grid=3, waves=1, hist="stage")
    L = apply_tunes(select_launch(FOLD, grid=3, waves=1, hist="buffer"),
                    [("sel_h1", "fold_bins", "12")])
    with pytest.raises(ValueError, match="fold_bins = 12"):
        L.kernel()


@pytest.mark.parametrize("dist,pos", [("normal", 12000), ("few", 12000), ("normal", 300)])
def test_long_rows_fold_with_their_own_unroll_and_select_the_same(dist, pos):
    """sel_h1.segment_unroll_long: a row of more segments than one iteration of
    segment_unroll covers takes that many at once (one wave: G = 64 / (32 / 4) = 8 segment
    groups, segment_unroll 1 covers 8 of 12000 keys' 24 segments of 512, so the long form
    runs; 300 keys: one segment, the short form): the same slots, words and message 1."""
    from stages.select.config import FOLD_BAND_BINS, LOAD_KEYS
    s, n, bt = _case(dist, seed=54, pos=pos)
    groups = 64 // (FOLD_BAND_BINS // LOAD_KEYS)
    nseg = -(-int(n.max()) // CFG.layout.segment)
    assert (nseg > groups * 1) == (pos > 1000)
    ref = _run(FOLD, s, n, bt, waves=1)
    for long in ("4", "2"):
        _same(_run(FOLD, s, n, bt, waves=1, tunes=[("sel_h1", "segment_unroll", "1"),
                                                   ("sel_h1", "segment_unroll_long", long)]),
              ref)
    with pytest.raises(ValueError, match="segment_unroll_long = -1"):
        _run(FOLD, s, n, bt, waves=1, tunes=[("sel_h1", "segment_unroll_long", "-1")])
