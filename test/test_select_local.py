"""The selection's local finish (stages/select.py, "Local finish"): a row whose candidate
lists hold at most `local_max_candidates` keys is finished in sel_h2 by every slice's job,
each gathering the row's lists into LDS, resolving the remaining digits there and emitting
its own slice; the other rows take the exchange rounds, in the same launch. Checked here:
each row takes the path the host predicts from its first digits, outputs exact against the
independent top-k over poisoned outputs and bit for bit what the rounds alone give (ties
straddling slices, empty lists, NaN / -inf, K of 1 and 128 resolving all 32 bits, 64
slices, several waves and warp32, all three interpreter modes), the bound inclusive, a
local row's messages 2.. never written (a later job that waited for one would stall the
interpreter: a failure); with deferred lists on, a
crowded row still defers and a local one never does. test_select.py runs its exactness, tie
and fence tests on this path too (its `path` local)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import ScoresLayout
from stages import select as sel
from stages.select import SelectConfig, random_block_table, select_launch
from test_select_solo import _candidates, _mixed_rows, _run, _state

BOUND = 6000  # between the local rows' totals (<= 5447) and the all-equal row's 8447


def _cfg(bound=BOUND, topk=2048, defer_fat_bins=False):
    """(Deferred lists off but in their own test: the all-equal row's lists then come from
    sel_h1, as in the solo tests.)"""
    return SelectConfig(ScoresLayout(4, 16384, 512), max_slices=4, topk=topk,
                        local_max_candidates=bound, defer_fat_bins=defer_fat_bins)


@pytest.fixture(scope="module")
def rounds_only():
    """The rounds alone, per (waves, wave size): what the local launch must reproduce."""
    cfg = _cfg(None)
    s, n, bt = _mixed_rows(cfg)
    out = {}
    for waves, ws in ((1, 64), (3, 32)):
        r = _run(select_launch(cfg, grid=3, waves=waves), cfg, s, n, bt, wave_size=ws)
        out[waves, ws] = (r.outputs[cfg.names.out], r.outputs[cfg.names.diag])
        assert not _state(r, cfg, 1)[:, :, sel.X_SOLO].any()
    return out


@pytest.mark.parametrize("mode", ["inorder", "random", "relaxed"])
@pytest.mark.parametrize("waves,wave_size", [(1, 64), (3, 32)])
def test_local_and_rounds_rows_in_one_launch(rounds_only, mode, waves, wave_size):
    cfg = _cfg()
    s, n, bt = _mixed_rows(cfg)
    total = _candidates(cfg, s, n)
    local = total <= BOUND
    assert list(local) == [True, False, True, True], total
    r = _run(select_launch(cfg, grid=3, waves=waves), cfg, s, n, bt, mode=mode, seed=7,
             wave_size=wave_size)
    st1 = _state(r, cfg, 1)
    assert (st1[:, :, sel.X_SOLO] == local[:, None]).all()
    assert np.array_equal(st1[:, :, sel.X_NLIST].sum(axis=1), total)
    # a local row's messages 2.. are never written; the rounds row's are
    for q in range(2, cfg.passes):
        written = _state(r, cfg, q).any(axis=2)
        assert not written[local].any(), q
        assert written[~local].all(), q
    want_out, want_diag = rounds_only[waves, wave_size]
    assert np.array_equal(r.outputs[cfg.names.out], want_out)
    assert np.array_equal(r.outputs[cfg.names.diag], want_diag)


def test_local_ties_straddle_slices_exactly():
    """Row 2: the 2048 ties taken are positions 3000..5047 (slices 1 and 2), in order: each
    slice places itself from the LDS keys of the slices before it."""
    cfg = _cfg()
    s, n, bt = _mixed_rows(cfg)
    r = _run(select_launch(cfg, grid=3, waves=2), cfg, s, n, bt, mode="random", seed=3)
    assert (_state(r, cfg, 1)[2, :, sel.X_SOLO] == 1).all()
    pages = bt[2].astype(np.int64)
    got = r.outputs[cfg.names.out][2]
    pos = np.array([int(np.flatnonzero(pages == g // 64)[0]) * 64 + g % 64 for g in got])
    assert np.array_equal(pos, np.arange(3000, 3000 + 2048))


def test_the_local_bound_is_inclusive():
    cfg0 = _cfg()
    s, n, bt = _mixed_rows(cfg0, seed=5)
    t = int(_candidates(cfg0, s, n)[0])
    res = {}
    for bound in (t, t - 1):
        cfg = _cfg(bound)
        r = _run(select_launch(cfg, grid=3), cfg, s, n, bt, mode="random", seed=1)
        assert _state(r, cfg, 1)[0, 0, sel.X_SOLO] == int(bound == t)
        res[bound] = r.outputs[cfg.names.out].tobytes() + r.outputs[cfg.names.diag].tobytes()
    assert res[t] == res[t - 1]


@pytest.mark.parametrize("topk", [1, 128])
def test_local_rows_resolve_every_digit(topk):
    """A small K: the local passes resolve all 32 bits (or stop where a bin holds exactly
    the keys still needed); NaNs and -inf counted as the rounds count them."""
    res = {}
    for bound in (sel.LOCAL_MAX_CANDIDATES, None):
        cfg = _cfg(bound, topk=topk)
        s, n, bt = _mixed_rows(cfg, seed=2)
        s[0, 100:200] = np.nan
        s[3, 5000:5100] = -np.inf
        s[1, 7000] = 2.0  # the one key above the all-equal row's ties
        r = _run(select_launch(cfg, grid=3, waves=2), cfg, s, n, bt, mode="relaxed", seed=4,
                 wave_size=32)
        assert _state(r, cfg, 1)[:, 0, sel.X_SOLO].all() == (bound is not None)
        res[bound] = (r.outputs[cfg.names.out], r.outputs[cfg.names.diag])
    assert np.array_equal(res[None][0], res[sel.LOCAL_MAX_CANDIDATES][0])
    assert np.array_equal(res[None][1], res[sel.LOCAL_MAX_CANDIDATES][1])


def test_crowded_rows_defer_and_local_rows_do_not():
    """With deferred lists on: the all-equal row (its first-digit bin holds every key) is
    deferred and takes the rounds; a row under the bound is local even where its bin counts
    as crowded at this size (it needs sel_h1's lists)."""
    cfg = _cfg(BOUND, defer_fat_bins=True)
    assert cfg.defers
    s, n, bt = _mixed_rows(cfg, seed=6)
    r = _run(select_launch(cfg, grid=3, waves=2), cfg, s, n, bt, mode="relaxed", seed=5)
    st1 = _state(r, cfg, 1)
    assert (st1[1, :, sel.X_DEFER] == 1).all() and (st1[1, :, sel.X_SOLO] == 0).all()
    assert (st1[[0, 2, 3], :, sel.X_DEFER] == 0).all()
    assert (st1[[0, 2, 3], :, sel.X_SOLO] == 1).all()


def test_64_slices_local():
    """The chips' slice count: 64 slices of a 32K-key row (the directory's binary search at
    full depth), a row with lists in a few slices only; warp32, two waves."""
    cfg = SelectConfig(ScoresLayout(2, 32768, 512), max_slices=64, topk=128,
                       local_max_candidates=sel.LOCAL_MAX_CANDIDATES)
    rng = np.random.default_rng(9)
    n = np.array([32768, 20000])
    s = np.full((2, cfg.capacity), np.inf, np.float32)
    s[0] = rng.standard_normal(cfg.capacity).astype(np.float32)
    s[1, :20000] = -1e30
    s[1, 700:900] = rng.standard_normal(200).astype(np.float32)  # slice 1
    s[1, 15000:15010] = 3.0  # slice 29 (20000 keys: 40 segments, one a slice)
    bt = random_block_table(cfg, rng)
    r = _run(select_launch(cfg, grid=5, waves=2), cfg, s, n, bt, mode="random", seed=2,
             wave_size=32)
    st1 = _state(r, cfg, 1)
    assert (st1[:, 0, sel.X_SOLO] == 1).all()
    assert (st1[1, :, sel.X_NLIST] > 0).sum() == 2


def test_config_local_bound_checks():
    lay = ScoresLayout(1, 4096, 512)
    assert not SelectConfig(lay).local
    c = SelectConfig(lay, local_max_candidates=sel.LOCAL_MAX_CANDIDATES)
    assert c.local and c.finishes_early and not c.solo
    for bad in (-1, sel.LOCAL_MAX_KEYS + 1):
        with pytest.raises(ValueError, match="local_max_candidates"):
            SelectConfig(lay, local_max_candidates=bad)
    with pytest.raises(ValueError, match="exclude each other"):
        SelectConfig(lay, local_max_candidates=100, solo_max_candidates=100)
    assert dataclasses.replace(c, local_max_candidates=None).local is False
