"""The selection's candidate lists (stages/select.py, "Candidate lists"): sel_h1 compacts,
per slice, the selectable keys at or above the first threshold digit with their positions,
in position order; the later passes and the output read only the lists. Checked here: a
list can never overflow its room (the longest slice of any row), its contents and length
are exactly what the first decision implies (a bin's share for smooth scores, every key
when all are equal), a crowded row's lists come from sel_h2 at the 13-bit prefix (deferred
lists), and only sel_h0 / sel_h1 (and sel_h2, with deferral) read the scores."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import FIRST_DIGIT_SHIFT, ScoresLayout, ordered_key
from monokernel.ir import L2_LINE_BYTES
from stages import select as sel
from stages.select import (SelectConfig, make_inputs, random_block_table, request_positions,
                           select_launch, slice_bounds)
from tools.check_topk import check_rows, scores_for

# K = 128 of 12K normal keys: the threshold (about 2.3) sits in a first-digit bin of ~2% of
# the keys (at K = 2048 it would sit in the bin [2**-7, 2) that holds most of them)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128)


def test_a_list_has_room_for_any_slice_of_any_row():
    """Every slice of every key count fits the list's room (max_slice_keys), for slice
    counts that divide the segments evenly and not."""
    for cap, seg, S in ((16384, 512, 4), (8192, 512, 3), (4096, 256, 7), (524288, 1024, 16),
                        (524288, 1024, 64), (524288, 1024, 33)):
        cfg = SelectConfig(ScoresLayout(1, cap, seg), max_slices=S)
        room = cfg.max_slice_keys()
        for n in range(0, cap + 1, max(1, seg // 3)):
            sc = slice_bounds(n, seg, S, 0)[0]
            longest = max(hi - lo for lo, hi in (slice_bounds(n, seg, S, s)[1:]
                                                  for s in range(sc)))
            assert longest <= room, (cap, seg, S, n)


def _expected_lists(cfg, s, n):
    """Per (row, slice): the positions the first decision keeps (selectable keys whose first
    digit is >= the threshold digit; every selectable key when the row has fewer keys than
    K, counting key 0 in bin 0 as the scoring does)."""
    out = {}
    for r in range(cfg.rows):
        keys = ordered_key(s[r, :n[r]])
        digits = keys >> FIRST_DIGIT_SHIFT
        cum = np.cumsum(np.bincount(digits, minlength=64)[::-1])[::-1]
        n_ge = int((cum >= cfg.topk).sum())
        keep = (keys != 0) & (digits >= (n_ge - 1 if n_ge else 0))
        sc = slice_bounds(int(n[r]), cfg.segment, cfg.max_slices, 0)[0]
        for sl in range(sc):
            lo, hi = slice_bounds(int(n[r]), cfg.segment, cfg.max_slices, sl)[1:]
            pos = lo + np.flatnonzero(keep[lo:hi])
            out[r, sl] = (pos, keys[pos])
    return out


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("batched,prefetch,defer,specials",
                         [(True, True, True, True), (True, False, True, True),
                          (False, False, True, True), (True, True, True, False),
                          (False, False, False, False)],
                         ids=["barrier_an_iteration", "no_prefetch", "barrier_a_round",
                              "specials_every_key", "amd_config"])
@pytest.mark.parametrize("dist", ["normal", "allequal", "fewsel", "above2049"])
def test_lists_hold_exactly_the_keys_the_first_decision_keeps(dist, batched, prefetch, defer,
                                                              specials, waves):
    """Both append paths of sel_h1 (one barrier an iteration of SCAN_UNROLL rounds, or one a
    round), with the next iteration's scores loaded ahead or not, with one wave and with
    several (offsets across waves and rounds through LDS), write exactly these lists, in
    position order; with crowded rows' lists deferred to sel_h2 (SelectConfig.defer_fat_bins)
    or not (the AMD builds' configuration); with the -inf / NaN cases taken only in rounds
    that hold one (SelectConfig.rare_specials; "fewsel" has -inf runs) or on every key."""
    import dataclasses
    cfg = dataclasses.replace(CFG, batched_append=batched, prefetch=prefetch,
                              defer_fat_bins=defer, rare_specials=specials)
    L = select_launch(cfg, grid=3, waves=waves)
    rng = np.random.default_rng([21, list(("normal", "allequal", "fewsel", "above2049"))
                                 .index(dist)])
    n = request_positions(12000, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    r = L.run_interp(make_inputs(cfg, s, n, bt), step=0, mode="random", seed=4)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], CFG.topk)
    msg = r.regions[CFG.msg(1)].reshape(CFG.rows, CFG.max_slices, -1)
    lk = CFG.max_slice_keys()
    lkeys = r.regions[CFG.list_keys].reshape(CFG.rows, CFG.max_slices, lk)
    lpos = r.regions[CFG.list_pos].reshape(CFG.rows, CFG.max_slices, lk)
    deferred = 0
    for (row, sl), (pos, keys) in _expected_lists(CFG, s, n).items():
        nl = int(msg[row, sl, CFG.state_word + sel.X_NLIST])
        if msg[row, sl, CFG.state_word + sel.X_DEFER]:  # listed by sel_h2 (checked below)
            assert cfg.defers and nl == 0, (row, sl)
            deferred += 1
            continue
        assert nl == pos.size, (row, sl)
        assert np.array_equal(lpos[row, sl, :nl], pos), (row, sl)
        assert np.array_equal(lkeys[row, sl, :nl], keys), (row, sl)
        lo, hi = slice_bounds(int(n[row]), CFG.segment, CFG.max_slices, sl)[1:]
        if dist == "allequal":
            assert nl == hi - lo  # every key is a candidate: the list is the whole slice
        if dist == "normal":
            assert nl < (hi - lo) // 8  # a bin's share: the compaction compacts
    # a crowded threshold bin (all keys equal) defers the lists to sel_h2; normal scores never
    assert (deferred > 0) == (cfg.defers and dist == "allequal") or dist in ("fewsel",
                                                                                "above2049")
    if cfg.defers:  # sel_h2's lists: every slice's keys at or above the 13-bit prefix
        _check_second_lists(cfg, r, s, n)


def _ab_runs(base, field, dist, rng_key, *, waves, seed, hist=None, **extra):
    """The selection of `base` (with `extra`) run with SelectConfig.`field` on, then off, on
    the same `dist` scores in the relaxed memory mode; both exact. [(cfg, launch, result)]."""
    import dataclasses
    rng = np.random.default_rng(rng_key)
    n = request_positions(12000, base.rows)
    s = scores_for(dist, rng, n, base.capacity, base.topk)
    bt = random_block_table(base, rng)
    out = []
    for on in (True, False):
        cfg = dataclasses.replace(base, **{field: on}, **extra)
        L = select_launch(cfg, grid=3, waves=waves, hist=hist)
        r = L.run_interp(make_inputs(cfg, s, n, bt, hist="buffer" if hist == "buffer" else None),
                         step=0, mode="relaxed", seed=seed)
        assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], base.topk)
        out.append((cfg, L, r))
    return out


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("dist", ["normal", "allequal", "fewsel", "above2049"])
def test_next_digit_counted_from_the_list_gives_the_same_messages(dist, waves):
    """sel_h1 counting the next digit from the list it has just written (SelectConfig.
    count_from_list, NVIDIA's default) publishes exactly the message 1 (every slice's cum
    histogram and state) and the lists of counting it in the scan, in the relaxed memory
    mode (the list read back by other waves after the CTA barrier); a deferred row (all
    equal) counts in sel_h1's scan, and sel_h2, re-reading its scores, counts from the
    second list it writes: message 2 and the second lists are identical too. The selections
    are exact either way."""
    key = [22, ["normal", "allequal", "fewsel", "above2049"].index(dist)]
    runs = _ab_runs(CFG, "count_from_list", dist, key, waves=waves, seed=5)
    for (_, L, _), later in zip(runs, (True, False)):
        assert all(st.count_from_list is later for st in L.stages
                   if isinstance(st, sel.SelectPass))
    (_, _, on), (_, _, off) = runs
    for name in (CFG.msg(1), CFG.list_keys, CFG.list_pos, CFG.msg(2), CFG.list2_keys,
                 CFG.list2_pos):
        assert np.array_equal(on.regions[name], off.regions[name]), name
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("dist", ["normal", "allequal"])
def test_appends_through_the_lists_starts_write_the_same_lists(dist, waves):
    """The batched appends storing through each list's start read back from LDS
    (SelectConfig.list_bases, NVIDIA's default) and through the arena write the same lists
    and messages: sel_h1's, and sel_h2's second lists of a deferred row (all equal), in the
    relaxed memory mode; the selections are exact either way."""
    key = [23, ["normal", "allequal"].index(dist)]
    runs = _ab_runs(CFG, "list_bases", dist, key, waves=waves, seed=6, defer_fat_bins=True)
    for (_, L, _), on in zip(runs, (True, False)):
        assert all(st.list_bases is on for st in L.stages if isinstance(st, sel.SelectPass))
    (_, _, on), (_, _, off) = runs
    for name in (CFG.msg(1), CFG.list_keys, CFG.list_pos, CFG.msg(2), CFG.list2_keys,
                 CFG.list2_pos):
        assert np.array_equal(on.regions[name], off.regions[name]), name
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])
    if dist == "allequal":  # the second lists were written (a deferred row)
        assert on.regions[CFG.list2_keys].any()


def _same_messages_and_selections(runs, field):
    """_ab_runs' two runs built with SelectConfig.`field` on and off publish every message
    and select the same keys with the same diagnostics."""
    for (_, L, _), on in zip(runs, (True, False)):
        assert all(getattr(st, field) is on for st in L.stages if isinstance(st, sel.SelectPass))
    (_, _, on), (_, _, off) = runs
    for q in range(CFG.passes):
        assert np.array_equal(on.regions[CFG.msg(q)], off.regions[CFG.msg(q)]), q
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])
    assert np.array_equal(on.outputs["topk_diag"], off.outputs["topk_diag"])


@pytest.mark.parametrize("count_from_list", [True, False])
@pytest.mark.parametrize("dist", ["normal", "allequal", "few"])
def test_grouped_digit_counts_publish_the_same_messages(dist, count_from_list):
    """Digit counts added once a distinct digit a wave (SelectConfig.grouped_counts:
    match_any) publish exactly the messages of a lane each: every pass's cum histograms,
    sel_h0's local first pass (every key of a wave in one bin when all are equal) and the
    counts in sel_h1's scan (count_from_list off) or from the lists, deferred rows' included;
    the selections are exact either way (relaxed mode, waves of 32 lanes)."""
    key = [24, ["normal", "allequal", "few"].index(dist), count_from_list]
    runs = _ab_runs(CFG, "grouped_counts", dist, key, waves=2, seed=7,
                    count_from_list=count_from_list, defer_fat_bins=True)
    _same_messages_and_selections(runs, "grouped_counts")


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("dist", ["normal", "fewsel", "above2048"])
def test_one_wait_a_round_publishes_the_same_messages(dist, waves):
    """A round's consumer polling every slice's pair at once with one acquire (SelectConfig.
    one_wait) publishes the messages and selects the keys of waiting for its own pair first,
    in the relaxed memory mode: rows decided early (fewsel: fewer selectable keys than K;
    above2048: the threshold bin holds exactly the keys still needed) wait for every slice
    too, and every slice publishes, so nothing stalls."""
    key = [25, ["normal", "fewsel", "above2048"].index(dist), waves]
    runs = _ab_runs(CFG, "one_wait", dist, key, waves=waves, seed=8)
    _same_messages_and_selections(runs, "one_wait")


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("dist", ["normal", "allequal", "few", "above2049"])
def test_lean_lists_select_the_same_keys(dist, waves):
    """SelectConfig.lean_lists: sel_h2 writes a second list only for deferred rows, the
    later passes and the emit of a listed row read sel_h1's list (chosen by the state's
    X_DEFER at run time). Every message's histograms and state are those of copying every
    row's list down, but the list length of a listed row (sel_h1's, not the copy's); the
    selections and diagnostics are identical and exact (relaxed mode). Normal scores list
    (the first list is read past sel_h2); all equal defers (the second list is)."""
    key = [26, ["normal", "allequal", "few", "above2049"].index(dist), waves]
    runs = _ab_runs(CFG, "lean_lists", dist, key, waves=waves, seed=9, defer_fat_bins=True)
    (cfg, L, on), (_, _, off) = runs
    assert any(st._reads_either for st in L.stages if isinstance(st, sel.SelectPass))
    lengths = []
    for q in range(CFG.passes):
        a = on.regions[CFG.msg(q)].reshape(CFG.rows, CFG.max_slices, -1).copy()
        b = off.regions[CFG.msg(q)].reshape(CFG.rows, CFG.max_slices, -1).copy()
        if q >= 2:
            lengths.append((a[..., CFG.state_word + sel.X_NLIST].copy(),
                            b[..., CFG.state_word + sel.X_NLIST].copy(),
                            a[..., CFG.state_word + sel.X_DEFER].copy()))
            a[..., CFG.state_word + sel.X_NLIST] = b[..., CFG.state_word + sel.X_NLIST]
        assert np.array_equal(a, b), q
    for lean, full, defer in lengths:  # a listed row keeps sel_h1's (longer) list
        listed = defer == 0
        assert (lean[listed] >= full[listed]).all() and np.array_equal(lean[~listed],
                                                                       full[~listed])
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])
    assert np.array_equal(on.outputs["topk_diag"], off.outputs["topk_diag"])
    if dist == "normal":  # the lists were read where they differ
        assert any((l != f).any() for l, f, _ in lengths)


def _check_second_lists(cfg, r, s, n):
    """With cfg.defers, sel_h2's lists (from the scores of a deferred row, from sel_h1's list
    otherwise) hold exactly the slice's selectable keys whose prefix (the state's d bits
    after sel_h2's decision) is at or above that decision's Q, in position order."""
    msg = r.regions[cfg.msg(2)].reshape(cfg.rows, cfg.max_slices, -1)
    lk = cfg.max_slice_keys()
    lkeys = r.regions[cfg.list2_keys].reshape(cfg.rows, cfg.max_slices, lk)
    lpos = r.regions[cfg.list2_pos].reshape(cfg.rows, cfg.max_slices, lk)
    for row in range(cfg.rows):
        keys = ordered_key(s[row, :n[row]]).astype(np.uint64)
        sc = slice_bounds(int(n[row]), cfg.segment, cfg.max_slices, 0)[0]
        for sl in range(sc):
            lo, hi = slice_bounds(int(n[row]), cfg.segment, cfg.max_slices, sl)[1:]
            w = msg[row, sl, cfg.state_word:]
            Q, d, nl = int(w[sel.X_Q]), int(w[sel.X_D]), int(w[sel.X_NLIST])
            pre = keys[lo:hi] >> np.uint64(32 - d)
            pos = lo + np.flatnonzero((keys[lo:hi] != 0) & (pre >= Q))
            assert nl == pos.size, (row, sl, nl, pos.size)
            assert np.array_equal(lpos[row, sl, :nl], pos), (row, sl)
            assert np.array_equal(lkeys[row, sl, :nl], keys[pos].astype(np.uint32)), (row, sl)


@pytest.mark.parametrize("solo,defer", [(True, False), (False, False), (False, True)],
                         ids=["solo", "rounds_only", "deferred_lists"])
def test_only_the_first_two_passes_read_the_scores(solo, defer):
    """Declared reads (the scheduler's and the layout's input): sel_h2.. and sel_out read the
    lists, never the scores region; sel_h1 writes the lists, each job its own slice's. With
    the solo finish, sel_h2's slice-0 job reads every slice's list of its row (keys and
    positions: it emits), the other jobs their own slice's keys; sel_h3.. and sel_out also
    read their own slice's rdy1 pair (whether the row is solo). The positions: sel_out's and,
    with early_emit, the last histogram pass's (they emit)."""
    cfg = SelectConfig(CFG.layout, max_slices=CFG.max_slices, topk=CFG.topk,
                       solo_max_candidates=sel.SOLO_MAX_CANDIDATES if solo else None,
                       defer_fat_bins=defer)
    assert cfg.defers == defer
    stages = sel.select_stages(cfg, scores="region")
    lk = cfg.max_slice_keys()
    S = cfg.max_slices
    for st in stages:
        names = {u.region for j in range(cfg.rows * S) for u in st.reads(j)}
        wrote = {u.region for j in range(cfg.rows * S) for u in st.writes(j)}
        if defer:  # sel_h2 reads the scores (deferred rows) and sel_h1's lists, writes its own
            assert (cfg.names.scores in names) == (st.q <= 2), st.name
            assert (cfg.list_keys in names) == (cfg.list_pos in names) == (st.q == 2), st.name
            assert (cfg.list2_keys in names) == (st.q >= 3), st.name
            assert (cfg.list2_pos in names) == (st.is_out or st.emits_early), st.name
            assert ({cfg.list2_keys, cfg.list2_pos} <= wrote) == (st.q == 2), st.name
            continue
        assert (cfg.names.scores in names) == (st.q <= 1), st.name
        assert (cfg.list_keys in names) == (st.q >= 2), st.name
        assert (cfg.list_pos in names) == (st.is_out or st.emits_early
                                            or (solo and st.q == 2)), st.name
        if solo and st.q == 2:
            for j in range(cfg.rows * S):
                r, s = divmod(j, S)
                spans = {(u.region, u.lo, u.hi) for u in st.reads(j)
                         if u.region in (cfg.list_keys, cfg.list_pos)}
                want = {(n, r * S * lk, (r + 1) * S * lk) for n in (cfg.list_keys,
                                                                     cfg.list_pos)} \
                    if s == 0 else {(cfg.list_keys, j * lk, (j + 1) * lk)}
                assert spans == want, (j, spans)
        if solo and st.q > 2:  # whether its row is solo: its own slice's rdy1 pair
            for j in range(cfg.rows * S):
                assert (cfg.rdy(1), j, j + 1) in {(u.region, u.lo, u.hi) for u in st.reads(j)}
    h1 = stages[1]
    spans = [(u.lo, u.hi) for j in range(CFG.rows * CFG.max_slices) for u in h1.writes(j)
             if u.region == CFG.list_keys]
    assert spans == [(j * lk, (j + 1) * lk) for j in range(CFG.rows * CFG.max_slices)]


def _same_lists_and_messages(dist, seed, variants, *, waves=3, mode="relaxed", hist=None):
    """Run the selection on one set of `dist` scores once per variant (a function of the
    launch: sets stage attributes, or a config given as `cfg`), each exact, and assert every
    message, list, output and diagnostic row the same bit for bit."""
    rng = np.random.default_rng(seed)
    n = request_positions(12000, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    out = []
    for cfg, tweak in variants:
        L = select_launch(cfg, grid=3, waves=waves, hist=hist)
        for st in L.stages:
            if isinstance(st, sel.SelectPass):
                tweak(st)
        r = L.run_interp(make_inputs(cfg, s, n, bt, hist=hist), step=0, mode=mode, seed=4)
        assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
        out.append(r)
    a, b = out
    for name in [CFG.msg(q) for q in range(CFG.passes)] + [CFG.list_keys, CFG.list_pos,
                                                           CFG.list2_keys, CFG.list2_pos]:
        assert np.array_equal(a.regions[name], b.regions[name]), name
    assert np.array_equal(a.outputs["topk"], b.outputs["topk"])
    assert np.array_equal(a.outputs["topk_diag"], b.outputs["topk_diag"])


DEFERRING = dataclasses.replace(CFG, defer_fat_bins=True)
DISTS = ["normal", "allequal", "zeros", "extreme", "nan", "few"]


@pytest.mark.parametrize("dist,unroll", [("normal", 1), ("allequal", 3), ("nan", 1)])
def test_scan_unroll_writes_the_same_lists_and_messages(dist, unroll):
    """A pass over the scores reading `scan_unroll` rounds of 4 keys a lane an iteration
    (SelectPass.scan_unroll: sel_h0's local pass, sel_h1's scan, sel_h2's re-scan of a
    deferred row; measured slower than 4 on the H200, bench/NOTES.md v19) publishes every
    message and writes every list of the default 4, in the relaxed memory mode (3 waves: an
    iteration's rounds do not fill the slice's last one); the selections are exact."""
    _same_lists_and_messages(dist, [27, DISTS.index(dist), unroll], [
        (DEFERRING, lambda st: setattr(st, "scan_unroll", unroll)),
        (DEFERRING, lambda st: setattr(st, "scan_unroll", sel.SCAN_UNROLL))])


@pytest.mark.parametrize("dist,ahead", [("normal", 2), ("allequal", 3), ("nan", 2)])
def test_scan_ahead_writes_the_same_lists_and_messages(dist, ahead):
    """A pass over the scores with `scan_ahead` iterations of loads in flight (a ring of
    that many iterations' registers: SelectPass.scan_ahead; sel_h1's scan, sel_h2's re-scan
    of a deferred row; measured no faster on the H200, bench/NOTES.md v22) publishes every
    message and writes every list of the default one ahead, in the relaxed memory mode, with
    a slice of fewer iterations than the ring holds (its loads past the slice read within
    the row and are never counted); exact."""
    _same_lists_and_messages(dist, [29, DISTS.index(dist), ahead], [
        (DEFERRING, lambda st: setattr(st, "scan_ahead", ahead)),
        (DEFERRING, lambda st: setattr(st, "scan_ahead", sel.SCAN_AHEAD))])


@pytest.mark.parametrize("dist,waves,mode,copies", [
    ("normal", 3, "relaxed", False), ("allequal", 3, "relaxed", False),
    ("zeros", 2, "random", False), ("extreme", 3, "inorder", False), ("nan", 1, "random", False),
    ("few", 3, "relaxed", False), ("normal", 3, "relaxed", True), ("nan", 2, "random", True)])
def test_lean_scan_writes_the_same_lists_and_messages(dist, waves, mode, copies):
    """The lean listing loop (SelectConfig.lean_scan: sel_h1's lists, and sel_h2's of a
    deferred row; with lean_copies from the lane's own async copies in LDS) writes every
    list and message of the default scan, bit for bit: its float keep test against the
    threshold's least score agrees with the ordered keys on +-0.0, subnormals, infinities
    and NaN (zeros, extreme), the ballot offsets and the store rounds keep position order
    across lanes and waves (3 waves: an iteration's keys do not fill the slice's last one),
    crowded rows take sel_h2's re-listing (allequal, few); exact selections."""
    lean = dataclasses.replace(DEFERRING, lean_scan=True, lean_copies=copies)
    _same_lists_and_messages(dist, [37, DISTS.index(dist), waves], [
        (lean, lambda st: None), (DEFERRING, lambda st: None)],
        waves=waves, mode=mode, hist="buffer")


@pytest.mark.parametrize("dist", ["normal", "extreme"])
def test_lean_scan_picks_from_registers_where_lds_is_short(dist, monkeypatch):
    """Where the kernel's LDS has no room for the lean loop's staging (e.g. the fused index
    with keys in shared memory), its store rounds pick each kept key from the iteration's
    registers by a tree of selects: the same lists and messages."""
    from monokernel.dsl import KernelBuilder
    lean = dataclasses.replace(DEFERRING, lean_scan=True)
    monkeypatch.setattr(KernelBuilder, "lds_left", lambda self, align=16: 0)
    L = select_launch(lean, grid=3, waves=3, hist="buffer")
    assert not any(a.name.endswith("lean_stage") for a in L.kernel("interp", 64).lds)
    _same_lists_and_messages(dist, [41, DISTS.index(dist)], [
        (lean, lambda st: None), (DEFERRING, lambda st: None)], hist="buffer")


def test_lean_scan_threshold_is_the_least_score_of_the_prefix():
    """The lean keep test's threshold (select.score_floor: score >= it <=> ordered key >=
    key_lo) at the boundaries: the keys of -0.0 / +0.0, the smallest subnormals of each sign, -FLT_MAX,
    +inf, and key_lo past +inf (nothing kept), every key_lo checked against every score."""
    from layouts.scores import ordered_key
    from monokernel import interp
    from monokernel.dsl import ABI, Ptr, build_kernel
    from monokernel.types import f32, u32
    from stages.select import NORMAL_KEY_HI, NORMAL_KEY_LO, score_floor

    def body(k):
        key_lo = k.load(k.args.klo, k.lane_id(), u32)
        x = k.load(k.args.x, 0, f32)
        k.store(k.args.keep, k.lane_id(), k.cast(x >= score_floor(k, key_lo), u32))
    kern = build_kernel("tlo", body, abi=ABI(klo=Ptr(u32), x=Ptr(f32), keep=Ptr(u32)),
                        target="interp")
    scores = np.array([0.0, -0.0, 1e-45, -1e-45, 2e-45, 1.17549435e-38, -3.4028235e38,
                       3.4028235e38, np.inf, -np.inf, np.nan, 1.0, -1.0], np.float32)
    key_los = sorted({1, 0x7FFFFFFF, 0x80000000, 0x80000001, 0x7FFFFFFE, NORMAL_KEY_LO,
                      NORMAL_KEY_LO + 1, NORMAL_KEY_HI, NORMAL_KEY_HI + 1, 0xFFFFFFFF} |
                     {int(ordered_key(np.float32(v))) for v in scores if np.isfinite(v)})
    klo = np.zeros(64, np.uint32)
    klo[:len(key_los)] = key_los
    klo[len(key_los):] = key_los[-1]
    for x in scores:
        keep = np.zeros(64, np.uint32)
        interp.run(kern, dict(klo=klo, x=np.array([x], np.float32), keep=keep))
        want = [int(ordered_key(x)) >= kl for kl in klo]
        assert keep.astype(bool).tolist() == want, x


@pytest.mark.parametrize("stage,attr,hist", [("sel_h2", "scan_ahead", None),
                                             ("sel_h1", "scan_unroll", None),
                                             ("sel_h0", "segment_unroll", "buffer")])
def test_count_tunables_must_be_positive_integers(stage, attr, hist):
    """--tune sel_h2.scan_ahead=0 (sel_h1.scan_unroll, sel_h0.segment_unroll) fails the
    build with an error naming the value."""
    L = select_launch(CFG, grid=3, waves=2, hist=hist)
    st = next(st for st in L.stages if st.name == stage)
    setattr(st, attr, 0)
    with pytest.raises(ValueError, match=f"{attr} = 0 must be a positive integer"):
        L.kernel("interp", 32)


@pytest.mark.parametrize("waves", [1, 3, 8])
@pytest.mark.parametrize("hist", ["buffer", "stage"])
def test_wide_segment_sums_publish_the_same_first_message(hist, waves):
    """sel_h0 summing the scoring's segment histograms with every wave (SelectConfig.
    wide_segment_sums, NVIDIA's default: SEGMENT_UNROLL segments a thread in flight, groups
    met by LDS atomics) publishes exactly the message 0 of wave 0 walking the segments, from
    an input buffer and from tagged pairs, for CTAs of fewer than 64 threads (bins in two
    passes), a multiple of 64 and neither; relaxed memory mode; exact selections."""
    import dataclasses
    # segments of 128 keys, two slices a row: ~47 segments a slice, more than one round of
    # every thread group's SEGMENT_UNROLL loads at 8 waves
    base = dataclasses.replace(CFG, layout=ScoresLayout(2, 16384, 128), max_slices=2)
    key = [24, ["buffer", "stage"].index(hist), waves]
    (_, _, on), (_, _, off) = _ab_runs(base, "wide_segment_sums", "normal", key, waves=waves,
                                       seed=7, hist=hist)
    assert np.array_equal(on.regions[base.msg(0)], off.regions[base.msg(0)])
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])


@pytest.mark.parametrize("digits", [(6, 7, 7, 6, 6), (6, 9, 9, 8)], ids=["6-7-7-6-6", "6-9-9-8"])
@pytest.mark.parametrize("dist", ["normal", "few", "above2048", "allequal"])
def test_early_emit_by_the_last_histogram_pass(dist, digits):
    """SelectConfig.early_emit (off by default, measured at noise level): the last histogram
    pass emits a slice whose decision is final when it decides and flags it (X_EMITTED in
    its message's state); sel_out emits the others. Outputs and diagnostics identical to
    sel_out emitting every row, exact, in the relaxed memory mode; normal scores are final
    early (flagged), a row of few distinct values needs every bit (not flagged)."""
    key = [25, ["normal", "few", "above2048", "allequal"].index(dist)]
    runs = _ab_runs(CFG, "early_emit", dist, key, waves=3, seed=8, digits=digits)
    flags = []
    for cfg, _, r in runs:
        last = r.regions[cfg.msg(cfg.passes - 1)].reshape(CFG.rows, CFG.max_slices, -1)
        flags.append(last[:, :, cfg.state_word + sel.X_EMITTED])
    for name in ("topk", "topk_diag"):
        assert np.array_equal(runs[0][2].outputs[name], runs[1][2].outputs[name]), name
    flagged, never = flags
    assert not never.any()
    if dist == "normal":
        assert flagged.all()
    if dist == "few":
        assert not flagged.any()


@pytest.mark.parametrize("dist", ["normal", "fewsel"])
def test_l2_prefetch_asks_for_every_visible_score_and_changes_nothing(dist):
    """SelectConfig.l2_prefetch (first digits given: sel_h0 does not read the scores): the
    slices' prefetches cover every visible score of every row (rows of several lengths, the
    last piece moved back inside its row), no other buffer, nothing outside a row that a
    visible score's piece does not hold; outputs and every message identical to the build
    without it, exact."""
    import dataclasses
    base = dataclasses.replace(CFG, layout=ScoresLayout(2, 16384, 128), max_slices=3)
    rng = np.random.default_rng([26, ["normal", "fewsel"].index(dist)])
    n = np.array([12345, 16384 - 3])  # a row ending inside a piece, one ending in the last
    s = scores_for(dist, rng, n, base.capacity, base.topk)
    bt = random_block_table(base, rng)
    runs = []
    for on in (True, False):
        cfg = dataclasses.replace(base, l2_prefetch=on)
        L = select_launch(cfg, grid=3, waves=2, hist="buffer")
        seen = {}
        r = L.run_interp(make_inputs(cfg, s, n, bt, hist="buffer"), step=0, mode="relaxed",
                         seed=3, prefetched=seen)
        assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], base.topk)
        runs.append((r, seen))
    (on_r, on_seen), (off_r, off_seen) = runs
    assert off_seen == {} and set(on_seen) == {base.names.scores}
    asked = on_seen[base.names.scores].reshape(base.rows, base.capacity * 4) > 0
    piece = sel.SCORE_PREFETCH_PIECE
    for row in range(base.rows):
        visible = int(n[row]) * 4
        assert asked[row, :visible].all(), row
        assert not asked[row, -(-visible // piece) * piece:].any(), row
    for name in ("topk", "topk_diag"):
        assert np.array_equal(on_r.outputs[name], off_r.outputs[name])
    for q in range(base.passes):
        assert np.array_equal(on_r.regions[base.msg(q)], off_r.regions[base.msg(q)])


@pytest.mark.parametrize("waves", [1, 3])
@pytest.mark.parametrize("dist", ["normal", "allequal", "fewsel", "above2049", "nan"])
def test_sel_h1_scanning_its_slice_from_lds_gives_the_same_messages(dist, waves):
    """SelectConfig.lds_scan: sel_h1 copies its slice's scores into LDS (a bulk copy and an
    mbarrier a segment, started before its wait for message 0; the mbarriers set up and
    invalidated each job, three CTAs running several jobs each) and scans them from there:
    message 1, the lists, message 2 and the second lists exactly those of the register
    loads, in the relaxed memory mode (a read before its segment's wait is an interpreter
    error); exact selections."""
    key = [26, ["normal", "allequal", "fewsel", "above2049", "nan"].index(dist)]
    runs = _ab_runs(CFG, "lds_scan", dist, key, waves=waves, seed=6)
    copies = [sum(1 for op in L.kernel("interp", 32).walk() if op.opcode == "bulk_load_lds")
              for _, L, _ in runs]
    assert copies[0] > 0 and copies[1] == 0, copies
    (_, _, on), (_, _, off) = runs
    for name in (CFG.msg(1), CFG.list_keys, CFG.list_pos, CFG.msg(2), CFG.list2_keys,
                 CFG.list2_pos):
        assert np.array_equal(on.regions[name], off.regions[name]), name
    assert np.array_equal(on.outputs["topk"], off.outputs["topk"])
    assert np.array_equal(on.outputs["topk_diag"], off.outputs["topk_diag"])


def test_sm90a_lds_scan_ptx():
    """select_hist glm5 rows 8 with lds_scan: sel_h1's copies go through the TMA unit with
    their mbarriers set up and invalidated per job, the LDS holds the longest slice (128 KB)
    within sm_90a's 227 KB a CTA, and (where ptxas is installed) nothing spills."""
    import re

    from conftest import ptxas_report
    from monokernel.backend import nvptx
    from spec import BuildSpec
    from stages import kinds
    L = kinds.kind("select_hist").launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
    for st in L.stages:
        if isinstance(st, sel.SelectPass):
            st.lds_scan = True
    kern = L.kernel("sm_90a")
    assert 128 * 1024 < kern.lds_bytes <= 227 * 1024, kern.lds_bytes
    ptx = nvptx.build_ptx(kern)
    for pattern in (r"cp\.async\.bulk\.shared::cluster\.global", r"mbarrier\.inval\.shared::cta",
                    r"mbarrier\.init\.shared::cta"):
        assert re.search(pattern, ptx), pattern
    rep = ptxas_report(ptx)
    if rep is not None:
        assert "0 bytes spill stores" in rep, rep


@pytest.mark.parametrize("dist,waves,tunes", [
    ("normal", 3, dict(lean_prefetch_ahead=2)), ("nan", 2, dict(lean_prefetch_ahead=1)),
    ("normal", 3, dict(lean_prefetch_early=1, lean_early_loads=1)),
    # a deferred row's count (the default scan) must still get its own early loads
    ("extreme", 3, dict(lean_early_loads=1)),
    ("allequal", 2, dict(lean_prefetch_early=1, lean_early_loads=1, lean_prefetch_ahead=3))])
def test_lean_scan_prefetches_and_early_loads_change_no_bit(dist, waves, tunes):
    """The lean loop's L2 line prefetches (an iteration's lines `lean_prefetch_ahead`
    iterations ahead; the whole slice's from the waves but wave 0 before the wait for
    message 0) and its first loads before that wait (lean_early_loads) are hints and an
    earlier issue: the same lists and messages as the plain lean loop in the relaxed memory
    mode (the interpreter faults on a prefetch outside the scores or across a line)."""
    lean = dataclasses.replace(DEFERRING, lean_scan=True)

    def tweak(st):
        for attr, value in tunes.items():
            setattr(st, attr, value)
    _same_lists_and_messages(dist, [43, DISTS.index(dist), waves], [
        (lean, tweak), (lean, lambda st: None)], waves=waves, hist="buffer")


def test_lean_early_prefetch_asks_for_every_score_of_every_slice():
    """lean_prefetch_early: every byte of each row's scores up to its key count is asked of
    the L2 (by sel_h1's waves but wave 0), none past the row's slices' lines."""
    rng = np.random.default_rng(47)
    cfg = dataclasses.replace(DEFERRING, lean_scan=True)
    n = request_positions(12000, cfg.rows)
    s = scores_for("normal", rng, n, cfg.capacity, cfg.topk)
    bt = random_block_table(cfg, rng)
    L = select_launch(cfg, grid=3, waves=3, hist="buffer")
    for st in L.stages:
        if isinstance(st, sel.SelectPass):
            st.lean_prefetch_early = 1
    counts = {}
    r = L.run_interp(make_inputs(cfg, s, n, bt, hist="buffer"), step=0, prefetched=counts)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
    asked = counts[cfg.names.scores].reshape(cfg.rows, cfg.capacity * 4)
    line = L2_LINE_BYTES
    for row, keys in enumerate(cfg.n_of(n)):
        end = -(-int(keys) * 4 // line) * line
        assert (asked[row, :keys * 4] >= 1).all(), row
        assert not asked[row, end:].any(), row


@pytest.mark.parametrize("dist,waves,mode,where", [
    ("normal", 3, "relaxed", "lds"), ("allequal", 2, "random", "lds"),
    ("extreme", 3, "inorder", "lds"), ("nan", 1, "random", "lds"),
    ("few", 3, "relaxed", "registers"), ("nan", 2, "relaxed", "registers"),
    ("normal", 2, "relaxed", "copies")])
def test_wide_lean_scan_writes_the_same_lists_and_messages(dist, waves, mode, where,
                                                           monkeypatch):
    """lean_lane_keys = 32 (a lane's 32 consecutive keys an iteration, a 32-bit mask, counts
    of six bits, an iteration's valid keys up to all 32): the default scan's lists and
    messages bit for bit, with the store rounds picking from the LDS staging, from the
    registers (an 8-vector select tree) or from the lane's async copies; slices that end
    inside an iteration (3 waves) and rows of every special value; exact."""
    from monokernel.dsl import KernelBuilder
    lean = dataclasses.replace(DEFERRING, lean_scan=True, lean_copies=where == "copies")
    if where == "registers":
        monkeypatch.setattr(KernelBuilder, "lds_left", lambda self, align=16: 0)

    def wide(st):
        st.lean_lane_keys = sel.LEAN_WIDE_KEYS
    _same_lists_and_messages(dist, [53, DISTS.index(dist), waves], [
        (lean, wide), (DEFERRING, lambda st: None)], waves=waves, mode=mode, hist="buffer")


@pytest.mark.parametrize("attr,value", [("lean_lane_keys", 24), ("lean_refill", 3),
                                        ("lean_prefetch_ahead", -1)])
def test_bad_lean_tunables_are_refused_by_name(attr, value):
    lean = dataclasses.replace(DEFERRING, lean_scan=True)
    L = select_launch(lean, grid=3, waves=2, hist="buffer")
    for st in L.stages:
        if isinstance(st, sel.SelectPass):
            setattr(st, attr, value)
    with pytest.raises(ValueError, match=f"{attr} = {value}"):
        L.kernel("interp", 32)


@pytest.mark.parametrize("dist,waves,mode,lane_keys", [
    ("normal", 3, "relaxed", 16), ("nan", 2, "random", 16), ("extreme", 3, "inorder", 16),
    ("allequal", 3, "relaxed", 32), ("few", 1, "random", 32)])
def test_coalesced_lean_loads_write_the_same_lists_and_messages(dist, waves, mode, lane_keys):
    """lean_coalesced: the wave's keys loaded as whole 16-byte pieces side by side and handed
    to each lane through the LDS staging give the default scan's lists and messages bit for
    bit (early loads and prefetches included), 16 or 32 keys a lane; exact."""
    lean = dataclasses.replace(DEFERRING, lean_scan=True)

    def tweak(st):
        st.lean_coalesced, st.lean_lane_keys, st.lean_early_loads = 1, lane_keys, 1
        st.lean_prefetch_ahead = 1
    _same_lists_and_messages(dist, [59, DISTS.index(dist), waves], [
        (lean, tweak), (DEFERRING, lambda st: None)], waves=waves, mode=mode, hist="buffer")


def test_coalesced_lean_loads_sync_the_wave_around_the_staging():
    """On sm_90a the lanes of a warp are scheduled independently: a lane reads staging words
    other lanes stored only after a bar.warp.sync, and stores the next iteration's only
    after another (the store rounds read other lanes' words); the default loop has none."""
    from monokernel.backend import nvptx
    lean = dataclasses.replace(DEFERRING, lean_scan=True)

    def ptx(coalesced):
        L = select_launch(lean, grid=3, waves=2, hist="buffer")
        for st in L.stages:
            if isinstance(st, sel.SelectPass):
                st.lean_coalesced = coalesced
        return nvptx.build_ptx(L.kernel("sm_90a", 32))
    with_sync = ptx(1).count("bar.warp.sync")
    assert with_sync >= 2 and ptx(0).count("bar.warp.sync") == 0


@pytest.mark.parametrize("dist,waves,mode,refill,where", [
    ("normal", 3, "relaxed", 1, "lds"), ("nan", 2, "random", 1, "registers"),
    ("normal", 3, "relaxed", 2, "lds"), ("extreme", 1, "inorder", 2, "lds"),
    ("allequal", 2, "random", 2, "registers"), ("few", 3, "relaxed", 2, "coalesced")])
def test_lean_refills_write_the_same_lists_and_messages(dist, waves, mode, refill, where,
                                                        monkeypatch):
    """lean_refill 1 (the one register set reloaded once an iteration's keys are dead) and
    2 (two sets taking turns, reloaded two iterations ahead; an odd iteration count runs one
    empty iteration past the slice): the default scan's lists and messages bit for bit, with
    the store rounds' picks from LDS, from registers (reloaded only after them) or through
    the coalesced staging; 1 to 3 waves give odd and even iteration counts; exact."""
    from monokernel.dsl import KernelBuilder
    lean = dataclasses.replace(DEFERRING, lean_scan=True)
    if where == "registers":
        monkeypatch.setattr(KernelBuilder, "lds_left", lambda self, align=16: 0)

    def tweak(st):
        st.lean_refill = refill
        st.lean_coalesced = int(where == "coalesced")
    _same_lists_and_messages(dist, [61, DISTS.index(dist), waves, refill], [
        (lean, tweak), (DEFERRING, lambda st: None)], waves=waves, mode=mode, hist="buffer")


@pytest.mark.parametrize("dist,waves,mode,lane_keys", [
    ("nan", 3, "relaxed", 16), ("extreme", 2, "random", 16), ("normal", 1, "inorder", 16),
    ("nan", 2, "relaxed", 32)])
def test_lean_any_special_writes_the_same_lists_and_messages(dist, waves, mode, lane_keys):
    """lean_any_special (the rare branch's flag from one OR of the compares, its masks built
    in the branch; the flag also sees keys past the slice, which the branch masks off): the
    default scan's lists, messages and NaN / unselectable counts bit for bit, rows of every
    special value, slices ending inside an iteration (3 waves), 16 or 32 keys a lane."""
    lean = dataclasses.replace(DEFERRING, lean_scan=True)

    def tweak(st):
        st.lean_any_special, st.lean_lane_keys = 1, lane_keys
    _same_lists_and_messages(dist, [67, DISTS.index(dist), waves], [
        (lean, tweak), (DEFERRING, lambda st: None)], waves=waves, mode=mode, hist="buffer")


@pytest.mark.parametrize("dist,waves,mode,tunes,where", [
    ("normal", 3, "relaxed", {}, "lds"), ("allequal", 3, "relaxed", {}, "lds"),
    ("nan", 2, "random", {}, "lds"), ("extreme", 3, "inorder", {}, "registers"),
    ("zeros", 1, "random", {}, "lds"), ("few", 3, "relaxed", dict(lean_refill=2), "lds"),
    ("normal", 2, "relaxed", dict(lean_refill=1, lean_early_loads=1,
                                  lean_prefetch_ahead=1), "registers"),
    ("allequal", 3, "random", dict(lean_lane_keys=sel.LEAN_WIDE_KEYS), "lds")])
def test_lean_spans_write_the_same_lists_and_messages(dist, waves, mode, tunes, where,
                                                      monkeypatch):
    """lean_spans (each wave lists its own span of the slice into scratch lists with no CTA
    barrier in its loop, then the waves' lists are laid end to end and the next digit
    counted from the copies): the default scan's lists and messages bit for bit, sel_h1's
    and sel_h2's re-listing of a deferred row (allequal, few); 3 waves of a slice whose
    last wave's span is short or empty, 1 wave (no exchange), the store rounds picking
    from LDS or registers, refills, 32 keys a lane, early loads; exact."""
    from monokernel.dsl import KernelBuilder
    lean = dataclasses.replace(DEFERRING, lean_scan=True, lean_spans=True)
    if where == "registers":
        monkeypatch.setattr(KernelBuilder, "lds_left", lambda self, align=16: 0)

    def tweak(st):
        for attr, value in tunes.items():
            setattr(st, attr, value)
    _same_lists_and_messages(dist, [67, DISTS.index(dist), waves], [
        (lean, tweak), (DEFERRING, lambda st: None)], waves=waves, mode=mode, hist="buffer")


def test_lean_spans_list_each_wave_alone_and_gather_after_one_barrier():
    """lean_spans moves the waves' count exchange out of the loop: sel_h1's kernel has
    fewer CTA barriers on sm_90a's path (the loop's one is gone) and declares the scratch
    lists it writes; the default has none."""
    from monokernel.backend import nvptx

    def build(spans):
        cfg = dataclasses.replace(DEFERRING, lean_scan=True, lean_spans=bool(spans))
        L = select_launch(cfg, grid=3, waves=2, hist="buffer")
        scratch = [n for st in L.stages if isinstance(st, sel.SelectPass)
                   for r in st.regions() for n in [r.name] if n.endswith("_span")]
        return L, scratch
    L0, none = build(0)
    L1, scratch = build(1)
    assert not none and sorted(scratch) == sorted(
        f"{n}_span" for n in (CFG.list_keys, CFG.list_pos, CFG.list2_keys, CFG.list2_pos))
    assert nvptx.build_ptx(L1.kernel("sm_90a", 32)).count("bar.sync") < \
        nvptx.build_ptx(L0.kernel("sm_90a", 32)).count("bar.sync")


@pytest.mark.parametrize("other", ["lean_coalesced", "lean_copies"])
def test_lean_spans_refuse_the_cta_wide_iteration_layouts(other):
    lean = dataclasses.replace(DEFERRING, lean_scan=True, lean_spans=True,
                               lean_copies=other == "lean_copies")
    with pytest.raises(ValueError, match="lean_spans = 1"):
        L = select_launch(lean, grid=3, waves=2, hist="buffer")
        for st in L.stages:
            if isinstance(st, sel.SelectPass):
                st.lean_coalesced = int(other == "lean_coalesced")
        L.kernel("interp", 32)


@pytest.mark.parametrize("dist,waves,form", [
    ("normal", 3, "fold"), ("allequal", 2, "fold"), ("nan", 3, "tail"), ("few", 3, "tail"),
    ("extreme", 2, "fold_tail")])
def test_lean_spans_with_the_fold_and_the_tail_finish(dist, waves, form):
    """lean_spans under the select_hist kind's forms on the H200 (the first digit folded
    into sel_h1; the bucketed tail finish, whose bucketing reads the gathered list back):
    every region both builds have (messages, lists, buckets) and every output the same as
    without spans, in the relaxed memory mode; exact."""
    base = dataclasses.replace(DEFERRING, lean_scan=True, digits=(6, 9, 9, 8),
                               fold_first_digits="fold" in form, tail_finish="tail" in form)
    rng = np.random.default_rng([71, DISTS.index(dist), waves])
    n = request_positions(12000, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    bt = random_block_table(CFG, rng)
    out, scratch = [], set()
    for cfg in (dataclasses.replace(base, lean_spans=True), base):
        L = select_launch(cfg, grid=3, waves=waves, hist="buffer")
        scratch |= {name for st in L.stages if isinstance(st, sel.SelectPass)
                    and st.list_out is not None and cfg.lean_spans for name in st.span_lists()}
        r = L.run_interp(make_inputs(cfg, s, n, bt, hist="buffer"), step=0, mode="relaxed",
                         seed=5)
        assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
        out.append(r)
    a, b = out
    shared = sorted(set(a.regions) & set(b.regions))
    # the spans build differs only by its scratch lists: 2 per listing pass (3 with the fold,
    # whose sel_h2 lists too; 1 in the tail forms, which finish after sel_h1's list)
    assert CFG.list_keys in shared and set(a.regions) - set(b.regions) == scratch
    assert len(scratch) == (4 if form == "fold" else 2)
    for name in shared:
        assert np.array_equal(a.regions[name], b.regions[name]), name
    for name in ("topk", "topk_diag"):
        assert np.array_equal(a.outputs[name], b.outputs[name]), name


def test_the_fused_index_selects_exactly_through_lean_spans():
    from tools import check_topk
    assert check_topk.main(["--through", "index", "--rows", "2", "--pos", "2049",
                            "--tune", "launch.lean_spans=1"]) == 0
