"""The scoring's fix-up of the launch's own new keys with its row search by one ballot
(IndexScore.fixup_ballot, on by default on sm_90a since bench/NOTES.md v33): lane u tests row
u's new key against an entry's range in one round trip instead of R dependent ones; and
without it (IndexScore.cached_new_keys, the sm_90a default since v35: the key loop's reads
of the new keys follow the key job's release, which the relaxed interpreter checks with a
negative control).

  * every chip's tiling, interpreter modes that reorder the key job against the scoring:
    the float64 checks of test_index.check_launch, and scores and first-digit histograms bit
    for bit equal to the row loop's, with the ballot;
  * with shared pages on sm_90a (a job holding the runs' own entries and a super entry);
  * the fix-up's moves (its digit decrements) counted: one a (row, new key it sees) with
    either search, none with the ballot forced empty (the interpreter's key loop already
    reads the new keys: a search that finds nothing does not show in the scores here).
"""
from dataclasses import replace

import numpy as np
import pytest

from layouts.decode import decode
from monokernel import interp
from monokernel.link import LaunchFailed
from monokernel.types import i32
from stages.index_ref import make_inputs, request_layout
from stages.index_score import IndexScore

from test_index import PAGES, SENTINEL, _launch, _run, check_launch

# (rows, chip, requests [(rows, first position)], mode): new keys at page and segment edges,
# several requests (rows whose new keys lie in other rows' ranges, other tables)
CASES = [
    (4, "gfx950", [(1, 64), (3, 2044)], "random"),
    (4, "gfx942", [(2, 2046), (2, 2047)], "relaxed"),
    (8, "sm_90a", [(1, 0), (2, 63), (4, 2045), (1, 100)], "random"),
    (8, "sm_90a", [(8, 2043)], "relaxed"),
]


# the fix-up's searches: the row loop, the ballot
SEARCHES = ("loop", "ballot")


def _scoring(rows, chip, search, share=False):
    L = _launch(rows, chip)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.cached_new_keys = False  # (the sm_90a default since v35: no fix-up)
    st.fixup_ballot = search != "loop"
    st.share_pages = share
    return L


def _outputs(res):
    return res.regions["scores"].view(np.uint32).copy(), res.regions["score_hist"].copy()


@pytest.mark.parametrize("rows,chip,requests,mode", CASES,
                         ids=[f"r{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_the_ballot_search_rescores_the_new_keys_as_the_row_loop_does(rows, chip, requests,
                                                                       mode):
    out = {}
    for search in SEARCHES:
        L = _scoring(rows, chip, search)
        inp = make_inputs(L.plan, np.random.default_rng(rows + len(requests)), requests,
                          cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=9)
        check_launch(L, inp, res)
        out[search] = _outputs(res)
    for search in SEARCHES[1:]:
        assert np.array_equal(out[search][0], out["loop"][0]), search
        assert np.array_equal(out[search][1], out["loop"][1]), search


def test_the_ballot_search_with_shared_pages():
    """W2-like requests on sm_90a with share_pages: the own entries and the super entry."""
    rows, pos = 8, 1500
    out = {}
    for search in SEARCHES:
        L = _scoring(rows, "sm_90a", search, share=True)
        rng = np.random.default_rng(3)
        req = [(2, pos)] * (rows // 2)
        lay = request_layout(replace(L.plan, cache_pages=PAGES), rng, req, shared=True)
        inp = make_inputs(L.plan, rng, req, cache_pages=PAGES, layout=lay)
        res = _run(L, inp, mode="relaxed", seed=4)
        check_launch(L, inp, res)
        out[search] = _outputs(res)
    for search in SEARCHES[1:]:
        assert np.array_equal(out[search][0], out["loop"][0]), search
        assert np.array_equal(out[search][1], out["loop"][1]), search


def _moves(L, inp, mode, seed):
    """The run and the fix-up's moves: its LDS atomic adds of -1 (a stale count taken off its
    digit: nothing else in the scoring subtracts), a lane each."""
    seen = [0]
    orig = interp.Wave.op_atomic

    def counting(self, op):
        val = np.asarray(self.get(op.args[2])).reshape(-1)
        if op.attrs["op"] == "add" and self._is_lds(op) and val.dtype == np.uint32 \
                and (val == np.uint32(0xFFFFFFFF)).any():
            mask = self._mask_of(op, self.L, 3)
            seen[0] += self.L if mask is None else int(np.count_nonzero(mask))
        return orig(self, op)
    interp.Wave.op_atomic = counting
    try:
        res = _run(L, inp, mode=mode, seed=seed)
    finally:
        interp.Wave.op_atomic = orig
    return res, seen[0]


@pytest.mark.parametrize("chip", ["sm_90a", "gfx950"])
def test_the_ballot_finds_every_new_key_the_row_loop_finds(chip, monkeypatch):
    """The fix-up's moves counted: one per (row, new key it sees) with either search, none
    with the ballot forced empty (the interpreter's key loop already reads the new keys, so
    the scores alone cannot show a search that finds nothing: the module doc)."""
    rows, requests = 8, [(8, 2043)]
    want = sum(r + 1 for r in range(rows))  # row r sees the new keys of rows 0 .. r
    counts = {}
    for search in SEARCHES:
        L = _scoring(rows, chip, search)
        inp = make_inputs(L.plan, np.random.default_rng(12), requests, cache_pages=PAGES)
        res, counts[search] = _moves(L, inp, "relaxed", 1)
        check_launch(L, inp, res)
    assert counts == {s: want for s in SEARCHES}, counts

    real_fixup = IndexScore._fixup

    def blind_fixup(self, k, *args, **kw):
        real_ballot = k.ballot
        never = k.const(0, i32).eq(k.const(1, i32))
        k.ballot = lambda pred: real_ballot(pred & never)
        try:
            return real_fixup(self, k, *args, **kw)
        finally:
            del k.ballot
    monkeypatch.setattr(IndexScore, "_fixup", blind_fixup)
    for search in SEARCHES[1:]:
        L = _scoring(rows, chip, search)
        _, blind = _moves(L, inp, "relaxed", 1)
        assert blind == 0, search


# ------------------------------------------------ the new keys read from the cache, no fix-up

def _cached(rows, chip):
    L = _scoring(rows, chip, "loop")
    next(s for s in L.stages if isinstance(s, IndexScore)).cached_new_keys = True
    return L


@pytest.mark.parametrize("rows,chip,requests,mode", CASES,
                         ids=[f"r{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_the_new_keys_read_from_the_cache_score_within_the_checks(rows, chip, requests, mode):
    """IndexScore.cached_new_keys: no fix-up (no move counted), and every score, the new
    keys' too, within test_index.check_launch's float64 checks, the histograms those of the
    stored scores; in the relaxed memory a slot read before the key job's release would
    show its stale key."""
    L = _cached(rows, chip)
    inp = make_inputs(L.plan, np.random.default_rng(rows + len(requests)), requests,
                      cache_pages=PAGES)
    res, moves = _moves(L, inp, mode, 9)
    check_launch(L, inp, res)
    assert moves == 0


def test_a_key_job_releasing_before_its_cache_stores_is_caught(monkeypatch):
    """The negative control: ix_key releasing ix_nb BEFORE it stores the new keys to the cache
    (and ix_nb) leaves the scoring reading stale (poisoned) slots: the checks fail in every
    seed. With the release last (the stage as it is) the same runs pass (above)."""
    from stages.index_proj import IndexKey
    from stages.index_dsl import stage_body, wait_flags

    @stage_body
    def early_release(self, k, job, io):
        p = self.p
        norm, mine, rs_of = self._before_wait(k, io)
        wait_flags(k, io, p.q_jobs, p.k_splits)
        sums = [(row, *self._row_sums(k, io, row, rs_of)) for row in mine]
        for row, heads, _ in sums:
            self._store_head_weights(k, io, row, heads)
        io.release("ix_nb")
        # the window forced open: the cache stores only once the scoring jobs of the other
        # CTAs are done (job 0 runs after this one on CTA 0, and sees its own stores). Left
        # to chance, the stage's stores follow its release within a few steps, and the
        # interpreter's scoring jobs read the slots only later (1 seed of 4 at v36)
        wait_flags(k, io, 1, p.score_jobs - 1, "score_done")
        for row, _, key in sums:
            self._new_key(k, io, row, norm, key)
    monkeypatch.setattr(IndexKey, "body", early_release)
    caught = []
    for seed in range(4):
        L = _cached(8, "sm_90a")
        # the wait above skips score_done[0] only: the scoring job behind ix_key on its CTA
        # (waiting for it there would never end)
        cta = next(c for c, jobs in enumerate(L.schedule.cta_jobs) if ("ix_key", 0) in jobs)
        assert [j for j in L.schedule.cta_jobs[cta] if j[0] == "ix_score"] == [("ix_score", 0)]
        inp = make_inputs(L.plan, np.random.default_rng(seed), [(8, 2043)], cache_pages=PAGES)
        try:
            check_launch(L, inp, _run(L, inp, mode="relaxed", seed=seed))
        except AssertionError as e:
            caught.append(str(e))
    assert len(caught) == 4, f"stale new keys in the cache seen in {len(caught)} runs of 4"


def test_the_cached_new_keys_are_not_read_through_the_async_proxy():
    L = _cached(8, "sm_90a")
    next(s for s in L.stages if isinstance(s, IndexScore)).tma_keys = True
    with pytest.raises(ValueError, match="cached_new_keys .* tma_keys .* not both"):
        L.kernel("sm_90a")


def test_the_fused_index_selects_exactly_with_the_cached_new_keys():
    """check_topk through index (the interpreter's chip, gfx950, whose default is the
    fix-up), and the sm_90a fused index with its defaults (share_pages, row_parts, and since
    v35 cached_new_keys) at W2: exact, the slots of the fix-up's run (cached_new_keys=0)."""
    from spec import BuildSpec
    from stages import kinds
    from tools import check_topk, common
    assert check_topk.main(["--through", "index", "--rows", "8", "--pos", "2049",
                            "--workload", "W1,W2", "--tune", "ix_score.cached_new_keys=1"]) == 0
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    out = []
    for tunes in ([("ix_score", "cached_new_keys", "0")], []):
        L = common.apply_tunes(kind.launch(spec, chip="sm_90a"), tunes)
        assert next(s for s in L.stages if isinstance(s, IndexScore)).reads_cached_new_keys \
            == (not tunes)
        inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(8), 2049, "W2")
        r = L.run_interp(inp, step=0, mode="relaxed", seed=3)
        assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
        out.append(r.outputs[L.select_cfg.names.out])
    assert np.array_equal(out[0], out[1])


def _same_bits_either_way(attr, rows, chip, requests, mode, rng_seed, seed, stage_kw=None,
                          **launch_kw):
    """The scoring with IndexScore's `attr` off and on (`stage_kw`: its other settings in
    both runs), on the same inputs: each within check_launch's checks, the scores and
    histograms bit-identical."""
    outs = []
    for on in (False, True):
        L = _launch(rows, chip, **launch_kw)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        for name, value in {**(stage_kw or {}), attr: on}.items():
            setattr(st, name, value)
        inp = make_inputs(L.plan, np.random.default_rng(rng_seed), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=seed)
        check_launch(L, inp, res)
        outs.append(_outputs(res))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows,chip,requests,mode", CASES,
                         ids=[f"r{c[0]}-{c[1]}-{c[3]}" for c in CASES])
def test_the_new_keys_acquired_before_the_q_heads_give_the_same_bits(rows, chip, requests,
                                                                     mode):
    """IndexScore.nb_first (ix_nb's acquire before the q heads' wait, sm_90a's default since
    v38): the same scores and histograms, bit for bit, as the other order, within
    check_launch's checks, with the fix-up (AMD's default) and without it (sm_90a's)."""
    _same_bits_either_way("nb_first", rows, chip, requests, mode, rows + 7, 5)


MIXED = [(1, 0), (2, 63), (4, 2045), (1, 100)]


@pytest.mark.parametrize("requests,mode,waves", [([(8, 2043)], "acquire_only", 8),
                                                 ([(8, 2043)], "acquire_only", 4),
                                                 (MIXED, "random", 8), (MIXED, "random", 4)],
                         ids=["w1-8", "w1-4", "mixed-8", "mixed-4"])
def test_the_waits_beside_the_plan_give_the_same_bits(requests, mode, waves):
    """IndexScore.waits_aside (sm_90a, share_pages): waves 1 .. W - 1 wait for ix_nb and the
    q heads while wave 0 plans, wave 0 reading the queries through the CTA's barrier after
    them (the acquire_only interpreter checks that order). Bit-identical to the waits after the
    plan, within check_launch's checks (8 waves, and 4: one warpgroup a chain)."""
    _same_bits_either_way("waits_aside", 8, "sm_90a", requests, mode, waves + 3, 6,
                          waves=waves)


@pytest.mark.parametrize("requests,mode,nb_first", [([(8, 2043)], "acquire_only", True),
                                                   (MIXED, "random", True),
                                                   ([(8, 2043)], "acquire_only", False)],
                         ids=["w1", "mixed", "w1-heads-first"])
def test_one_poller_a_cta_gives_the_same_bits(requests, mode, nb_first):
    """IndexScore.one_poller (wave 0 alone polls ix_nb and the q heads, then the CTA's
    agreement and every wave's acquire): the other waves read the queries and new keys
    through the barrier after wave 0's polls (the acquire_only interpreter checks that
    order; the relaxed one's random refreshes hid a mutant without the acquire).
    Bit-identical to every wave polling, within check_launch's checks, in both orders of
    the two waits."""
    _same_bits_either_way("one_poller", 8, "sm_90a", requests, mode, 11, 6,
                          stage_kw={"nb_first": nb_first})


@pytest.mark.parametrize("waits", ["each_wave", "aside", "one_poller"])
def test_a_missing_q_head_fails_the_scoring_and_writes_no_score(waits, monkeypatch):
    """No ix_q job publishes its pair: every scoring job's wait times out, the error names
    ix_score and the q heads' pairs, and no score is written, also with waits_aside, where
    wave 0 never polls them itself (the CTA's agreement after the plan masks its stores),
    and with one_poller, where only wave 0 does."""
    import stages.index_proj as index_proj
    real = index_proj.publish_done
    monkeypatch.setattr(index_proj, "publish_done", lambda k, io, name, index: None
                        if name == "ix_qdone" else real(k, io, name, index))
    L = _launch(8, "sm_90a", poll_bound=64)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.waits_aside, st.one_poller = waits == "aside", waits == "one_poller"
    inp = make_inputs(L.plan, np.random.default_rng(4), [(8, 2043)], cache_pages=PAGES)
    arena = L.new_arena()
    with pytest.raises(LaunchFailed, match=r"stage 'ix_score' job \d+ .*ix_qdone") as e:
        # (on_stall "timeout": once only pollers are left, their polls time out, as the
        # bound would make them on hardware; one_poller's other waves wait at a barrier)
        _run(L, inp, mode="random", seed=2, arena=arena, on_stall="timeout")
    assert e.value.stage == "ix_score"
    scores = np.asarray(decode(L.arena, arena, "scores"))
    assert (scores.view(np.uint32) == SENTINEL).all()


@pytest.mark.parametrize("chip,on", [("sm_90a", True), ("gfx950", False), ("gfx942", False)])
def test_one_poller_is_the_default_where_it_was_measured(chip, on):
    """one_poller's per-chip default (ONE_POLLER_ON_NVIDIA, timed on an H100 in v59; AMD
    keeps every wave polling, unmeasured there)."""
    L = _launch(4, chip)
    assert next(s for s in L.stages if isinstance(s, IndexScore)).one_poller is on


@pytest.mark.parametrize("chip,first", [("sm_90a", True), ("gfx950", False), ("gfx942", False)])
def test_the_new_keys_are_acquired_first_where_it_was_measured(chip, first):
    """nb_first's per-chip default (NB_FIRST_ON_NVIDIA, timed on an H100 in v38; AMD keeps
    the q heads' wait first, unmeasured there)."""
    L = _launch(4, chip)
    assert next(s for s in L.stages if isinstance(s, IndexScore)).nb_first is first
