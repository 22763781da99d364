"""The tail finish or the rounds chosen per row at run time (SelectConfig.tail_max_per_slice):
sel_h1, deciding the first digit, sends a row whose threshold bin holds at most N keys a slice
to the tail finish (it buckets the row's candidates, sel_h2 .. return at once, sel_out decides
on message 1 and finishes the row as tail_finish's sel_out does); every other row takes the
rounds. Checked here: both kinds of row in one launch, each by the path its count chose (the
rdy1 flag, the buckets, messages 2 .. unwritten for a tail row), and the same slots and
diagnostics as the rounds bit for bit (relaxed memory mode), on every check_topk distribution;
the bound's edge (a `<=`); a crowded (deferred) row never a tail; sel_out's tunables reach the
tail's finish; the select kinds' option; bad settings refused by name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import FIRST_DIGIT_SHIFT, ordered_key
from stages import select as sel
from stages.select import (RDY_SOLO, make_inputs, random_block_table,
                           request_positions, select_launch, slice_bounds)
from stages.select.config import TAIL_MAX_PER_SLICE
from tools.check_topk import DISTS, check_rows, scores_for
from tools.common import apply_tunes

from test_select_tail import CFG  # (2 rows of 12K keys, K = 128, 4 slices a row, (6, 9, 9, 8))

N = request_positions(12000, CFG.rows)


def _run(cfg, s, bt, waves=3, mode="relaxed", tunes=(), n=N):
    L = apply_tunes(select_launch(cfg, grid=3, waves=waves), tunes)
    r = L.run_interp(make_inputs(cfg, s, n, bt), step=0, mode=mode, seed=13)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
    return r


def _bin_count(row_scores, n, topk):
    """(threshold first-digit bin's keys, slices) of a row, by numpy: what sel_h1 compares."""
    keys = ordered_key(row_scores[:n])
    first = keys >> FIRST_DIGIT_SHIFT
    counts = np.bincount(first[keys != 0], minlength=64)
    cum = np.cumsum(counts[::-1])[::-1]
    b = int((cum >= topk).sum()) - 1
    return int(counts[b]), slice_bounds(n, CFG.segment, CFG.max_slices, 0)[0]


def _mixed(seed=3):
    """Row 0 normal scores (a narrow threshold bin: ~2% of the row), row 1 the same scaled
    by 0.3 (its threshold near 0.7, in the bin [2^-7, 2) that holds most of the row)."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((CFG.rows, CFG.capacity)).astype(np.float32)
    s[1] *= np.float32(0.3)
    return s, random_block_table(CFG, rng)


def _tail_rows(r, cfg, n=N):
    """Per row: took the tail (every slice's rdy1 has RDY_SOLO), checked against what else
    shows it: a tail row's sel_h2 never publishes, its buckets hold its candidates."""
    S = cfg.max_slices
    rdy1 = r.regions[cfg.rdy(1)].reshape(cfg.rows, S, -1)[..., 0]
    rdy2 = r.regions[cfg.rdy(2)].reshape(cfg.rows, S, -1)[..., 0]
    out = []
    for row in range(cfg.rows):
        sc = slice_bounds(int(n[row]), cfg.segment, S, 0)[0]
        flags = {bool(v & RDY_SOLO) for v in rdy1[row, :sc]}
        assert len(flags) == 1, f"row {row}: the slices disagree ({rdy1[row, :sc]})"
        tail = flags.pop()
        assert (rdy2[row, :sc] == 0).all() == tail, (row, rdy2[row])
        out.append(tail)
    return out


def test_one_launch_takes_the_tail_for_one_row_and_the_rounds_for_the_other():
    s, bt = _mixed()
    (c0, sc0), (c1, sc1) = (_bin_count(s[i], int(N[i]), CFG.topk) for i in range(2))
    assert c0 < 200 * sc0 < c1  # (the case: a bound of 200 a slice splits the rows)
    cfg = dataclasses.replace(CFG, tail_max_per_slice=200)
    mixed = _run(cfg, s, bt)
    assert _tail_rows(mixed, cfg) == [True, False]
    rounds = _run(CFG, s, bt).outputs
    for name in ("topk", "topk_diag"):
        assert np.array_equal(mixed.outputs[name], rounds[name]), name
    lk = cfg.max_slice_keys()
    buckets = mixed.regions[cfg.list_bucket_keys].reshape(cfg.rows, cfg.max_slices, lk)
    lists = mixed.regions[cfg.list_keys].reshape(cfg.rows, cfg.max_slices, lk)
    for sl in range(slice_bounds(int(N[0]), cfg.segment, cfg.max_slices, 0)[0]):
        lo, hi = slice_bounds(int(N[0]), cfg.segment, cfg.max_slices, sl)[1:]
        keys = ordered_key(s[0, lo:hi])
        b0 = int(keys.max() >> FIRST_DIGIT_SHIFT)  # (normal scores: the top bin is b's)
        cand = np.sort(keys[(keys >> FIRST_DIGIT_SHIFT) == b0])
        assert cand.size and np.array_equal(np.sort(buckets[0, sl, :cand.size]), cand), sl
        assert np.array_equal(np.sort(lists[0, sl, :cand.size]), cand)  # (the list: the same)


def test_the_bound_is_inclusive():
    """A row whose bin holds exactly bound x slices keys takes the tail; one key fewer of
    room, the rounds."""
    s, bt = _mixed()
    c0, sc0 = _bin_count(s[0], int(N[0]), CFG.topk)
    exact = -(-c0 // sc0)
    if exact * sc0 != c0:  # make the row's bin a multiple of its slices: drop its top keys
        drop = c0 - (c0 // sc0) * sc0
        top = np.argsort(s[0, :N[0]])[::-1]
        s[0, top[:drop]] = np.float32(1.5)  # (below the bin [2, 512), above the threshold)
        c0, _ = _bin_count(s[0], int(N[0]), CFG.topk)
        exact = c0 // sc0
    assert exact * sc0 == c0
    got = []
    for bound in (exact, exact - 1):
        cfg = dataclasses.replace(CFG, tail_max_per_slice=bound)
        got.append(_tail_rows(_run(cfg, s, bt), cfg)[0])
    assert got == [True, False]


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_every_distribution_selects_what_the_rounds_select(dist):
    rng = np.random.default_rng([37, sorted(DISTS).index(dist)])
    s = scores_for(dist, rng, N, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    cfg = dataclasses.replace(CFG, tail_max_per_slice=256)
    chosen = _run(cfg, s, bt)
    _tail_rows(chosen, cfg)
    rounds = _run(CFG, s, bt).outputs
    for name in ("topk", "topk_diag"):
        assert np.array_equal(chosen.outputs[name], rounds[name]), name


def test_a_crowded_row_keeps_its_deferred_lists_whatever_the_bound():
    """allequal: every key in one bin, a crowded row (defer_fat_bins: sel_h2 lists it): no
    list of sel_h1's to bucket, so the rounds, even under a bound that admits the row."""
    rng = np.random.default_rng(9)
    s = scores_for("allequal", rng, N, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    cfg = dataclasses.replace(CFG, tail_max_per_slice=CFG.max_slice_keys())
    r = _run(cfg, s, bt)
    assert _tail_rows(r, cfg) == [False, False]
    off = dataclasses.replace(cfg, defer_fat_bins=False)
    assert _tail_rows(_run(off, s, bt), off) == [True, True]


def test_sel_outs_tunables_reach_the_tails_finish():
    """--tune sel_out.tail_rank=1: the tail rows' finish ranks its candidates (the same
    selection: the ranked and the histogram-pass finishes agree)."""
    s, bt = _mixed(seed=4)
    cfg = dataclasses.replace(CFG, tail_max_per_slice=200)
    L = apply_tunes(select_launch(cfg, grid=3, waves=2), [("sel_out", "tail_rank", "1")])
    out = [st for st in L.stages if st.name == "sel_out"][0]
    L.kernel("interp", 32)
    assert out.tail_out.tail_rank == 1
    passes = _run(cfg, s, bt, waves=2).outputs["topk"]
    ranked = L.run_interp(make_inputs(cfg, s, N, bt), step=0, mode="relaxed", seed=2)
    assert np.array_equal(ranked.outputs["topk"], passes)


def test_the_stages_are_the_rounds_and_the_kinds_take_the_option():
    cfg = dataclasses.replace(CFG, tail_max_per_slice=64)
    assert [st.name for st in sel.select_stages(cfg)] == [
        "sel_h0", "sel_h1", "sel_h2", "sel_h3", "sel_out"]
    from spec import BuildSpec
    from stages.kinds import kind
    for rows in (8, 2):  # (the static tail: rows 8's after refined digits, rows 2's wide rows')
        spec = BuildSpec.make("glm5", rows=rows, target="sm_90a")
        plain = kind("select_hist").launch(spec).select_cfg
        chosen = kind("select_hist").launch(spec, tail_per_slice=TAIL_MAX_PER_SLICE).select_cfg
        assert plain.tail_finish and plain.tail_max_per_slice is None
        assert plain.fine_digits == (rows == 8)
        assert chosen.tail_max_per_slice == TAIL_MAX_PER_SLICE and not chosen.tail_finish
        assert not chosen.fine_digits  # (the choice by the bin reads the coarse plan's)


# -- the choice by key count (SelectConfig.tail_min_keys) ----------------------------------
def test_rows_of_at_least_the_bound_take_the_tail_whatever_their_scores():
    """N = (11999, 12000) keys: a bound of 12000 sends row 1 alone to the tail (the `>=`
    edge), 11999 both, 12001 neither; row 1's wide bin (scaled scores, the one the choice by
    the bin keeps in the rounds) changes nothing. Every form selects the rounds' slots."""
    s, bt = _mixed()
    rounds = _run(CFG, s, bt).outputs
    for bound, want in ((12000, [False, True]), (11999, [True, True]),
                        (12001, [False, False])):
        cfg = dataclasses.replace(CFG, tail_min_keys=bound)
        r = _run(cfg, s, bt)
        assert _tail_rows(r, cfg) == want, bound
        for name in ("topk", "topk_diag"):
            assert np.array_equal(r.outputs[name], rounds[name]), (bound, name)


def test_the_later_jobs_compute_the_form_without_reading_rdy1(monkeypatch):
    """Rows of 5000 and 12000 keys under a bound of 8192 (random interleaving): the long row
    takes the tail, the short one every round. With sel_h1's RDY_SOLO bit suppressed (never
    set in rdy1), the long row's sel_h2 still publishes nothing and the slots are the same:
    its later jobs take the form from its key count, not from the flag (the choice by the
    bin, reading the flag, would run the long row's rounds then)."""
    from stages.select import exchange
    n = np.array([5000, 12000])
    s, bt = _mixed(seed=5)
    cfg = dataclasses.replace(CFG, tail_min_keys=8192)
    want = _run(CFG, s, bt, n=n).outputs
    r = _run(cfg, s, bt, n=n, mode="random")
    assert _tail_rows(r, cfg, n) == [False, True]
    monkeypatch.setattr(exchange, "RDY_SOLO", 0)
    for form in (cfg, dataclasses.replace(CFG, tail_max_per_slice=CFG.max_slice_keys())):
        r = _run(form, s, bt, n=n, mode="random")
        assert np.array_equal(r.outputs["topk"], want["topk"])
        rdy2 = r.regions[cfg.rdy(2)].reshape(cfg.rows, cfg.max_slices, -1)[..., 0]
        assert (rdy2[1] == 0).all() == (form is cfg), form  # (unwritten: no sel_h2 round)


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_every_distribution_by_key_count_selects_what_the_rounds_select(dist):
    """Row 1 a tail row, row 0 the rounds, on every distribution: a crowded row (allequal,
    few) is a tail row past the bound too (never deferred: it buckets sel_h1's list)."""
    rng = np.random.default_rng([41, sorted(DISTS).index(dist)])
    s = scores_for(dist, rng, N, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    cfg = dataclasses.replace(CFG, tail_min_keys=int(N[1]))
    chosen = _run(cfg, s, bt)
    assert _tail_rows(chosen, cfg) == [False, True]
    rounds = _run(CFG, s, bt).outputs
    for name in ("topk", "topk_diag"):
        assert np.array_equal(chosen.outputs[name], rounds[name]), name


def test_the_kinds_take_the_key_count_bound():
    from spec import BuildSpec
    from stages.kinds import kind
    spec = BuildSpec.make("glm5", rows=2, target="sm_90a")
    cfg = kind("select_hist").launch(spec, tail_min_keys=1 << 17).select_cfg
    assert cfg.tail_min_keys == 1 << 17 and not cfg.tail_finish  # (the static tail's place)
    assert [st.name for st in sel.select_stages(cfg, hist="buffer")] == [
        "sel_h1", "sel_h2", "sel_h3", "sel_out"]  # (every round built: sel_h0 folded)


@pytest.mark.parametrize("bad,match", [
    (dict(tail_min_keys=64, tail_max_per_slice=64), "excludes tail_min_keys"),
    (dict(tail_min_keys=64, tail_finish=True), "tail_min_keys .* excludes tail_finish"),
    (dict(tail_min_keys=0), "tail_min_keys = 0 must be"),
    (dict(tail_min_keys=64, digits=(6, 26)), "tail_min_keys needs a plan of 3"),
    (dict(tail_max_per_slice=64, tail_finish=True), "excludes tail_finish"),
    (dict(tail_max_per_slice=64, finish_max=64), "excludes finish_max"),
    (dict(tail_max_per_slice=64, solo_max_candidates=1024), "excludes solo_max_candidates"),
    (dict(tail_max_per_slice=64, digits=(6, 26)), "plan of 3 or more digits"),
    (dict(tail_max_per_slice=0), "tail_max_per_slice = 0 must be")])
def test_bad_per_row_settings_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(CFG, **bad)
