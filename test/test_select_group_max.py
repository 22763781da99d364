"""Group maxima given as an input (SelectConfig.group_skip with gmax "buffer": the
select_hist kind's `--tune launch.group_max=1`): sel_h1 lists only the 16-key groups whose
maximum in `score_gmax` reaches its threshold, groups holding a NaN or -inf marked +inf by
their producer (`reference.group_maxima`) so that their keys are still counted. Checked in
the interpreter (relaxed memory mode): exact top-k and diagnostics (independent numpy order)
and the same slots and words as scanning every group, on check_topk distributions and on
scores where most groups lie below the threshold (the skip really skips) with NaNs and
-infs among them; maxima that hide those keys, or that hide selected keys, are caught by
the same checks; bad settings named."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import GROUP_KEYS, GROUP_MAX_REGION, ScoresLayout
from monokernel.link import LaunchFailed
from spec import BuildSpec
from stages import kinds
from stages.select.config import GROUPS_A_LANE
from stages.select import (SelectConfig, make_inputs, measured_options, random_block_table,
                           request_positions, select_launch)
from tools import check_topk
from tools.check_topk import DISTS, check_rows, scores_for
from tools.common import apply_tunes

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs, the select_hist kind's form on
# NVIDIA (its measured options, first digits given and folded into sel_h1, the spans loop)
BASE = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, digits=(6, 9, 9, 8),
                    **measured_options(True), lean_lists=True, fold_first_digits=True,
                    lean_spans=True)
SKIP = dataclasses.replace(BASE, group_skip=True)
# ... listing in sel_h1 whatever its threshold bin holds: the quiet case's rows put ~45% of
# their keys in it, which BASE defers to sel_h2 (DEFER_SHIFT), scanning every group there
LISTING = dataclasses.replace(BASE, defer_fat_bins=False)
LISTING_SKIP = dataclasses.replace(LISTING, group_skip=True)
POS = 12000
LANES = 64  # the interpreter's wave
TINY = np.float32(2.0 ** -100)  # a quiet group's scale: its maximum far below any threshold
QUIET_SHARE = 0.8  # groups made quiet
SPECIALS_A_ROW = 6  # quiet groups given a NaN or a -inf, a row
# the defaults' sel_h1 loads the maxima of a wave's whole span before its fold and reduces
# the block table's check after it (SelectPass.group_maxima_early, late_input_checks);
# this turns both back to the loop of maxima then keys and the check before the fold
LOOP = (("sel_h1", "group_maxima_early", "0"), ("sel_h1", "late_input_checks", "0"))


def _case(dist, seed=71):
    rng = np.random.default_rng([seed, sorted(DISTS).index(dist)])
    n = request_positions(POS, BASE.rows)
    return scores_for(dist, rng, n, BASE.capacity, BASE.topk), n, random_block_table(BASE, rng)


def _quiet_case(seed=72):
    """Normal scores with QUIET_SHARE of each row's groups scaled by TINY, and NaN / -inf
    scores in a few of the quiet groups (their keys must be counted, never selected)."""
    s, n, bt = _case("normal", seed)
    rng = np.random.default_rng(seed)
    groups = s.reshape(BASE.rows, -1, GROUP_KEYS)
    quiet = rng.random(groups.shape[:2]) < QUIET_SHARE
    groups[quiet] *= TINY
    for r in range(BASE.rows):
        q = np.flatnonzero(quiet[r, :POS // GROUP_KEYS])
        for i, g in enumerate(rng.choice(q, SPECIALS_A_ROW, replace=False)):
            groups[r, g, i % GROUP_KEYS] = np.nan if i % 2 else -np.inf
    return s, n, bt


def _run(cfg, s, n, bt, edit=None, tunes=(), waves=3):
    L = apply_tunes(select_launch(cfg, grid=3, waves=waves, hist="buffer"), tunes)
    inp = make_inputs(cfg, s, n, bt, hist="buffer")
    if edit is not None:
        edit(inp)
    r = L.run_interp(inp, step=0, mode="relaxed", seed=9)
    return r, check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"], cfg.topk)


def _same(a, b):
    for name in ("topk", "topk_diag"):
        assert np.array_equal(a.outputs[name], b.outputs[name]), name


@pytest.mark.parametrize("dist", ["normal", "few", "nan", "neginf", "above2048"])
def test_given_maxima_select_what_scanning_every_group_selects(dist):
    s, n, bt = _case(dist)
    (skip, bad), (full, _) = _run(SKIP, s, n, bt), _run(BASE, s, n, bt)
    assert not bad, bad
    _same(skip, full)


def test_quiet_groups_are_skipped_and_their_nans_and_infs_still_counted():
    """Most groups below every row's threshold: the skip lists, selects and counts as the
    full scan; the same maxima without the +inf marks (a NaN passed over, a -inf kept) leave
    the marked groups unscanned and their keys uncounted: the diagnostics show it."""
    s, n, bt = _quiet_case()
    for skip_cfg, full_cfg in ((LISTING_SKIP, LISTING), (SKIP, BASE)):
        (skip, bad), (full, _) = _run(skip_cfg, s, n, bt), _run(full_cfg, s, n, bt)
        assert not bad, bad
        _same(skip, full)
    marked = make_inputs(SKIP, s, n, bt, hist="buffer")[GROUP_MAX_REGION]
    assert (marked == np.inf).sum() >= SPECIALS_A_ROW * BASE.rows

    def unmarked(inp):
        g = s[:, :inp[GROUP_MAX_REGION].shape[1] * GROUP_KEYS].reshape(BASE.rows, -1,
                                                                       GROUP_KEYS)
        with np.errstate(invalid="ignore"):
            m = np.fmax.reduce(g, axis=2)
        inp[GROUP_MAX_REGION] = np.where(marked == np.inf, m, marked).astype(np.float32)

    _, bad = _run(LISTING_SKIP, s, n, bt, edit=unmarked)
    assert any("diagnostic" in p for p in bad), bad


@pytest.mark.parametrize("slices,waves,its,tunes", [
    (2, 1, 2, ()), (2, 3, 1, ()), (1, 1, 4, ()), (2, 1, 2, LOOP)],
    ids=["early-2", "early-1", "past-the-cap", "loop"])
def test_early_maxima_list_what_scanning_every_group_lists(slices, waves, its, tunes):
    """group_maxima_early (the default): every group iteration's maxima of a wave's span
    loaded before the fold, all flagged groups listed in one run of rounds: the same slots
    and words as the full scan on the quiet case (NaN / -inf groups among the few listed)
    and on normal scores, with a wave's span taking two iterations of maxima and one; past
    EARLY_MAXIMA_ITERATIONS (four) the loop of maxima then keys lists them, as it does with
    the option off."""
    cfgs = [dataclasses.replace(c, max_slices=slices)
            for c in (LISTING_SKIP, LISTING, SKIP, BASE)]
    lean_its = -(-cfgs[0].max_slice_keys() // (GROUP_KEYS * waves * LANES))
    assert -(-lean_its // GROUPS_A_LANE) == its
    for s, n, bt in (_quiet_case(), _case("normal")):
        for skip_cfg, full_cfg in (cfgs[:2], cfgs[2:]):
            skip, bad = _run(skip_cfg, s, n, bt, tunes=tunes, waves=waves)
            full, _ = _run(full_cfg, s, n, bt, waves=waves)
            assert not bad, bad
            _same(skip, full)


@pytest.mark.parametrize("tunes", [(), LOOP], ids=["checks_late", "checks_first"])
def test_a_bad_page_is_rejected_by_sel_h1_with_the_checks_late_or_first(tunes):
    """sel_h1 (no sel_h0 with folded first digits) checks its slice's block-table pages,
    with late_input_checks (the default) after the fold's loads: a -1 entry fails the
    launch, the row unwritten."""
    s, n, bt = _case("normal")
    bt = bt.copy()
    bt[1, 150] = -1  # keys 9600..9663 of row 1, in its last slice (6 segments a slice)
    L = apply_tunes(select_launch(SKIP, grid=3, waves=3, hist="buffer", poll_bound=64), tunes)
    inp = make_inputs(SKIP, s, n, bt, hist="buffer")
    with pytest.raises(LaunchFailed, match=r"stage 'sel_h1' job 7 .*a block-table entry < 0"):
        L.run_interp(inp, step=0, on_stall="timeout")
    assert (inp["topk"][1] == -2).all(), "the bad row is not written"


def test_maxima_below_selected_keys_lose_them():
    """The kernel reads the maxima: every group's maximum set to -inf lists nothing and
    selects wrongly (what the exact check exists to catch)."""
    s, n, bt = _case("normal")

    def hide(inp):
        inp[GROUP_MAX_REGION][:] = -np.inf

    _, bad = _run(SKIP, s, n, bt, edit=hide)
    assert bad


def test_the_select_hist_kind_takes_the_maxima_on_request():
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    hist = kinds.kind("select_hist")
    assert not hist.launch(spec).select_cfg.group_skip
    L = hist.launch(spec, group_max=1)
    assert L.select_cfg.group_skip and L.select_cfg.lean_spans
    assert GROUP_MAX_REGION in L.buffer_specs()
    with pytest.raises(ValueError, match="group_max: the select kind"):
        kinds.kind("select").launch(spec, group_max=1)
    with pytest.raises(ValueError, match="group_max=1 .* --first-digits buffer"):
        check_topk.build("tiny", 2, "interp", tunes=[("launch", "group_max", "1")])
    with pytest.raises(ValueError, match="group_skip: .* lean_spans"):
        hist.launch(spec, group_max=1, lean_spans=0)


SHARE = (("sel_h1", "group_skip_share", "8"),)  # groups only where a row lists <= 1/8 of it


def _skips_in_row(s, n, bt, tunes, skipping):
    """Under `tunes` the selection is the full scan's; with every maximum hidden (-inf) row
    `skipping` loses its keys (it read them) and the other row, which never reads the
    maxima, does not."""
    (got, bad), (full, _) = _run(LISTING_SKIP, s, n, bt, tunes=tunes), _run(LISTING, s, n, bt)
    assert not bad, bad
    _same(got, full)

    def hide(inp):
        inp[GROUP_MAX_REGION][:] = -np.inf

    hidden, _ = _run(LISTING_SKIP, s, n, bt, edit=hide, tunes=tunes)
    top = hidden.outputs["topk"]
    other = 1 - skipping
    assert not np.array_equal(top[skipping], full.outputs["topk"][skipping]), \
        f"row {skipping} skipped no group"
    assert np.array_equal(top[other], full.outputs["topk"][other]), \
        f"row {other} read the maxima"


def test_the_groups_are_skipped_only_where_the_row_lists_few_of_its_keys():
    """sel_h1.group_skip_share: row 0 (normal scores: ~2% of the row at or above the first
    threshold digit) skips groups, row 1 (scaled by 0.3: its threshold bin holds most of the
    row) takes the plain loop (`_skips_in_row`)."""
    s, n, bt = _case("normal")
    s[1] *= np.float32(0.3)
    _skips_in_row(s, n, bt, SHARE, skipping=0)


@pytest.mark.parametrize("early", ["1", "0"])
def test_the_groups_are_skipped_only_in_rows_of_at_least_the_bound(early):
    """sel_h1.group_skip_min_keys = n_keys of row 1 (one more than row 0's): row 1 skips
    groups, row 0 loads no maxima and takes the plain loop (early loads or the loop of
    maxima then keys; `_skips_in_row`)."""
    s, n, bt = _case("normal")
    assert n[1] == n[0] + 1
    _skips_in_row(s, n, bt, (("sel_h1", "group_skip_min_keys", str(int(n[1]))),
                             ("sel_h1", "group_maxima_early", early)), skipping=1)


def test_group_skip_share_is_refused_with_refined_first_digits():
    cfg = dataclasses.replace(LISTING_SKIP, fine_digits=True, fine_parts=3,
                              digits=(6, 8, 7, 7), count_from_list=True)
    with pytest.raises(ValueError, match="group_skip_share weighs the first digit"):
        L = apply_tunes(select_launch(cfg, grid=3, waves=1, hist="buffer"), SHARE)
        L.kernel("interp", 32)
