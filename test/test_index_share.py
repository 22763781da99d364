"""Shared pages scored once (IndexScore.share_pages, stages/index_share.py; on by default on
sm_90a since bench/NOTES.md v33, off on AMD).

  * interpreter, the W2 layout (requests of 2 rows whose tables map the same pages below
    their own): within test_index's float64 checks on the wgmma tiling (warp32) and the
    gfx950 / gfx942 MFMA tilings, and on sm_90a the shared pages in ONE chain of all the
    rows (the wgmmas of N = 2 x pairs x HP), the narrow chains only for each request's own
    segment;
  * requests whose tables diverge at a page below their own segment: the jobs holding it
    score each request alone (narrow chains), the others one chain; still exact to the
    checks; unrelated requests of one length (no common page 0) are not grouped at all
    (the same wgmmas as without sharing);
  * the host model of the plan (score_runs(share=True)): every (row, segment) once, within
    the LDS histogram slots, the cost split even;
  * the fused index selects exactly through it (check_topk --through index);
  * default builds do not change (the artifacts of sharing off are those of HEAD: checked
    by hand, bench/NOTES.md v29), and sm_90a builds with it compile without spills.
"""
import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from monokernel import interp
from stages.index import groups_of, score_runs
from stages.index_plan import score_entries
from stages.index_share import STEP_FIXED, STEP_PAIR, tail_cost
from stages.index_ref import make_inputs, request_layout
from stages.index_score import IndexScore

from conftest import ptxas_report
from stages.index_plan import HD, PAGE
from test_index import PAGES, _launch, _run, check_launch

KEY_CHUNK = 32  # K of a wgmma e4m3
WARPS_A_WARPGROUP = 4
ISSUES_A_STEP = (HD // KEY_CHUNK) * WARPS_A_WARPGROUP  # a page: 4 chained wgmmas, 4 warps each
POS = 1500  # the first rows' position: 5 whole shared segments of tiny's 256 keys below it


def _scoring(rows, chip, share, tail_rows=False, **kw):
    L = _launch(rows, chip, **kw)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.share_pages = share
    st.tail_rows = tail_rows
    return L, st


def _w2(p, rng, rows, pos=POS):
    req = [(2, pos)] * (rows // 2)
    return req, request_layout(replace(p, cache_pages=PAGES), rng, req, shared=True)


def _run_counting(L, inp, mode, by_cta=False):
    """The run and its e4m3 wgmmas by N (a warp's issue each); `by_cta`: by (CTA, N)."""
    seen = Counter()
    orig = interp.Wave.op_wgmma

    def counting(self, op):
        at = op.attrs["atom"]
        if "e4m3" in at.name:
            seen[(self.cta, at.n) if by_cta else at.n] += 1
        return orig(self, op)
    interp.Wave.op_wgmma = counting
    try:
        res = _run(L, inp, mode=mode, seed=5)
    finally:
        interp.Wave.op_wgmma = orig
    return res, seen


def _bits(res):
    """A scoring run's scores (their bits) and first-digit histograms, copied."""
    return res.regions["scores"].view(np.uint32).copy(), res.regions["score_hist"].copy()


def expected_issues(p, pos, bt, share, tail_rows=False, tails_last=False):
    """The e4m3 wgmma issues (warp issues by N) the plan implies, from the host model
    (score_runs): a step is a 64-key page; a group of all the plan's pairs runs one chain
    of N = 2 x pairs x HP, a smaller one a chain a pair; a super entry whose pages diverge
    within a job's range is scored a run at a time there."""
    pos = np.asarray(pos)
    supers = {(f, n) for f, n, s0, s1 in score_entries(p, pos, bt, share)
              if (f, n) not in set(groups_of(pos, bt))}
    run_rows = {f: n for f, n in groups_of(pos, bt)}
    out = Counter()

    def chains(n, steps):
        pairs = (n + 1) // 2
        if pairs == p.pairs:
            out[2 * pairs * p.heads_pad] += steps * ISSUES_A_STEP
        else:
            out[2 * p.heads_pad] += pairs * steps * ISSUES_A_STEP
    for mine in score_runs(p, pos, bt, share, tail_rows, tails_last):
        for f, n, lo, hi in mine:
            key_hi = min(hi * p.segment, int(pos[f]) + n)  # a super entry: below its rows
            steps = -(-(key_hi - lo * p.segment) // PAGE)
            if (f, n) not in supers:
                chains(n, steps)
                continue
            n0 = run_rows[f]
            pages = range(lo * p.segment // PAGE, hi * p.segment // PAGE)
            tables = bt[f + n0 - 1:f + n:n0][:, pages]
            if (tables == tables[0]).all():
                chains(n, steps)
            else:
                for _ in range(n // n0):
                    chains(n0, steps)
    return out


@pytest.mark.parametrize("rows,mode", [(8, "relaxed"), (4, "random")])
def test_shared_pages_score_in_one_chain_on_sm90a(rows, mode):
    out = {}
    for share in (True, False):
        L, st = _scoring(rows, "sm_90a", share)
        p = L.plan
        rng = np.random.default_rng(rows)
        req, lay = _w2(p, rng, rows)
        inp = make_inputs(p, rng, req, cache_pages=PAGES, layout=lay)
        res, seen = _run_counting(L, inp, mode)
        check_launch(L, inp, res)
        out[share] = seen
    p = L.plan
    wide, narrow = 2 * p.pairs * p.heads_pad, 2 * p.heads_pad  # N of the chains
    issues_a_page = ISSUES_A_STEP
    requests, pages = rows // 2, -(-(POS + 2) // PAGE)
    shared = POS // p.segment * p.segment // PAGE  # whole segments below the first row
    assert out[False] == {narrow: requests * pages * issues_a_page}, out
    assert out[True] == {wide: shared * issues_a_page,
                         narrow: requests * (pages - shared) * issues_a_page}, out


def _diverged(p, rng, rows):
    """W2's layout with request 1's table mapping one of its shared pages elsewhere (a page
    no table maps: its keys are filled as any read page's)."""
    req, (pos, bt) = _w2(p, rng, rows)
    free = sorted(set(range(PAGES)) - set(bt[bt >= 0].tolist()))
    bt = bt.copy()
    bt[2:4, 3] = free[0]
    return req, (pos, bt)


def _unrelated(p, rng, rows):
    req = [(2, POS * 3 // 5)] * (rows // 2)  # pages of their own: 4 x 15 of the cache's 80
    return req, request_layout(replace(p, cache_pages=PAGES), rng, req)


@pytest.mark.parametrize("rows,layout,mode", [(8, "w2", "inorder"), (8, "diverged", "relaxed"),
                                              (8, "unrelated", "inorder"),
                                              (4, "diverged", "random")])
def test_the_wgmmas_are_those_the_host_plan_implies(rows, layout, mode):
    """Exact wgmma counts by N against the host model, sharing on and off (and with the
    tails costed by their rows, or split after the super entries): the kernel's plan, its
    page comparison and its fallback are the host's; every run within the checks."""
    make = {"w2": _w2, "diverged": _diverged, "unrelated": _unrelated}[layout]
    for share, tail_rows, last in ((True, False, False), (True, True, False),
                                   (True, False, True), (False, False, False)):
        L, st = _scoring(rows, "sm_90a", share, tail_rows)
        st.tails_last = last
        p = L.plan
        rng = np.random.default_rng([rows, len(layout)])
        req, lay = make(p, rng, rows)
        inp = make_inputs(p, rng, req, cache_pages=PAGES, layout=lay)
        res, seen = _run_counting(L, inp, mode)
        check_launch(L, inp, res)
        assert seen == expected_issues(p, *lay, share, tail_rows, last), \
            (share, tail_rows, last, seen)


@pytest.mark.parametrize("rows,layout,mode", [(8, "w2", "relaxed"), (8, "diverged", "inorder"),
                                              (8, "unrelated", "random"),
                                              (4, "diverged", "relaxed")])
def test_the_lean_plan_scores_as_the_plan_does(rows, layout, mode):
    """IndexScore.lean_plan (each row's page 0 loaded beside its position, the comparison
    skipped without a super entry): the same plan, so each CTA's wgmmas by N as without it
    (a super group formed where page 0 differs would be found diverged and scored right,
    but split otherwise), the totals the host model's, and the same scores and histograms,
    bit for bit; W2 (super entries that agree), a diverged table (they disagree) and
    unrelated requests (none) among the cases."""
    make = {"w2": _w2, "diverged": _diverged, "unrelated": _unrelated}[layout]
    out = {}
    for lean in (False, True):
        L, st = _scoring(rows, "sm_90a", True)
        st.lean_plan = lean
        rng = np.random.default_rng([rows, len(layout), 3])
        req, lay = make(L.plan, rng, rows)
        inp = make_inputs(L.plan, rng, req, cache_pages=PAGES, layout=lay)
        res, seen = _run_counting(L, inp, mode, by_cta=True)
        check_launch(L, inp, res)
        by_n = Counter()
        for (_, n), c in seen.items():
            by_n[n] += c
        assert by_n == expected_issues(L.plan, *lay, True, False, st.tails_last), (lean, by_n)
        out[lean] = (*_bits(res), seen)
    assert np.array_equal(out[True][0], out[False][0])
    assert np.array_equal(out[True][1], out[False][1])
    assert out[True][2] == out[False][2], "lean_plan: another split"


@pytest.mark.parametrize("chip,rows,layout,mode", [("gfx950", 8, "w2", "relaxed"),
                                                   ("gfx950", 4, "diverged", "random"),
                                                   ("gfx942", 8, "diverged", "inorder")])
def test_the_mfma_tilings_score_shared_pages_within_the_checks(chip, rows, layout, mode):
    """AMD's wave-a-pair tilings under sharing (no fewer key loads there: the module doc),
    and the scores equal without it bit for bit (the same MFMAs on the same keys)."""
    make = {"w2": _w2, "diverged": _diverged}[layout]
    out = {}
    for share in (True, False):
        L, st = _scoring(rows, chip, share)
        p = L.plan
        rng = np.random.default_rng([rows, 7])
        req, lay = make(p, rng, rows)
        inp = make_inputs(p, rng, req, cache_pages=PAGES, layout=lay)
        res = _run(L, inp, mode=mode, seed=3)
        check_launch(L, inp, res)
        out[share] = _bits(res)
    assert np.array_equal(out[True][0], out[False][0])
    assert np.array_equal(out[True][1], out[False][1])


@pytest.mark.parametrize("tail_rows", [False, True])
@pytest.mark.parametrize("requests", [[(2, 4000)] * 4, [(2, 700)] * 2 + [(4, 3000)],
                                      [(1, 900)] * 4 + [(4, 2000)]])
def test_the_host_plan_covers_every_unit_once_within_the_slots(requests, tail_rows):
    """score_runs(share=True) on W2-like layouts: every (row, segment) a row sees scored by
    exactly one entry of one job, each job within IndexScore.hist_slots' LDS histograms
    and its cost within the split's rounding."""
    L, st = _scoring(8, "sm_90a", True, tail_rows)
    p = replace(L.plan, cache_pages=400)
    pos, bt = request_layout(p, np.random.default_rng(5), requests, shared=True)
    assert len(score_entries(p, pos, bt, True)) > len(groups_of(pos, bt))  # a super group
    runs = score_runs(p, pos, bt, share=True, tail_rows=tail_rows)
    seen = Counter()
    for mine in runs:
        slots = 0
        for f, n, lo, hi in mine:
            seen.update((r, s) for r in range(f, f + n) for s in range(lo, hi)
                        if s * p.segment <= pos[r])
            slots += (hi - lo) * n
        assert slots <= st.hist_slots, (slots, st.hist_slots)
    assert seen == Counter((r, s) for r in range(p.rows) for s in range(pos[r] // p.segment + 1))
    _check_balanced(p, pos, bt, runs, tail_rows)


def _modelled_segment(p, pairs):
    """sm_90a's measured cost model (index_share's constants), whatever the split uses."""
    pages = p.segment // PAGE
    if pairs == p.pairs:
        return pages * (STEP_FIXED + pairs * STEP_PAIR)
    return pages * pairs * (STEP_FIXED + STEP_PAIR)


def _check_balanced(p, pos, bt, runs, tail_rows=False):
    """Every job's modelled cost (a segment of a chain of all pairs or of one-pair chains,
    a run's tail where it holds the run's last segment) within the split's rounding of
    C / J."""
    own_ends = {(f, n, s1) for f, n, s0, s1 in score_entries(p, pos, bt, False)}
    costs = []
    for mine in runs:
        c = 0
        for f, n, lo, hi in mine:
            c += (hi - lo) * _modelled_segment(p, (n + 1) // 2)
            c += tail_cost(p, True, n, tail_rows) if (f, n, hi) in own_ends else 0
        costs.append(c)
    rounding = max(_modelled_segment(p, q) for q in range(1, p.pairs + 1)) + \
        tail_cost(p, True, p.rows, tail_rows)
    assert max(costs) <= sum(costs) / p.score_jobs + rounding, (costs[:4], sum(costs))
    assert min(costs) >= sum(costs) / p.score_jobs - rounding, (costs[:4], sum(costs))


def test_the_runs_own_entries_do_not_make_a_straggler_at_glm5_scale():
    """W2 at 512K keys, rows 8, sm_90a (bench/NOTES.md v32): with every (segment, pair) costed
    alike, job 0 took the 4 runs' own one-pair segments and fix-ups on top of a full share of
    the super chain (82 us against 57). Under the cost model no job's modelled cost exceeds
    C / J by more than the split's rounding (a uniform split fails this)."""
    from spec import BuildSpec
    from stages.index import index_scoring_launch
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
    p = L.plan
    pos = p.capacity - 1
    requests = [(2, pos - 1)] * 4
    pos, bt = request_layout(replace(p, cache_pages=p.max_pages + 4), np.random.default_rng(2),
                             requests, shared=True)
    runs = score_runs(p, pos, bt, share=True)
    assert [n for f, n, lo, hi in runs[0]] == [2, 2, 2, 2, 8]  # the own entries lead the lanes
    _check_balanced(p, pos, bt, runs)


def test_the_tails_by_rows_leave_the_tail_jobs_the_work_v33_measured_they_need():
    """IndexScore.tail_rows at 512K keys, rows 8, sm_90a (bench/NOTES.md v34): W2's job 0
    takes the 4 runs' own entries and no segment of the super chain (v33: one, and it ended
    12.7 us after the others); W1's job holding the run's last segment takes 2 segments,
    not 3 (it ended 5.6 us late), while no job takes more than the 4 most take; both within
    the model's balance."""
    from spec import BuildSpec
    from stages.index import index_scoring_launch
    p = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a")).plan
    cap = replace(p, cache_pages=p.max_pages + 4)
    last = p.capacity - 1
    w2 = request_layout(cap, np.random.default_rng(2), [(2, last - 1)] * 4, shared=True)
    w1 = request_layout(cap, np.random.default_rng(2), [(8, last - 7)], shared=True)
    for by_rows, w2_job0, w1_tail in ((False, [2, 2, 2, 2, 8], 3), (True, [2, 2, 2, 2], 2)):
        runs = score_runs(p, *w2, share=True, tail_rows=by_rows)
        assert [n for f, n, lo, hi in runs[0]] == w2_job0, by_rows
        _check_balanced(p, *w2, runs, by_rows)
        runs = score_runs(p, *w1, share=True, tail_rows=by_rows)
        segs = [sum(hi - lo for f, n, lo, hi in mine) for mine in runs]
        assert segs[-1] == w1_tail and max(segs) == 4, (by_rows, segs[-4:])
        _check_balanced(p, *w1, runs, by_rows)


def test_tails_last_gives_the_runs_tails_to_the_last_jobs():
    """IndexScore.tails_last at 512K keys, rows 8, sm_90a: W2's 4 runs' own entries (their
    tails) go to the split's last jobs, none to the first 48 (the schedule's late starters
    are among them, bench/NOTES.md v56), within the model's balance; W1 (no super entry)
    splits as without it."""
    from spec import BuildSpec
    from stages.index import index_scoring_launch
    p = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a")).plan
    cap = replace(p, cache_pages=p.max_pages + 4)
    last = p.capacity - 1
    w2 = request_layout(cap, np.random.default_rng(2), [(2, last - 1)] * 4, shared=True)
    w1 = request_layout(cap, np.random.default_rng(2), [(8, last - 7)], shared=True)
    runs = score_runs(p, *w2, share=True, tails_last=True)
    holders = [j for j, mine in enumerate(runs) for f, n, lo, hi in mine if n == 2]
    assert holders and min(holders) >= p.score_jobs - 4, holders
    assert all(n == 8 for mine in runs[:48] for f, n, lo, hi in mine)
    _check_balanced(p, *w2, runs)
    assert score_runs(p, *w1, share=True, tails_last=True) == score_runs(p, *w1, share=True)


@pytest.mark.parametrize("chip,last", [("sm_90a", True), ("gfx950", False), ("gfx942", False)])
def test_tails_last_is_on_where_it_was_measured(chip, last):
    """tails_last's per-chip default (TAILS_LAST_ON_NVIDIA, timed on an H100 in v57: r8 128K
    W2 0.883-0.899, the fused index 0.922; AMD keeps the cost order, unmeasured there)."""
    L = _launch(4, chip)
    assert next(s for s in L.stages if isinstance(s, IndexScore)).tails_last is last


@pytest.mark.parametrize("rows,layout,mode", [(8, "w2", "relaxed"), (4, "diverged", "random")])
def test_tails_last_gives_the_same_bits(rows, layout, mode):
    """The split's order changes which job scores what, never a score: scores and
    first-digit histograms bit-identical with tails_last on and off."""
    make = {"w2": _w2, "diverged": _diverged}[layout]
    out = {}
    for last in (True, False):
        L, st = _scoring(rows, "sm_90a", True)
        st.tails_last = last
        rng = np.random.default_rng([rows, 11])
        req, lay = make(L.plan, rng, rows)
        inp = make_inputs(L.plan, rng, req, cache_pages=PAGES, layout=lay)
        res = _run(L, inp, mode=mode, seed=4)
        check_launch(L, inp, res)
        out[last] = _bits(res)
    assert np.array_equal(out[True][0], out[False][0])
    assert np.array_equal(out[True][1], out[False][1])


def test_the_fused_index_selects_exactly_through_shared_pages():
    from tools import check_topk
    assert check_topk.main(["--through", "index", "--rows", "8", "--pos", "2049",
                            "--workload", "W2", "--tune", "ix_score.share_pages=1"]) == 0


@pytest.mark.parametrize("kind,rows", [("index_scoring", 8), ("index", 8), ("index", 2)])
def test_sm90a_builds_with_shared_pages(kind, rows):
    """glm5 builds with share_pages: the PTX has both chains (the wide N = 2 x pairs x HP one
    where the plan has several pairs), more LDS atomic adds than without (the divergence
    counters), and ptxas (where installed) takes it within the job loop's spill allowance."""
    from monokernel.build import build_many
    from spec import BuildSpec
    from stages.index import index_launch, index_scoring_launch
    from conftest import INDEX_JOB_LOOP_SPILL_BYTES, JOB_LOOP_SPILL_BYTES, check_job_loop_spills
    mk = index_scoring_launch if kind == "index_scoring" else index_launch
    ptx = {}
    for share in (True, False):
        L = mk(BuildSpec.make("glm5", rows=rows, target="sm_90a"))
        next(s for s in L.stages if isinstance(s, IndexScore)).share_pages = share
        (art,) = build_many([L.kernel("sm_90a")])
        ptx[share] = art.data.decode()
    p = L.plan
    for n in {2 * p.heads_pad, 2 * p.pairs * p.heads_pad}:
        assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3" in ptx[True], n
    lds_adds = {s: len(re.findall(r"atom\.relaxed\.cta\.shared\.add\.u32", x)) for s, x in ptx.items()}
    assert lds_adds[True] > lds_adds[False], lds_adds  # (LLVM may unroll the rows-2 loop)
    report = ptxas_report(ptx[True])
    if report is not None:
        check_job_loop_spills(report, ptx[True], INDEX_JOB_LOOP_SPILL_BYTES if kind == "index"
                              else JOB_LOOP_SPILL_BYTES)
