"""The fold from the scoring's per-job first digits (SelectConfig.row_parts, launch tunable
row_parts; on by default on sm_90a since bench/NOTES.md v33): the fused index's scoring stores each job's
first-digit counts a row (its refined counts summed by 16, `score_rows`) and no segment
histograms (IndexScore.segment_hist), and sel_h1 sums the row's parts instead of its 512
segment histograms.

  * the region against the host: each job's row counts are its `score_fine` part summed by
    first digit (the lane sums of the flush), every row and job, W1 and W2; `score_hist`
    never written;
  * the selection through it: exact (check_topk's independent order) and the same slots and
    diagnostics as the fold over segments, bit for bit, rows 2 and 8, W1 and W2, with the
    interpreter's relaxed memory;
  * the test can fail: the parts counted twice stop sel_h1 on its refined digits' check;
  * settings that cannot work are rejected by name; the sm_90a rows-8 build within the fused
    index's spill allowance.
"""
from __future__ import annotations

import numpy as np
import pytest

from layouts.scores import FIRST_DIGIT_BINS, REFINED_BINS
from spec import BuildSpec
from stages import kinds
from stages.select.sources import FinePlain
from tools import common

from test_select_fine import _fused as fused_index

ON = (("launch", "fine_digits", "1"), ("launch", "fold_first_digits", "1"))
ROWS = (("launch", "row_parts", "1"),)


def _fused(rows, workload, tunes):
    return fused_index(rows, 2049, workload, tunes)


@pytest.mark.parametrize("rows,workload", [(2, "W1"), (8, "W2")])
def test_the_fold_over_job_parts_selects_what_the_fold_over_segments_does(rows, workload):
    L, inp, r = _fused(rows, workload, ON + ROWS)
    p = L.plan
    assert p.row_parts and L.select_cfg.row_parts
    fine = np.asarray(r.regions["score_fine"]).reshape(p.score_jobs, p.rows, REFINED_BINS)
    parts = np.asarray(r.regions["score_rows"]).reshape(p.score_jobs, p.rows, FIRST_DIGIT_BINS)
    want = fine.reshape(p.score_jobs, p.rows, FIRST_DIGIT_BINS, -1).sum(-1)
    assert np.array_equal(parts, want)
    # the scoring kept no segment histograms (IndexScore.segment_hist): the region as it began
    hist = np.asarray(r.regions["score_hist"])
    assert np.unique(hist).size == 1, "row_parts: the scoring wrote segment histograms"
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
    _, _, base = _fused(rows, workload, ON)
    for name in (L.select_cfg.names.out, L.select_cfg.names.diag):
        assert np.array_equal(r.outputs[name], base.outputs[name]), name


def test_parts_read_twice_are_caught(monkeypatch):
    """A fold that counts every part twice (a row of twice its keys) decides a first digit
    whose refined sub-bins do not add up to its count: sel_h1 stops on FINE_MISMATCH (the
    check that a wrong split cannot select wrong keys silently) or selects other keys."""
    from monokernel.link import LaunchFailed
    _, _, base = _fused(8, "W1", ON)
    real = FinePlain.read_rows4

    def twice(self, k, io, index, mask):
        v = real(self, k, io, index, mask)
        return v + v
    monkeypatch.setattr(FinePlain, "read_rows4", twice)
    try:
        L, inp, r = _fused(8, "W1", ON + ROWS)
    except LaunchFailed as e:
        assert "do not add up" in str(e)
        return
    assert not np.array_equal(r.outputs["topk"], base.outputs["topk"])


def test_row_parts_needs_the_refined_digits_and_the_fold():
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    with pytest.raises(ValueError, match="row_parts = 1 .* needs fine_digits and "
                                         "fold_first_digits \\(here 0 and 0\\)"):
        common.launch_for(kind, spec, list(ROWS))
    with pytest.raises(ValueError, match="row_parts.*needs fine_digits"):
        from dataclasses import replace
        L = common.launch_for(kind, spec, list(ON))
        replace(L.plan, fine_digits=False, row_parts=True).check()
    with pytest.raises(ValueError, match="row_parts: sel_h1's fold .* needs fine_digits and "
                                         "fold_first_digits"):
        from dataclasses import replace
        replace(L.select_cfg, row_parts=True, fold_first_digits=False)


def test_the_sm90a_build_with_row_parts():
    """No segment histograms to count, move and flush: within the fused index's spill
    allowance (ptxas 13 at rows 8: 28 bytes against the default's 36), none in a loop."""
    from conftest import INDEX_JOB_LOOP_SPILL_BYTES, check_job_loop_spills, ptxas_report
    from monokernel.build import build_many
    kind = kinds.kind("index")
    L = common.launch_for(kind, BuildSpec.make("glm5", rows=8, target="sm_90a"), list(ROWS))
    assert L.plan.row_parts and L.select_cfg.row_parts  # (sm_90a refines and folds)
    text = build_many([L.kernel("sm_90a")])[0].data.decode()
    report = ptxas_report(text)
    if report is not None:
        check_job_loop_spills(report, text, INDEX_JOB_LOOP_SPILL_BYTES)


def test_the_three_v32_candidates_together_on_sm90a():
    """share_pages (the weighted split), fixup_ballot and row_parts in one sm_90a fused
    index (W2: a super chain, the runs' own entries and their fix-ups; sm_90a's defaults
    since v33): exact, and the same slots as with all three off (v31's defaults, the rounds:
    no tail finish, sm_90a's default at rows 8 since v50)."""
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    out = []
    for kw, tunes in (({"row_parts": False, "tail_finish": False},
                       [("ix_score", "share_pages", "0"),
                                              ("ix_score", "fixup_ballot", "0")]), ({}, [])):
        L = common.apply_tunes(kind.launch(spec, chip="sm_90a", **kw), tunes)
        st = next(s for s in L.stages if s.name == "ix_score")
        assert L.plan.row_parts == st.share_pages == st.fixup_ballot == (not tunes)
        inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(8), 2049, "W2")
        r = L.run_interp(inp, step=0, mode="relaxed", seed=3)
        assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
        out.append(r.outputs[L.select_cfg.names.out])
    assert np.array_equal(out[0], out[1])
