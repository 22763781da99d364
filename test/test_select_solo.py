"""The selection's solo finish (stages/select.py, "Solo finish"): a row whose candidate lists
hold at most `solo_max_candidates` keys is finished by sel_h2's slice-0 job alone, the other
rows by the exchange rounds, in one launch. Checked here: each row takes the path the host
predicts from its first digits (both paths in one launch), the outputs are exact against the
independent top-k (layouts.scores.exact_topk_positions) over poisoned outputs, and bit for
bit what the rounds alone give; ties straddle slices, lists between and after are empty,
several waves and warp32, and the bound is inclusive. A solo row's later jobs never wait on
rounds 2..: its messages 2.. are never written, so a job that waited would stall the
interpreter (a failure)."""
from __future__ import annotations

import numpy as np
import pytest

from layouts.scores import FIRST_DIGIT_SHIFT, ScoresLayout, ordered_key
from stages import select as sel
from stages.select import (SelectConfig, make_inputs, random_block_table, reference_select,
                           select_launch, slice_bounds)
from tools.check_topk import check_rows

N = 8447  # slices [0, 2048), [2048, 4096), [4096, 6656), [6656, 8447) of 512-key segments
BOUND = 6000  # between the solo rows' totals (<= 5447) and the all-equal row's 8447


def _cfg(bound=BOUND, topk=2048):
    return SelectConfig(ScoresLayout(4, 16384, 512), max_slices=4, topk=topk,
                        solo_max_candidates=bound)


def _mixed_rows(cfg, seed=0):
    """Row 0: normal scores (a bin's share of candidates: solo); row 1: every key equal
    (every key a candidate: the rounds); row 2: every key 1.0 but the first 3000 (-1.0): the
    2048 ties taken start at 3000, in slice 1, and end in slice 2 (solo); row 3: normal
    scores in slices 0 and 2 only, -1e30 in slices 1 and 3 (their lists empty: solo)."""
    rng = np.random.default_rng(seed)
    n = np.full(cfg.rows, N)
    s = np.full((cfg.rows, cfg.capacity), np.inf, np.float32)
    s[:, :N] = rng.standard_normal((cfg.rows, N)).astype(np.float32)
    s[1, :N] = 0.75
    s[2, :N] = 1.0
    s[2, :3000] = -1.0
    for sl in (1, 3):
        lo, hi = slice_bounds(N, cfg.segment, cfg.max_slices, sl)[1:]
        s[3, lo:hi] = -1e30
    return s, n, random_block_table(cfg, rng, shared=False)


def _candidates(cfg, s, n):
    """Per row, what sel_h1 compares with the bound: Gcum[b] of the first digits (key 0 in
    bin 0, as the scoring counts) at the first threshold digit b."""
    out = []
    for r in range(cfg.rows):
        keys = ordered_key(s[r, :n[r]])
        cum = np.cumsum(np.bincount(keys >> FIRST_DIGIT_SHIFT, minlength=64)[::-1])[::-1]
        n_ge = int((cum >= cfg.topk).sum())
        out.append(int(cum[max(n_ge - 1, 0)]))
    return np.array(out)


def _run(L, cfg, s, n, bt, **kw):
    inp = make_inputs(cfg, s, n, bt)
    assert (inp[cfg.names.out] == -2).all() and (inp[cfg.names.diag] == 0xFFFFFFFF).all()
    r = L.run_interp(inp, step=0, **kw)
    out, diag = r.outputs[cfg.names.out], r.outputs[cfg.names.diag]
    assert not check_rows(s, n, bt, out, diag, cfg.topk)
    want_out, want_diag = reference_select(s, n, bt, cfg.topk)
    assert np.array_equal(out, want_out) and np.array_equal(diag, want_diag)
    return r


def _state(r, cfg, q):
    """[rows, slices, state words] of message q."""
    m = r.regions[cfg.msg(q)].reshape(cfg.rows, cfg.max_slices, -1)
    return m[:, :, cfg.state_word:cfg.state_word + sel.NEXTRA]


@pytest.fixture(scope="module")
def rounds_only():
    """The rounds alone (no solo code at all), per (waves, wave size): the outputs the solo
    launch must reproduce bit for bit."""
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
def test_solo_and_rounds_rows_in_one_launch(rounds_only, mode, waves, wave_size):
    cfg = _cfg()
    s, n, bt = _mixed_rows(cfg)
    total = _candidates(cfg, s, n)
    solo = total <= BOUND
    assert list(solo) == [True, False, True, True], total
    L = select_launch(cfg, grid=3, waves=waves)
    r = _run(L, cfg, s, n, bt, mode=mode, seed=7, wave_size=wave_size)
    st1 = _state(r, cfg, 1)
    # every slice of a row carries the same flag, the host's; the lists hold `total` keys
    assert (st1[:, :, sel.X_SOLO] == solo[:, None]).all()
    assert np.array_equal(st1[:, :, sel.X_NLIST].sum(axis=1), total)
    assert (st1[3, [1, 3], sel.X_NLIST] == 0).all() and (st1[3, [0, 2], sel.X_NLIST] > 0).all()
    # sel_h2.. publish nothing for a solo row; the rounds row's slices publish every round
    for q in range(2, cfg.passes):
        written = _state(r, cfg, q).any(axis=2)
        assert not written[solo].any(), q
        assert written[~solo].all(), q
    want_out, want_diag = rounds_only[waves, wave_size]
    assert np.array_equal(r.outputs[cfg.names.out], want_out)
    assert np.array_equal(r.outputs[cfg.names.diag], want_diag)


def test_solo_ties_straddle_slices_exactly():
    """Row 2: the 2048 ties taken are positions 3000..5047 (slices 1 and 2), in order."""
    cfg = _cfg()
    s, n, bt = _mixed_rows(cfg)
    r = _run(select_launch(cfg, grid=3), cfg, s, n, bt, mode="random", seed=3)
    assert _state(r, cfg, 1)[2, 0, sel.X_SOLO] == 1
    pages = bt[2].astype(np.int64)
    got = r.outputs[cfg.names.out][2]
    pos = np.array([int(np.flatnonzero(pages == g // 64)[0]) * 64 + g % 64 for g in got])
    assert np.array_equal(pos, np.arange(3000, 3000 + 2048))


def test_the_bound_is_inclusive():
    """A row of exactly `solo_max_candidates` candidates finishes solo, one more does not;
    both give the same outputs."""
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
def test_solo_rows_resolve_every_digit(topk):
    """A small K: the solo passes resolve all 32 bits (or stop early where a bin holds
    exactly the keys still needed), NaNs and -inf counted as the rounds count them."""
    res = {}
    for bound in (sel.SOLO_MAX_CANDIDATES, None):
        cfg = _cfg(bound, topk=topk)
        s, n, bt = _mixed_rows(cfg, seed=2)
        s[0, 100:200] = np.nan
        s[3, 5000:5100] = -np.inf
        s[1, 7000] = 2.0  # the one key above the all-equal row's ties
        r = _run(select_launch(cfg, grid=3), cfg, s, n, bt, mode="relaxed", seed=4)
        assert _state(r, cfg, 1)[:, 0, sel.X_SOLO].all() == (bound is not None)
        res[bound] = (r.outputs[cfg.names.out], r.outputs[cfg.names.diag])
    assert np.array_equal(res[None][0], res[sel.SOLO_MAX_CANDIDATES][0])
    assert np.array_equal(res[None][1], res[sel.SOLO_MAX_CANDIDATES][1])


def test_config_bound_checks():
    lay = ScoresLayout(1, 4096, 512)
    assert SelectConfig(lay).solo_max_candidates is None and not SelectConfig(lay).solo  # off
    assert SelectConfig(lay, solo_max_candidates=sel.SOLO_MAX_CANDIDATES).solo
    for bad in (-1, sel.MAX_KEYS + 1):
        with pytest.raises(ValueError, match="solo_max_candidates"):
            SelectConfig(lay, solo_max_candidates=bad)


def test_64_slices_solo():
    """The chips' slice count: 64 slices of a 32K-key row (the directory's binary search at
    its full depth), a row with lists in a few slices only; warp32, two waves."""
    cfg = SelectConfig(ScoresLayout(2, 32768, 512), max_slices=64, topk=128,
                       solo_max_candidates=sel.SOLO_MAX_CANDIDATES)
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
