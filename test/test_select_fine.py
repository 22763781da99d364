"""Refined first digits (SelectConfig.fine_digits, layouts/scores.py): the scoring counts
every score's top 10 bits per (job, row) into `score_fine`; sel_h1 decides the 64-bin first
digit as before, then its 4 sub-bits from the 16 sub-bins of the threshold bin summed over the
parts, and lists at the 10-bit prefix. Checked here: exact top-k (independent numpy order) and
the same slots and diagnostics as the coarse plan, bit for bit, on every check_topk
distribution in relaxed memory mode (1 and 3 waves, rows that take every key); message 1's
state against numpy (the 10-bit prefix, the keys still needed, every slice's keys above the
prefix and its list length); a split that does not add up rejected by name; the scoring's
region against a bincount of its own scores and the fused index exact through check_topk
(W1, W2, the launch's own new keys rescored); the sm_90a and gfx950 builds; bad settings."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import INDEX_JOB_LOOP_SPILL_BYTES, check_job_loop_spills, ptxas_report
from layouts.scores import ScoresLayout, ordered_key, refined_digit
from monokernel.link import LaunchFailed
from spec import BuildSpec
from stages import kinds
from stages.select import (FINE_DIGITS, X_ABOVE, X_D, X_NEED, X_NLIST, X_Q, SelectConfig,
                           make_inputs, random_block_table, request_positions, select_launch,
                           select_stages, slice_bounds)
from tools import common
from tools.check_topk import DISTS, check_rows, scores_for

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs (test_select_fold's CFG)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, defer_fat_bins=True,
                   digits=(6, 9, 9, 8))
PARTS = 3  # partial fine histograms a row (the scoring's jobs; any split adds up the same)
FINE = dataclasses.replace(CFG, fine_digits=True, fine_parts=PARTS, defer_fat_bins=False,
                           digits=FINE_DIGITS)


def _case(dist, seed=61, pos=12000):
    rng = np.random.default_rng([seed, sorted(DISTS).index(dist)])
    n = request_positions(pos, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    return s, n, random_block_table(CFG, rng)


def _run(cfg, s, n, bt, waves=3, inputs=None):
    L = select_launch(cfg, grid=3, waves=waves, hist="buffer")
    inp = inputs if inputs is not None else make_inputs(cfg, s, n, bt, hist="buffer")
    r = L.run_interp(inp, step=0, mode="relaxed", seed=9)
    assert not check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)
    return r


def _same(a, b):
    for name in ("topk", "topk_diag"):
        assert np.array_equal(a.outputs[name], b.outputs[name]), name


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_refined_first_digits_select_what_the_coarse_plan_selects(dist):
    s, n, bt = _case(dist)
    _same(_run(FINE, s, n, bt), _run(CFG, s, n, bt))


@pytest.mark.parametrize("dist,waves,pos", [("normal", 1, 12000), ("few", 1, 12000),
                                            ("normal", 3, 100), ("allequal", 1, 5000)])
def test_one_wave_and_rows_that_take_every_key(dist, waves, pos):
    """pos 100: fewer keys than K, the first decision takes them all and nothing is refined."""
    s, n, bt = _case(dist, seed=62, pos=pos)
    _same(_run(FINE, s, n, bt, waves=waves), _run(CFG, s, n, bt, waves=waves))


@pytest.mark.parametrize("dist", ["normal", "few", "above2048"])
def test_message_1_holds_the_ten_bit_decision(dist):
    """Per row: the prefix X_Q is the refined digit of the row's K-th key, X_NEED the keys
    still needed at it; per slice: X_ABOVE its keys above the prefix (its list length less its
    count at the prefix), X_NLIST every selectable key at or above it."""
    s, n, bt = _case(dist, seed=63)
    r = _run(FINE, s, n, bt)
    msg = np.asarray(r.regions[FINE.msg(1)]).reshape(FINE.rows, FINE.max_slices, -1)
    for row in range(FINE.rows):
        keys = ordered_key(s[row, :n[row]])
        digits = refined_digit(keys)
        kth = np.sort(keys[keys != 0])[-FINE.topk]
        q = int(refined_digit(kth))
        sc = slice_bounds(int(n[row]), FINE.segment, FINE.max_slices, 0)[0]
        for sl in range(sc):
            _, lo, hi = slice_bounds(int(n[row]), FINE.segment, FINE.max_slices, sl)
            st = msg[row, sl, FINE.state_word:FINE.state_word + 16]
            assert st[X_D] == 10 and st[X_Q] == q, (row, sl, st[X_D], st[X_Q], q)
            assert st[X_NEED] == FINE.topk - np.count_nonzero(digits > q), (row, sl)
            mine, dmine = keys[lo:hi], digits[lo:hi]
            assert st[X_ABOVE] == np.count_nonzero(dmine > q), (row, sl)
            assert st[X_NLIST] == np.count_nonzero((dmine >= q) & (mine != 0)), (row, sl)


def test_sub_bins_that_do_not_add_up_are_rejected():
    s, n, bt = _case("normal", seed=64)
    inp = make_inputs(FINE, s, n, bt, hist="buffer")
    inp["score_fine"][0] += 1  # every bin of part 0: the threshold bin's sum is off by 16
    L = select_launch(FINE, grid=3, waves=3, hist="buffer")
    with pytest.raises(LaunchFailed, match="sel_h1.*refined first digits .score_fine. of the "
                                           "threshold bin do not add up"):
        L.run_interp(inp, step=0, mode="relaxed", seed=9)


def _fused(rows, pos, workload, tunes=(("launch", "fine_digits", "1"),)):
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    L = common.launch_for(kind, spec, list(tunes))
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(rows), pos, workload)
    return L, inp, L.run_interp(inp, step=0, mode="relaxed", seed=3)


@pytest.mark.parametrize("rows,workload", [(2, "W1"), (8, "W2")])
def test_the_scorings_fine_counts_are_its_scores_refined_digits(rows, workload):
    """Summed over the jobs, score_fine holds each row's refined first digits of the scores
    the launch stored, the launch's own new keys included; the selection on them is exact.
    (The fix-up's move of a stale digit at 10 bits is not observable here: in the interpreter
    the key job's cache write lands before the key loops read the slot, so the stale score is
    the new one. On a GPU a count it missed shows as FINE_MISMATCH, not as a wrong set.)"""
    L, inp, r = _fused(rows, 2049, workload)
    p = L.plan
    assert p.fine_digits and L.select_cfg.fine_digits and L.select_cfg.digits == FINE_DIGITS
    scores = np.asarray(r.regions["scores"], np.float32).reshape(p.rows, -1)
    fine = np.asarray(r.regions["score_fine"]).reshape(p.score_jobs, p.rows, -1).sum(0)
    n = np.asarray(inp["positions"]).reshape(-1) + 1
    for row in range(p.rows):
        want = np.bincount(refined_digit(ordered_key(scores[row, :n[row]])), minlength=1024)
        assert np.array_equal(fine[row], want), row
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())


def test_the_fused_index_selects_the_same_through_refined_digits():
    from tools import check_topk
    assert check_topk.main(["--through", "index", "--rows", "2,8", "--pos", "2049",
                            "--workload", "W1,W2", "--tune", "launch.fine_digits=1"]) == 0


def test_the_builds_with_refined_digits():
    """sm_90a: the fused index at rows 8 through ptxas (INDEX_JOB_LOOP_SPILL_BYTES, none in a
    loop of the job loop);
    gfx950: zero spills; gfx942: its 64 KB of LDS cannot hold a row's 1024 counts beside the
    rest, an error naming the budget."""
    from monokernel.dsl import DSLError
    kind = kinds.kind("index")
    tune = [("launch", "fine_digits", "1")]
    ptx = common.launch_for(kind, BuildSpec.make("glm5", rows=8, target="sm_90a"),
                            tune).kernel("sm_90a")
    from monokernel.build import build_many
    text = build_many([ptx])[0].data.decode()
    report = ptxas_report(text)
    if report is not None:
        check_job_loop_spills(report, text, INDEX_JOB_LOOP_SPILL_BYTES)
    L = common.launch_for(kind, BuildSpec.make("glm5", rows=2, target="gfx950"), tune)
    assert L.kernel("gfx950") is not None
    with pytest.raises(DSLError, match="fine_digits: the scoring's 32768 bytes .* gfx942 gives "
                                       "a CTA 65536"):
        common.launch_for(kind, BuildSpec.make("glm5", rows=8, target="gfx942"),
                          tune).kernel("gfx942")


def test_the_fused_index_refines_and_folds_by_default_on_nvidia_only():
    """stages.index.FINE_DIGITS_ON_NVIDIA (measured on an H100, bench/NOTES.md v31): the
    sm_90a fused index refines its first digits and folds them into sel_h1 unless told not
    to; AMD (unmeasured; gfx942's LDS cannot hold the counts) and the interpreter's default
    chip (gfx950) keep the coarse plan; launch.fine_digits=0 gives it back on sm_90a, and
    the fold then follows the selection's own default (off). With both on, sm_90a also
    folds the scoring's per-job counts (ROW_PARTS_ON_NVIDIA) and its scoring shares pages
    and searches the fix-up by ballot (SHARE_PAGES_ON_NVIDIA, FIXUP_BALLOT_ON_NVIDIA, the
    index_scoring kind too), and reads the launch's new keys from the cache with no fix-up
    (CACHED_NEW_KEYS_ON_NVIDIA); turning either digit option off turns row_parts off."""
    kind = kinds.kind("index")
    for target, chip, on in (("sm_90a", None, True), ("interp", "sm_90a", True),
                             ("interp", None, False), ("gfx950", None, False),
                             ("gfx942", None, False)):
        for rows in (2, 8):
            spec = BuildSpec.make("glm5" if target != "interp" else "tiny", rows=rows,
                                  target=target)
            L = kind.launch(spec, **({"chip": chip} if chip else {}))
            cfg = L.select_cfg
            assert (L.plan.fine_digits, cfg.fine_digits, cfg.fold_first_digits) == \
                (on, on, on), (target, chip, rows)
            assert (cfg.digits == FINE_DIGITS) is on and not (on and cfg.defer_fat_bins), \
                (target, chip, rows)
            assert (L.plan.row_parts, cfg.row_parts) == (on, on), (target, chip, rows)
            for st in (scorer(L), scorer(kinds.kind("index_scoring").launch(
                    spec, **({"chip": chip} if chip else {})))):
                assert (st.share_pages, st.fixup_ballot, st.reads_cached_new_keys) == \
                    (on, on, on), (target, chip, rows)
    spec = BuildSpec.make("glm5", rows=8, target="sm_90a")
    off = common.launch_for(kind, spec, [("launch", "fine_digits", "0")])
    assert not off.plan.fine_digits and not off.select_cfg.fine_digits
    assert not off.select_cfg.fold_first_digits
    unfolded = common.launch_for(kind, spec, [("launch", "fold_first_digits", "0")])
    assert unfolded.select_cfg.fine_digits and not unfolded.select_cfg.fold_first_digits
    for L in (off, unfolded):
        assert not L.plan.row_parts and not L.select_cfg.row_parts
    told = common.launch_for(kind, spec, [("ix_score", "share_pages", "0"),
                                          ("ix_score", "fixup_ballot", "0")])
    assert not scorer(told).share_pages and not scorer(told).fixup_ballot
    # the cache's new keys: off when told, and by default with keys by TMA (the async
    # proxy, which the key loop's acquire does not order) rather than an error
    for tune, reads in ((("ix_score", "cached_new_keys", "0"), False),
                        (("ix_score", "tma_keys", "1"), False)):
        assert scorer(common.launch_for(kind, spec, [tune])).reads_cached_new_keys is reads


def scorer(launch):
    return next(st for st in launch.stages if st.name == "ix_score")


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="fine_digits needs count_from_list and excludes "
                                         "defer_fat_bins"):
        dataclasses.replace(FINE, defer_fat_bins=True)
    with pytest.raises(ValueError, match="fine_parts = 0"):
        dataclasses.replace(FINE, fine_parts=0)
    with pytest.raises(ValueError, match=r"digits \(6, 9, 9, 8\).*28 in all"):
        dataclasses.replace(FINE, digits=(6, 9, 9, 8))
    with pytest.raises(ValueError, match="a standalone selection takes score_fine as an input"):
        select_launch(FINE, grid=3, waves=1, hist=None)
    with pytest.raises(ValueError, match="fine_digits refines the scoring's first digits"):
        select_stages(FINE, hist=None, fine="buffer")
    with pytest.raises(ValueError, match="sel_h1 needs the refined first digits' source"):
        select_stages(FINE, hist="buffer")
    tiny = BuildSpec.make("tiny", rows=2, target="interp")
    with pytest.raises(ValueError, match="kind select builds that part of its launch itself"):
        common.launch_for(kinds.kind("select"), tiny, [("launch", "fine_digits", "1")])
    with pytest.raises(ValueError, match="the select kind has no scoring's first digits"):
        kinds.kind("select").launch(tiny, fine_digits=True)


def test_the_select_hist_kind_refines_through_the_fold():
    """The select_hist kind folds the first digit into sel_h1 (off AMD): the refinement after
    the fold's decision, exact on a crowded, a tied and a normal distribution."""
    from tools import check_topk
    assert check_topk.main(["--first-digits", "buffer", "--rows", "2", "--pos", "8447",
                            "--dist", "normal,few,above2049",
                            "--tune", "launch.fine_digits=1"]) == 0
    _, cfg, L = check_topk.build("tiny", 2, "interp", first_digits="buffer",
                                 tunes=[("launch", "fine_digits", "1")])
    assert cfg.fine_digits and cfg.fold_first_digits and L.stages[0].refines
    with pytest.raises(ValueError, match="needs --first-digits buffer"):
        check_topk.build("tiny", 2, "interp", tunes=[("launch", "fine_digits", "1")])


NV_TAIL = ("--tune", "launch.fine_digits=1,launch.tail_finish=1,launch.group_max=1")


@pytest.mark.parametrize("rows,pos,dists", [
    (2, 8447, "normal,few,allequal,above2047,above2048,above2049"),
    (4, 12345, "normal,neginf,fewsel,nan,zeros,extreme")])
def test_the_select_hist_nvidia_form_is_exact(rows, pos, dists):
    """select_hist's sm_90a form at rows >= 4 (SELECT_HIST_TAIL_ON_NVIDIA: refined first
    digits, the tail finish after them, the group skip over given maxima) in the
    interpreter: exact on crowded, tied, special and normal rows (check_topk's independent
    order), at positions crossing slices and pages."""
    from tools import check_topk
    assert check_topk.main(["--first-digits", "buffer", "--rows", str(rows), "--pos", str(pos),
                            "--dist", dists, *NV_TAIL]) == 0


def test_the_select_hist_kind_takes_the_tail_form_on_sm90a_from_rows_4():
    """The kind's and check_topk's choices agree: on at sm_90a rows 4 / 8, off at rows 2, on
    AMD and in the interpreter; launch.fine_digits=0 gives back the coarse plan (whose tail
    finish then follows the slices a row, as before), another finish chosen keeps its own."""
    from stages.select import launches
    from tools import check_topk
    hist = kinds.kind("select_hist")
    # (tail: the refined form's, or rows 2's wide rows' (64 slices) on sm_90a; AMD and the
    # interpreter's 4 slices a row keep the rounds)
    for target, rows, on, tail in [("sm_90a", 8, True, True), ("sm_90a", 4, True, True),
                                   ("sm_90a", 2, False, True), ("gfx950", 8, False, False),
                                   ("interp", 8, False, False)]:
        spec = BuildSpec.make("glm5" if target != "interp" else "tiny", rows=rows,
                              target=target)
        c = hist.launch(spec).select_cfg
        assert (c.fine_digits, c.group_skip, c.tail_finish) == (on, on, tail), (target, rows)
        if on:
            assert c.tail_finish and c.fine_parts == launches._grid_for(spec)
            old = hist.launch(spec, fine_digits=0).select_cfg
            assert not (old.fine_digits or old.group_skip)
            assert old.tail_finish == (rows == 4)  # (33 slices a row: the wide rows' tail)
            assert not hist.launch(spec, tail_min_keys=65536).select_cfg.tail_finish
            per_row = hist.launch(spec, tail_per_slice=64).select_cfg  # (excludes them)
            assert not (per_row.fine_digits or per_row.tail_finish or per_row.group_skip)
        if target != "interp":
            _, cfg, _ = check_topk.build("glm5", rows, target, first_digits="buffer")
            assert (cfg.fine_digits, cfg.tail_finish, cfg.group_skip, cfg.digits) == \
                (c.fine_digits, c.tail_finish, c.group_skip, c.digits)
