"""Shared pages scored once (IndexScore.share_pages; on by default on sm_90a, off on AMD: on
an H100 index_scoring W2 at rows 8 99.4 -> 75.6 us, W1 +1.7 us, bench/NOTES.md v32; the
fused index r8 W2 143.3 -> 121.3 us with row_parts, v33).

Requests of one length whose block tables map the same physical pages (prefix sharing:
parallel sampling of one prompt, a common system prompt; workload W2 by construction,
DESIGN.md section 8) read those pages once per request without it: on sm_90a each request
is a group of one row pair, a narrow N = 2 x HP chain a page and a key load per request.
With it the plan (`plan_shared`) also lists *super groups*, scored as ONE group of all their
rows (at W2's rows 8: all 4 pairs in one N = 8 x HP chain, one key load for the 8 rows):

  * a super group is a maximal sequence of consecutive runs (row order) with the same row
    count n0 and first position, whose block tables agree at logical page 0 (a cheap test
    that they share at all; unrelated requests of one length differ there);
  * its entry covers segments [0, F), F the segment of the runs' first row: keys every row
    sees (each key below F x S <= the first row's position) and none this launch writes (a
    run's new keys are at or above its first row). Each run keeps its own entry for
    [F, segs), where its pages are its own;
  * the plan's 3R entries (lane order): lane r (< R) the run starting at row r; lane R + r
    the super group whose first run starts at row r; lane 2R + r the same super segments
    for the run starting at row r alone, in the super entry's histogram slots (run j of
    the group at base + j x n0 x (hi - lo)). The cost split counts the first
    2R, by the chains' modelled costs on sm_90a (segment_cost, tail_cost: a chain of all
    pairs is cheaper a pair than the runs' one-pair chains, and a run's own entry carries
    its fix-up; a uniform split left one job every run's own entry, v32), a job's slots
    bounded by hist_slots; an entry of the third kind costs nothing: it replaces its
    super entry;
  * per job, every thread compares the super entry's pages [lo, hi) x S / PAGE across its
    runs' tables before the queries' wait (`count_divergent`: one LDS counter a super
    entry). If all agree the super entry is scored (one group); otherwise (requests
    diverging before their last segment) its runs' entries of the third kind are:
    correct, and as fast as without sharing. `for_entries` picks, so the key loop, the
    fix-up and the flush read their words from LDS as without sharing (no loop nesting
    around the key loop: an sm_90a rows-8 build has no register to spare).

On AMD (a wave a row pair: each key load serves one pair whatever the group) and for super
groups of fewer than all the plan's pairs on sm_90a (their chains run a pair at a time)
sharing reads no fewer keys; it changes only the split. Host model:
stages.index_plan.score_entries / score_runs(share=True)."""
from __future__ import annotations

from monokernel.types import i32, u32

from .index_dsl import _has_bit, _lane, _scan, _tid
from .index_plan import PAGE

# plan words of an entry (IndexScore.PW = 12): the first seven are the unshared plan's; then
# the super group's run rows and runs, its entry's first row (its divergence counter) and
# the entry's first row
ACT, ROWS, LO, HI, BASE, POS, BTROW, RUN_ROWS, RUNS, HEAD, FIRST = range(11)
# the three kinds of entries, R lanes each
OWN, SUPER, ALONE = range(3)


# The split's cost model where a super group runs one chain (sm_90a): a page-step of a chain
# of P row pairs costs about STEP_FIXED + P x STEP_PAIR (the key load and the step's issue,
# then a pair's epilogue), a run's own entry RUN_TAIL_COST more (its new keys rescored and
# its own histograms flushed, both by the job holding its last segment). Measured on an H100
# (bench/NOTES.md v32, index_scoring r8 W2 at 512K, per-job clocks): a page a CTA ~0.73 us in
# W1's chain of 4 pairs, ~0.32 us in W2's one-pair chains, so STEP_FIXED : STEP_PAIR ~ 4 : 3
# (~0.046 us a unit); the job holding the 4 runs' own entries spent ~14 us more after its key
# loop than the others (~3.5 us, ~77 units, a run). With every (segment, pair) costing the
# same instead, that job took 82 us against the others' 57.
STEP_FIXED, STEP_PAIR = 4, 3
RUN_TAIL_COST = 77
# IndexScore.tail_rows (off, untimed): a run's tail by its rows, RUN_TAIL_FIXED + n x
# RUN_TAIL_ROW. Fitted to v33's defaults' clocks (H100, the fused index r8 at 512K, bench/
# NOTES.md v34; ~0.048 us a unit there): a run of 8 rows (W1) cost its job ~16.4 us after the
# key loop (36 rescores, a wave a row, the last row's wave 8 in turn: ~342 units), and each
# of W2's 4 runs of 2 rows ~4.1 us of fix-up plus ~3.1 us more for its one-pair entry's start
# than the segment's model (~146 units a run). Under RUN_TAIL_COST the W1 tail job kept 3
# segments and ended 5.6 us after the others, W2's job 0 a super segment and 12.7 us.
RUN_TAIL_FIXED, RUN_TAIL_ROW = 80, 33


def weighted_costs(p) -> bool:
    """Whether the shared plan splits by the chains' modelled costs (a super group's chain of
    all pairs is cheaper a pair than the runs' one-pair chains): on sm_90a. AMD's tilings load
    the keys once a pair whatever the group (the module doc): there a unit costs its pairs."""
    return bool(p.wgmma)


def segment_cost(p, pairs: int, full_chain: bool) -> int:
    """Host model: the split's cost of one segment of an entry of `pairs` row pairs (the
    kernel's `_segment_cost`)."""
    if not weighted_costs(p):
        return pairs
    pages = p.segment // PAGE
    if full_chain:
        return pages * (STEP_FIXED + pairs * STEP_PAIR)
    return pages * pairs * (STEP_FIXED + STEP_PAIR)


def tail_cost(p, own: bool, rows: int = 1, by_rows: bool = False) -> int:
    """Host model: the cost an entry adds after its last segment (a run's own entry of
    `rows` rows; `by_rows`: IndexScore.tail_rows)."""
    if not (own and weighted_costs(p)):
        return 0
    return RUN_TAIL_FIXED + rows * RUN_TAIL_ROW if by_rows else RUN_TAIL_COST


def max_tails(p, by_rows: bool = False) -> int:
    """The most the runs' tails add up to: R runs of one row (a run's fixed part R times)."""
    return p.rows * tail_cost(p, True, 1, by_rows)


def hist_slots(p, by_rows: bool = False) -> int:
    """(row, segment) histograms a job of the shared plan may hold. Uniform costs (AMD): a
    job's units cost at most C/J, a unit of n rows >= n/2 pairs, and its range may touch 2R
    entries (IndexPlan.hist_slots plus R). Modelled costs: a slot costs at least
    c_min = the chain of all pairs' segment over its 2P rows and at most c_max = a lone
    row's one-pair segment, so C <= R x segments x c_max + max_tails and a job
    holds at most C / J / c_min slots, plus 2R for the entries its range touches."""
    if not weighted_costs(p):
        return p.hist_slots + p.rows
    R, P = p.rows, p.pairs
    c_min = segment_cost(p, P, True) / (2 * P)
    c_max = segment_cost(p, 1, False)
    c_total = R * p.segments * c_max + max_tails(p, by_rows)
    return int(-(-c_total // (p.score_jobs * c_min))) + 2 * R


def supers_word(rows: int) -> int:
    """The word of the LDS counters (R divergence counters, then this) holding how many
    super entries the job scores: zero, and its entry loops run over the own entries alone
    (a job with no super entry has no run alone either)."""
    return rows


def counter_words(rows: int) -> int:
    return supers_word(rows) + 1


def plan_entries(rows: int, share: bool) -> int:
    return (ALONE + 1) * rows if share else rows


def plan_runs(st, k, a):
    """The rows' runs (wave 0, a row a lane): the unshared plan's first half (the same ops in
    the same order: IndexScore._plan builds its words from these)."""
    p = st.p
    R, MP = p.rows, p.max_pages
    bt = a.block_table
    lane = _lane(k)
    one, z0 = k.const(1, i32), k.const(0, i32)
    valid = lane < R
    li = k.min(lane, R - 1)
    pos = k.load(a.positions, li, i32)
    prevl = k.min(k.max(lane - 1, 0), R - 1)
    ppos = k.shuffle(pos, prevl)
    pg = k.max(ppos, 0) >> 6
    same = k.load(bt, li * MP + pg, i32).eq(k.load(bt, prevl * MP + pg, i32))
    join = (lane > 0) & valid & pos.eq(ppos + 1) & same
    nxtl = k.min(lane + 1, R - 1)
    jn = k.shuffle(k.select(join, one, z0), nxtl).eq(1) & ((lane + 1) < R)
    run = k.select(valid, one, z0)
    for _ in range(R - 1):
        run = k.select(jn, k.shuffle(run, nxtl) + 1, one)
    start = valid & ~join
    zero = k.select(valid, z0, z0)
    return lane, one, z0, valid, li, pos, run, start, zero


def plan_shared(st, k, io, job, tab, counters):
    """Wave 0: the 3R entries' words (module doc) into `tab`, the R divergence counters
    zeroed."""
    p = st.p
    a = io.args
    R, S, J, MP = p.rows, p.segment, p.score_jobs, p.max_pages
    E = plan_entries(R, True)
    if E > k.L:
        raise ValueError(f"ix_score: share_pages plans {E} entries a lane of a {k.L}-lane "
                         f"wave: {R} rows are too many")
    with k.if_(k.wave_id().eq(0)):
        if st.lean_plan:  # every row's page 0 beside its position (one round trip fewer)
            own0 = k.load(a.block_table, k.min(_lane(k), R - 1) * MP, i32)
        lane, one, z0, valid, li, pos, n, start, zero = plan_runs(st, k, a)
        last = li + n - 1
        starti = k.select(start, one, z0)
        # the previous run starts n rows before iff it is a run of n rows (adjacent, then)
        page0 = k.shuffle(own0, last) if st.lean_plan else k.load(a.block_table, last * MP, i32)
        prv = k.max(lane - n, 0)
        link = (start & (lane >= n) & k.shuffle(starti, prv).eq(1) & k.shuffle(n, prv).eq(n)
                & k.shuffle(pos, prv).eq(pos) & k.shuffle(page0, prv).eq(page0))
        linki = k.select(link, one, z0)
        nxt = k.min(lane + n, R - 1)
        has_next = (lane + n) < R
        after, head = zero, li  # linked runs after this one; the first run of its chain
        for _ in range(R - 1):
            after = k.select(has_next & k.shuffle(linki, nxt).eq(1), k.shuffle(after, nxt) + 1,
                             zero)
            head = k.select(link, k.shuffle(head, prv), li)
        first_seg = pos >> p.segment_shift  # the segment of the run's first row
        shares = first_seg > 0
        sup = start & ~link & (after > 0) & shares  # a super group's first run
        member = (link & shares) | sup
        segs = k.select(start, (pos + n - 1) / S + 1, zero)
        seg0 = k.select(member, first_seg, zero)
        # lanes of the three kinds, each pulling its row's values
        kind = k.min(lane / R, ALONE + 1)  # ALONE + 1: no entry
        row = k.min(lane - kind * R, R - 1)
        own, alone = kind.eq(OWN), kind.eq(ALONE)
        r_n, r_pos, r_first = k.shuffle(n, row), k.shuffle(pos, row), k.shuffle(first_seg, row)
        r_runs, r_head = k.shuffle(after + 1, row), k.shuffle(head, row)
        r_sup, r_member = (k.shuffle(k.select(x, one, z0), row).eq(1) for x in (sup, member))
        s_act = kind.eq(SUPER) & r_sup
        rows = k.select(own, n, k.select(s_act, r_n * r_runs, r_n))
        e_act = (own & start) | s_act
        e_lo = k.select(own, seg0, zero)
        e_segs = k.select(own, segs - seg0, k.select(s_act, r_first, zero))
        pairs = (rows + 1) >> 1
        seg_cost = _segment_cost(k, p, pairs)
        if st.tail_rows and weighted_costs(p):  # (n: the run's rows, on its own lanes)
            tail = k.select(own, n * RUN_TAIL_ROW + RUN_TAIL_FIXED, z0)
        else:
            tail = k.select(own, k.const(tail_cost(p, True), i32), z0)
        cost = k.select(e_act, e_segs * seg_cost + tail, zero)
        pre = _scan(k, cost, 2 * R) - cost
        C = k.wave_sum(cost)
        if st.tails_last:  # the super entries first in the split's order, the own after
            own_cost = k.wave_sum(k.select(own, cost, zero))
            pre = k.select(own, pre + (C - own_cost), pre - own_cost)
        den = seg_cost * J  # the tail lies past the last segment: its job holds that one
        lo = e_lo + k.min((k.max(job * C - pre * J, 0) + den - 1) / den, e_segs)
        hi = e_lo + k.min((k.max((job + 1) * C - pre * J, 0) + den - 1) / den, e_segs)
        act = e_act & (lo < hi)
        nsl = k.select(act, rows * (hi - lo), zero)
        base = _scan(k, nsl, 2 * R) - nsl
        # a run alone: its super entry's segments, its slots (run j: j x n0 x (hi - lo) in)
        sup_lane = R + r_head
        s_lo, s_hi = k.shuffle(lo, sup_lane), k.shuffle(hi, sup_lane)
        s_on = k.shuffle(k.select(act, one, z0), sup_lane).eq(1)
        a_act = alone & r_member & s_on
        a_base = k.shuffle(base, sup_lane) + (row - r_head) * (s_hi - s_lo)
        vals = [k.select(act | a_act, one, z0), rows, k.select(alone, s_lo, lo),
                k.select(alone, s_hi, hi), k.select(alone, a_base, base),
                k.select(own, pos, r_pos),
                k.select(kind.eq(SUPER), r_head + r_n - 1, row + r_n - 1),
                r_n, r_runs, r_head, row, zero]
        assert len(vals) == st.PW
        ents = lane < E
        e = k.min(lane, E - 1)
        for q in range(st.PW // 4):
            k.store(tab, e * st.PW + 4 * q, k.vec(*vals[4 * q:4 * q + 4]), mask=ents)
        k.store(counters, li, k.const(0, u32), mask=valid)
        # the job's super entries (supers_word): none (W1; unrelated requests), and the entry
        # loops stop after the R own entries, as without sharing
        supers = k.wave_sum(k.select(kind.eq(SUPER) & act, one, z0))
        k.store(counters, supers_word(R), k.cast(supers, u32), mask=lane.eq(0))


def _segment_cost(k, p, pairs):
    """segment_cost in the kernel: an entry of all the plan's pairs runs one chain."""
    if not weighted_costs(p):
        return pairs
    return k.select(pairs.eq(p.pairs), k.const(segment_cost(p, p.pairs, True), i32),
                    pairs * segment_cost(p, 1, False))


def count_divergent(st, k, io, tab, counters):
    """Every thread: the super entries' pages compared across their runs' tables, a
    mismatch counted into the entry's LDS counter (read after the next CTA barrier). With
    lean_plan the loop runs only where the plan has a super entry (its word is read after
    the plan's barrier)."""
    if st.lean_plan:
        with k.if_(k.load(counters, supers_word(st.p.rows), u32).ne(0)):
            _compare_pages(st, k, io, tab, counters)
        return
    _compare_pages(st, k, io, tab, counters)


def _compare_pages(st, k, io, tab, counters):
    p = st.p
    a = io.args
    R, MP = p.rows, p.max_pages
    pages_a_segment = p.segment // PAGE
    T = k.W * k.L
    tid = _tid(k)
    for e in k.range(R):
        g = st._row(k, tab, SUPER * R + e)
        with k.if_(g[ACT].eq(1)):
            n0, runs = g[RUN_ROWS], g[RUNS]
            npg = (g[HI] - g[LO]) * pages_a_segment
            pg_lo = g[LO] * pages_a_segment
            tot = (runs - 1) * npg
            for i0 in k.range(0, tot, T):
                i = i0 + tid
                ok = i < tot
                ic = k.min(i, tot - 1)
                j = ic / npg + 1
                pg = pg_lo + ic % npg
                mine = k.load(a.block_table, g[BTROW] * MP + pg, i32)
                theirs = k.load(a.block_table, (e + j * n0 + n0 - 1) * MP + pg, i32)
                k.atomic("add", counters, e, k.const(1, u32), mask=ok & mine.ne(theirs),
                         scope="cta")


def for_entries(st, k, tab, fn, counters=None):
    """fn(first row, words) for each entry scored in this job: the own entries, and with
    sharing each super entry whose pages agree or else its runs alone."""
    R = st.p.rows
    if not st.share_pages:
        for gi in k.range(R):
            g = st._row(k, tab, gi)
            with k.if_(g[ACT].eq(1)):
                fn(gi, g)
        return
    shared = k.load(counters, supers_word(R), u32).ne(0)
    n_entries = k.select(shared, k.const(plan_entries(R, True), i32), k.const(R, i32))
    scored = st._entries_scored
    for e in k.range(n_entries):
        if scored is None:  # (AMD: each entry's counter read in turn)
            g = st._row(k, tab, e)
            diverged = k.load(counters, g[HEAD], u32).ne(0)
            with k.if_(_scored(k, R, e, g[ACT], diverged)):
                fn(g[FIRST], g)
            continue
        with k.if_(_has_bit(k, scored, e)):
            g = st._row(k, tab, e)
            fn(g[FIRST], g)


def _scored(k, R, e, act, diverged):
    """Whether entry e is scored this job: an own entry; a super entry whose pages agree; a
    run alone where they do not (`diverged`: its super entry's counter is not zero)."""
    return act.eq(1) & ((e < R) | (diverged.eq(e >= ALONE * R)))


def entries_scored(st, k, tab, counters):
    """The job's entries to score as a wave-uniform bit mask (bit e: entry e), once a job
    after the divergence counters are final (a CTA barrier after count_divergent): lane e
    reads entry e's words and its counter, so the three passes over the entries (the key
    loop, the fix-up, the flush) read no counter and skip an entry without its words: an
    own entry; a super entry whose pages agree; a run alone where they do not. sm_90a only
    (IndexScore.body): on gfx950 the rows-8 index kernel spills with the mask held across
    the job, and AMD's sharing reads no fewer keys anyway (the module doc)."""
    R = st.p.rows
    E = plan_entries(R, True)
    lane = _lane(k)
    e = k.min(lane, E - 1)
    act = k.load(tab, e * st.PW + ACT, i32)
    head = k.load(tab, e * st.PW + HEAD, i32)
    diverged = k.load(counters, k.min(k.max(head, 0), R - 1), u32).ne(0)
    return k.ballot((lane < E) & _scored(k, R, e, act, diverged))
