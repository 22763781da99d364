"""IndexPlan.group_max (sm_90a, `--tune launch.group_max=1`): the scoring also writes each
row's aligned 16-key group maxima (`score_gmax`, layouts/scores.py GROUP_KEYS; a row's last
group, the one holding its bound, an upper bound: the keys past the bound count), NaNs passed
over and -inf as it is (a row holding either scans every group: sel_h1 learns it from the
row's refined bin 0), from the head-sum path's lanes and the one-pair chains'; the fix-up's
rescored keys leave +inf (their old maximum may be stale), which a selection reading it
must take as "scan".
Checked in the interpreter (the sm_90a paths, chip="sm_90a") against numpy's group maxima
of the launch's own scores, the region poisoned with NaN before the run, so a group left
unwritten shows; the outputs (scores, top-k) unchanged by the option."""
from __future__ import annotations

import numpy as np
import pytest

from layouts.scores import GROUP_KEYS, TOPK
from stages.index_plan import PAGE as PAGE_KEYS

POISON = np.float32(np.nan)


def _launch(rows, tunes=(), group_max=True, **launch_kw):
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    kind = kinds.kind("index")
    # (the fused index's selection then skips groups too: it needs the spans loop)
    L = common.apply_tunes(kind.launch(spec, chip="sm_90a", group_max=group_max,
                                       lean_spans=True, **launch_kw), list(tunes))
    return kind, spec, L


def _run(rows, workload, tunes=(), mode="relaxed", group_max=True, pos=2049, edit=None,
         seed=11, **launch_kw):
    from tools import common
    kind, spec, L = _launch(rows, tunes, group_max, **launch_kw)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(rows), pos, workload)
    if edit is not None:
        edit(inp)
    arena = L.new_arena()
    if group_max:  # unwritten maxima read NaN, never equal to anything
        at = L.arena["score_gmax"].data_offset
        n = L.arena["score_gmax"].region.nbytes
        arena[at:at + n] = np.frombuffer(np.full(n // 4, POISON, np.float32).tobytes(), np.uint8)
    r = L.run_interp(inp, arena=arena, step=0, mode=mode, seed=seed)
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
    return L, inp, r


def expected_maxima(scores, positions):
    """{(row, group): (max, whole?)} over each row's visible keys (0 .. positions[row]),
    NaNs passed over (NaN where the group holds nothing else), -inf as it is; whole: the
    group holds no key past the row's bound."""
    out = {}
    for row, pos in enumerate(np.asarray(positions).reshape(-1)):
        s = scores[row, :pos + 1].astype(np.float64)
        pad = -(-len(s) // GROUP_KEYS) * GROUP_KEYS
        g = np.full(pad, -np.inf)
        g[:len(s)] = s
        with np.errstate(invalid="ignore"):
            for grp, m in enumerate(np.fmax.reduce(g.reshape(-1, GROUP_KEYS), axis=1)):
                out[(row, grp)] = (m, (grp + 1) * GROUP_KEYS <= len(s))
    return out


def _check(L, inp, r, exact: bool):
    """(groups whose maximum is the reference's, groups reading +inf: the fix-up's). A
    row's last group, the one holding its bound, may read more (the producer takes the
    scores of the keys past the bound into it too: an upper bound is all a skip needs),
    never less; every other group exactly."""
    scores = np.asarray(r.regions["scores"], np.float32).reshape(L.plan.rows, L.plan.capacity)
    gmax = np.asarray(r.regions["score_gmax"], np.float32).reshape(L.plan.rows, -1)
    want = expected_maxima(scores, inp["positions"])
    real = unknown = 0
    for (row, grp), (m, whole) in want.items():
        got = float(gmax[row, grp])
        if got == m or (np.isnan(got) and np.isnan(m)):
            real += 1
        elif not whole and (np.isnan(m) or got > m):
            real += 1
        else:
            assert not exact and got == np.inf, (row, grp, got, m)
            unknown += 1
    return real, unknown


@pytest.mark.parametrize("mode", ["relaxed", "random"])
def test_one_request_of_eight_rows_writes_every_groups_maximum(mode):
    """W1 at rows 8: one group of four pairs, every step on the mma head-sum path: each
    visible group's maximum exactly (groups across page and segment ends included), a row's
    last group at least its maximum."""
    L, inp, r = _run(8, "W1", mode=mode)
    real, unknown = _check(L, inp, r, exact=True)
    assert real > 0 and unknown == 0


def test_one_pair_chains_and_shared_pages_write_every_groups_maximum():
    """W2 at rows 8 (one-pair requests on the FMA epilogue, the pages they share scored once
    on the head-sum path) and W1 at rows 2 (one pair: the FMA epilogue alone): every visible
    group's maximum exactly (a row's last at least), from either lane layout."""
    for rows, workload in ((8, "W2"), (2, "W1")):
        L, inp, r = _run(rows, workload)
        real, unknown = _check(L, inp, r, exact=True)
        assert real > 0 and unknown == 0


def test_every_maximum_word_is_the_same_under_any_interleaving():
    """The words past a row's bound (its last group's upper bound, the groups wholly past
    it) come from keys no job of the launch writes while the scoring reads them (the new
    keys' job is waited for: row 0's last group holds row 1's new key), so the region's
    bytes, which check_layer digests, do not depend on how the jobs interleave: two random
    schedules, the same bytes."""
    got = {np.asarray(_run(2, "W1", mode="random", seed=seed)[2].regions["score_gmax"])
           .tobytes() for seed in (3, 4)}
    assert len(got) == 1


@pytest.mark.parametrize("rows,workload", [(8, "W2"), (2, "W1")])
def test_one_pair_chains_maxima_a_chain_behind_are_the_same_bits(rows, workload):
    """IndexScore.defer_narrow_gmax (the one-pair chains' swaps and store after the next
    chain's issue, the held row's flag clear for the first): the same maxima, bit for bit,
    as swapping them at once, at rows 8 (W2: groups of one pair beside the shared pages'
    head-sum path, one chain a step) and rows 2 (every step one chain)."""
    got = [np.asarray(_run(rows, workload, tunes=[
        ("ix_score", "defer_narrow_gmax", on)])[2].regions["score_gmax"]).view(np.uint32)
        for on in ("1", "0")]
    np.testing.assert_array_equal(got[0], got[1])
    assert np.isfinite(got[0].view(np.float32)).any()


def test_the_fix_ups_rescored_keys_leave_their_groups_unknown():
    """With the fix-up (cached_new_keys=0) a rescored new key's group reads +inf: its old
    maximum may be stale."""
    L, inp, r = _run(8, "W1", tunes=[("ix_score", "cached_new_keys", "0")])
    _check(L, inp, r, exact=False)
    gmax = np.asarray(r.regions["score_gmax"], np.float32).reshape(L.plan.rows, -1)
    for row, pos in enumerate(np.asarray(inp["positions"]).reshape(-1)):
        assert gmax[row, pos // GROUP_KEYS] == np.inf


def test_the_option_changes_no_output_and_is_refused_off_sm90a():
    from spec import BuildSpec
    from stages import kinds
    outs = []
    for on in (True, False):
        L, inp, r = _run(8, "W1", group_max=on)
        outs.append((np.asarray(r.regions["scores"]), r.outputs[L.select_cfg.names.out]))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    with pytest.raises(ValueError, match="group_max .* chip 'gfx950'"):
        kinds.kind("index").launch(BuildSpec.make("tiny", rows=8, target="interp"),
                                   group_max=True)


def _select_run(rows, workload, pos, mode, edit=None, tunes=(), regions=(), **kw):
    from tools import common
    from spec import BuildSpec
    from stages import kinds
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    L = common.apply_tunes(kind.launch(spec, chip="sm_90a", lean_spans=True, **kw), tunes)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(rows + pos), pos,
                                    workload)
    if edit is not None:
        edit(inp)
    r = L.run_interp(inp, step=0, mode=mode, seed=13)
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
    c = L.select_cfg
    scores = np.asarray(r.regions["scores"], np.float32).reshape(L.plan.rows, -1)
    return L, {n: np.asarray(r.regions[n])
               for n in (c.list_keys, c.list_pos) + tuple(f(c) for f in regions)}, \
        np.asarray(r.outputs[c.names.out]), np.asarray(r.outputs[c.names.diag]), \
        scores[:, :np.asarray(inp["positions"]).max() + 1]


@pytest.mark.parametrize("rows,workload,pos,mode", [
    (8, "W1", 2049, "relaxed"), (8, "W1", 2049, "random"), (8, "W2", 2049, "relaxed"),
    (4, "W1", 1500, "inorder"), (8, "W1", 700, "relaxed")])
def test_sel_h1_skipping_groups_lists_what_the_spans_loop_lists(rows, workload, pos, mode):
    """SelectConfig.group_skip (launch.group_max with lean_spans): sel_h1 lists only the
    16-key groups whose maximum reaches its threshold, a flagged group a lane: the lists
    (keys and positions), the top-k and its diagnostics bit for bit the lean spans loop's,
    at W1 (real maxima), W2 (some +inf), a context under K (every key selected)."""
    _, lists, out, diag, _ = _select_run(rows, workload, pos, mode, group_max=True)
    _, lists0, out0, diag0, _ = _select_run(rows, workload, pos, mode)
    for name in lists0:  # (fresh arenas: words neither run wrote are zero in both)
        np.testing.assert_array_equal(lists[name], lists0[name])
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


# groups of tiny scores: the scales of every group whose number is 1 mod 5 (20% of the keys)
# set to 2^-100, so in a row whose threshold is positive (6 of the 8 here: the others' top
# quarter reaches into negative scores) the top-k lies among the other keys and those
# groups are skipped
TINY_SCALE = 2.0 ** -100
TINY_GROUP_MOD, TINY_GROUP_RESIDUES = 5, (1,)
TINY_ROWS = 6  # rows whose threshold is above every tiny score


def _tiny_groups(inp):
    from stages.index_plan import PAGE, PAGE_SHIFT
    from stages.index_tiling import HEAD_DIM
    cache, table = inp["index_cache"], np.asarray(inp["block_table"])
    tiny = np.frombuffer(np.float32(TINY_SCALE).tobytes(), np.uint8)
    for row in range(table.shape[0]):
        for q in range(int(np.asarray(inp["positions"]).max()) + 1):
            if (q // GROUP_KEYS) % TINY_GROUP_MOD in TINY_GROUP_RESIDUES:
                cache[table[row, q >> PAGE_SHIFT], PAGE * HEAD_DIM + 4 * (q % PAGE):][:4] = tiny


def test_sel_h1_skips_groups_of_tiny_scores_and_lists_what_the_spans_loop_lists():
    """A context of ~8000 keys, a fifth of them in groups of tiny scores below most rows'
    thresholds (counted): sel_h1 skipping them lists, selects and counts bit for bit what
    the spans loop does."""
    pages = SPECIAL_POS // PAGE_KEYS + 8
    runs = [_select_run(8, "W1", SPECIAL_POS, "relaxed", edit=_tiny_groups, group_max=on,
                        cache_pages=pages) for on in (True, False)]
    (_, lists, out, diag, _), (_, lists0, out0, diag0, scores0) = runs
    # the premise: in TINY_ROWS rows a tiny group never holds a listed key
    thresholds = np.sort(scores0, axis=1)[:, ::-1][:, TOPK - 1]
    assert (thresholds > TINY_SCALE * 2 ** 40).sum() >= TINY_ROWS, thresholds
    for name in lists0:
        np.testing.assert_array_equal(lists[name], lists0[name])
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


def test_group_skip_needs_the_spans_loop_and_the_scorings_maxima():
    from spec import BuildSpec
    from stages import kinds
    with pytest.raises(ValueError, match="group_skip: .* lean_spans"):
        kinds.kind("index").launch(BuildSpec.make("tiny", rows=8, target="interp"),
                                   chip="sm_90a", group_max=True, lean_spans=False)
    with pytest.raises(ValueError, match="group_skip: .* fine_digits"):
        kinds.kind("index").launch(BuildSpec.make("tiny", rows=8, target="interp"),
                                   chip="sm_90a", group_max=True, lean_spans=True,
                                   fine_digits=False, row_parts=False)


# groups of unselectable scores: each key of the group at each of these positions gets
# zero bytes and a -inf scale (score 0 x -inf = NaN in every row), but the key at the
# position keeps its bytes (score -inf where its head sum is positive, +inf where negative).
# A group of NaNs and a -inf has no score to reach a threshold, so only its maximum's +inf
# makes sel_h1 scan it and count its unselectable keys (near a page's end, in a later
# segment, two groups in a row)
SPECIAL_GROUPS = (100, 777, 1501, 1517)
SPECIAL_POS = 8000  # 2048 of ~8000 keys selected, so the groups' scans are not by chance


def _special_scales(inp):
    """SPECIAL_GROUPS written into the index cache through every row's block table."""
    from stages.index_plan import PAGE, PAGE_SHIFT
    from stages.index_tiling import HEAD_DIM
    cache, table = inp["index_cache"], np.asarray(inp["block_table"])
    neg_inf = np.frombuffer(np.float32(-np.inf).tobytes(), np.uint8)
    for pos in SPECIAL_GROUPS:
        first = pos // GROUP_KEYS * GROUP_KEYS
        for row in range(table.shape[0]):
            for q in range(first, first + GROUP_KEYS):
                page, slot = table[row, q >> PAGE_SHIFT], q % PAGE
                cache[page, PAGE * HEAD_DIM + 4 * slot:][:4] = neg_inf
                if q != pos:
                    cache[page, HEAD_DIM * slot:][:HEAD_DIM] = 0


def _special_rows(scores):
    """[(row, pos)] where SPECIAL_GROUPS' group is a -inf among NaNs (the test's premise)."""
    out = []
    for row in range(scores.shape[0]):
        for pos in SPECIAL_GROUPS:
            grp = scores[row, pos // GROUP_KEYS * GROUP_KEYS:][:GROUP_KEYS]
            others = np.delete(grp, pos % GROUP_KEYS)
            if grp[pos % GROUP_KEYS] == -np.inf and np.isnan(others).all():
                out.append((row, pos))
    return out


def test_unselectable_scores_make_their_rows_scan_every_group():
    """Groups of unselectable scores (NaN, -inf): their maxima as the rule says (the -inf, or
    NaN), every group's exact, and sel_h1 skipping groups lists, selects and counts (the NaN
    and unselectable diagnostics) bit for bit what the spans loop does on the same scores:
    the rows holding them scan every group (their refined bin 0), where the maxima alone
    would leave these groups unscanned and their keys uncounted."""
    L, inp, r = _run(8, "W1", edit=_special_scales)
    scores = np.asarray(r.regions["scores"], np.float32).reshape(L.plan.rows, -1)
    gmax = np.asarray(r.regions["score_gmax"], np.float32).reshape(L.plan.rows, -1)
    special = _special_rows(scores)
    assert len(special) >= 8
    for row, pos in special:  # the premise: no threshold reaches these groups' maxima
        assert gmax[row, pos // GROUP_KEYS] == -np.inf, (row, pos)
    real, unknown = _check(L, inp, r, exact=True)
    assert real > 0 and unknown == 0
    pages = SPECIAL_POS // PAGE_KEYS + 8
    runs = [_select_run(8, "W1", SPECIAL_POS, "relaxed", edit=_special_scales, group_max=on,
                        cache_pages=pages) for on in (True, False)]
    (_, lists, out, diag, _), (_, lists0, out0, diag0, scores0) = runs
    assert len(_special_rows(scores0)) >= 8
    for name in lists0:
        np.testing.assert_array_equal(lists[name], lists0[name])
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)
    # every group's NaNs counted (and its -inf, where the head sum made it one)
    assert (diag0[:, 2] >= (GROUP_KEYS - 1) * len(SPECIAL_GROUPS)).all(), diag0


# sel_h1's loop of maxima then keys an iteration, the block table's check before the fold
# (SelectPass.group_maxima_early, late_input_checks off; the defaults load a wave's maxima
# before the fold and reduce the check after it)
LOOP = (("sel_h1", "group_maxima_early", "0"), ("sel_h1", "late_input_checks", "0"))


@pytest.mark.slow  # (the loop form is off: test_select_group_max keeps one case of it)
@pytest.mark.parametrize("edit", [_tiny_groups, _special_scales], ids=["tiny", "special"])
def test_the_loop_of_maxima_lists_what_the_spans_loop_lists(edit):
    """group_maxima_early off in the fused index (the scoring's maxima, unselectable scores
    flagged by the refined bin 0 after the decision): the lists, top-k and diagnostics bit
    for bit the spans loop's, on groups of tiny scores (skipped) and of NaN / -inf (their
    rows scan every group); the defaults' early maxima are checked by the tests above."""
    pages = SPECIAL_POS // PAGE_KEYS + 8
    (_, lists, out, diag, _), (_, lists0, out0, diag0, _) = [
        _select_run(8, "W1", SPECIAL_POS, "relaxed", edit=edit, group_max=on, tunes=tunes,
                    cache_pages=pages) for on, tunes in ((True, LOOP), (False, ()))]
    for name in lists0:
        np.testing.assert_array_equal(lists[name], lists0[name])
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


def test_the_fused_index_skips_groups_by_default_on_sm90a_only():
    """stages.index.GROUP_SKIP_ON_NVIDIA: the fused index on sm_90a at rows 8 writes the
    maxima and skips by default (with the spans loop; rows 2, untimed, only when asked);
    launch.group_max=0 gives the scan of every group back, lean_spans=0 turns the default
    skip off (it lists by spans), and neither AMD chip nor the scoring alone (no selection
    to read them) writes maxima."""
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    index = kinds.kind("index")

    def aids(L):
        c = L.select_cfg
        return L.plan.group_max, c.group_skip, c.lean_spans, "score_gmax" in L.arena

    assert aids(index.launch(spec, chip="sm_90a")) == (True, True, True, True)
    off = common.launch_for(index, BuildSpec.make("tiny", rows=8, target="sm_90a"),
                            [("launch", "group_max", "0")])
    assert aids(off) == (False, False, False, False)
    no_spans = common.launch_for(index, BuildSpec.make("tiny", rows=8, target="sm_90a"),
                                 [("launch", "lean_spans", "0")])  # (the tune gives an int 0)
    assert aids(no_spans)[:3] == (False, False, False)
    assert aids(index.launch(spec, chip="gfx950"))[:2] == (False, False)
    two = BuildSpec.make("tiny", rows=2, target="interp")  # (timed at rows 8 only)
    assert aids(index.launch(two, chip="sm_90a"))[:2] == (False, False)
    assert aids(index.launch(two, chip="sm_90a", group_max=True))[:3] == (True, True, True)
    assert not kinds.kind("index_scoring").launch(spec, chip="sm_90a").plan.group_max


@pytest.mark.parametrize("rows,workload,mode", [(8, "W1", "relaxed"), (8, "W2", "random"),
                                                (4, "W2", "relaxed"), (2, "W1", "relaxed")])
def test_the_fused_tail_finish_after_refined_digits_selects_what_the_rounds_select(
        rows, workload, mode):
    """launch.tail_finish=1 in the fused index (sm_90a paths: refined first digits folded into
    sel_h1, the group skip at rows 8): sel_h1 buckets its 10-bit prefix's candidates by the
    next digit and sel_out finishes each row from message 1: no sel_h2 or sel_h3, the top-k
    and its diagnostics bit for bit the rounds'."""
    L, _, out, diag, _ = _select_run(rows, workload, 2049, mode, tail_finish=True)
    c = L.select_cfg
    assert c.fine_digits and c.tail_finish and c.group_skip == (rows == 8)
    assert [st.name for st in L.stages if st.name.startswith(c.prefix)] == ["sel_h1", "sel_out"]
    L0, _, out0, diag0, _ = _select_run(rows, workload, 2049, mode, tail_finish=False)
    assert [st.name for st in L0.stages if st.name.startswith(c.prefix)] == [
        "sel_h1", "sel_h2", "sel_h3", "sel_out"]
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


@pytest.mark.parametrize("workload,mode", [("W1", "relaxed"), ("W2", "random")])
def test_the_fused_tail_by_key_count_selects_what_the_rounds_select(workload, mode):
    """launch.tail_min_keys in the fused index (refined first digits, the group skip at rows
    8): the rows of at least the bound (here W1's last row, W2's longer row of each request) finish
    by the tail (their sel_h2 publishes nothing), the others by the rounds; the top-k and its
    diagnostics bit for bit the rounds'."""
    pos = 2049
    rdy2 = (lambda c: c.rdy(2),)
    bound = pos + 1  # (W1: n_keys pos - 6 .. pos + 1, W2: pos and pos + 1 by turns)
    L, got, out, diag, _ = _select_run(8, workload, pos, mode, regions=rdy2,
                                       tail_min_keys=bound)
    c = L.select_cfg
    assert c.fine_digits and c.group_skip and c.tail_min_keys == bound
    n = diag[:, 3].astype(np.int64)  # (the diagnostic row's visible keys: position + 1)
    assert (n >= bound).any() and (n < bound).any(), n  # (both kinds of row)
    published = got[c.rdy(2)].reshape(c.rows, c.max_slices, -1)[:, 0, 0] != 0
    assert list(published) == list(n < bound), (published, n)
    _, _, out0, diag0, _ = _select_run(8, workload, pos, mode)
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


def test_the_fused_index_finishes_by_the_tail_where_the_switch_says(monkeypatch):
    """stages.index.TAIL_FINISH_ON_NVIDIA (on since v50): the sm_90a fused index at rows 8
    (and 4 since v51) finishes each row after two exchanged digits unless told not to, while
    rows 2, AMD and
    the coarse plan (launch.fine_digits=0) keep the rounds; off, every fused index keeps the
    rounds unless asked."""
    from spec import BuildSpec
    from stages import index as index_mod, kinds
    from tools import common
    index = kinds.kind("index")
    eight, two = (BuildSpec.make("tiny", rows=r, target="interp") for r in (8, 2))
    assert index_mod.TAIL_FINISH_ON_NVIDIA
    monkeypatch.setattr(index_mod, "TAIL_FINISH_ON_NVIDIA", False)
    assert not index.launch(eight, chip="sm_90a").select_cfg.tail_finish
    monkeypatch.setattr(index_mod, "TAIL_FINISH_ON_NVIDIA", True)
    assert index.launch(eight, chip="sm_90a").select_cfg.tail_finish
    four = BuildSpec.make("tiny", rows=4, target="interp")
    assert index.launch(four, chip="sm_90a").select_cfg.tail_finish
    assert not index.launch(four, chip="sm_90a").select_cfg.group_skip  # (rows 8 only)
    for L in (index.launch(two, chip="sm_90a"), index.launch(eight, chip="gfx950"),
              index.launch(eight, chip="sm_90a", fine_digits=False),
              common.launch_for(index, BuildSpec.make("tiny", rows=8, target="sm_90a"),
                                [("launch", "tail_finish", "0")])):
        assert not L.select_cfg.tail_finish
    assert index.launch(two, chip="sm_90a", tail_finish=True).select_cfg.tail_finish


@pytest.mark.slow  # (an alternative measured slower and kept off: its default-run case is
# test_index_score_pipeline's test_split_turns_give_the_same_bits; this one, ~18 s a case,
# adds the fused index's maxima a step behind)
@pytest.mark.parametrize("workload", ["W1", "W2"])
def test_split_turns_keep_the_maxima_and_the_top_k(workload):
    """IndexScore.turn_split in the fused index at rows 8 (the all-pairs chain's maxima
    swapped and stored a step behind, under the chain's second turn; W2: one-pair groups
    beside the shared pages' all-pairs path): the same maxima and scores, bit for bit, as
    the default pipeline, and the top-k exact (`_run` asserts it). Two warpgroups a CTA
    (tiny's fused index takes one by default), both runs."""
    runs = [_run(8, workload, tunes=tunes, waves=8)[2] for tunes in (
        [("ix_score", "turns", "1"), ("ix_score", "turn_split", "1")], [])]
    for region in ("score_gmax", "scores"):
        np.testing.assert_array_equal(np.asarray(runs[0].regions[region]).view(np.uint32),
                                      np.asarray(runs[1].regions[region]).view(np.uint32))
    assert np.isfinite(np.asarray(runs[0].regions["score_gmax"], np.float32)).any()
