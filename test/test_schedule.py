"""The scheduler: list scheduling, critical path first, and the deadlock-freedom proof."""
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monokernel.schedule import (CostModel, DeadlockError, JobGraph, JobNode, Schedule,
                                 check_deadlock_free, list_schedule, simulate)
from monokernel.targets import GFX942, GFX950, SM90A

UNIT = CostModel(bytes_per_ns=1.0, flops_per_ns=1.0, name="unit")  # cost_bytes == ns


def J(stage, i, cost=1, deps=(), lds=0, flops=0):
    return JobNode((stage, i), cost_bytes=cost, cost_flops=flops, lds_bytes=lds, deps=tuple(deps))


def make_stage_graph(sizes, seed):
    """Stages of the given sizes; each job depends on jobs of earlier stages with one of the
    shapes real stages have (one-to-one, full fan-in, random fan-in/fan-out, none)."""
    rng = random.Random(seed)
    nodes, earlier = [], []
    for s, n in enumerate(sizes):
        name = f"s{s}"
        prev = [k for k in earlier if k[0] == f"s{s - 1}"] if s else []
        shape = rng.choice(["one_to_one", "fan_in_all", "random", "random", "none"]) if earlier else "none"
        for i in range(n):
            if shape == "one_to_one" and prev:
                deps = [prev[i % len(prev)]]
            elif shape == "fan_in_all":
                deps = list(prev)
            elif shape == "random":
                deps = rng.sample(earlier, rng.randint(0, min(5, len(earlier))))
            else:
                deps = []
            nodes.append(J(name, i, cost=rng.choice([0, 1, 3, 10, 100, 1000]), deps=deps,
                           flops=rng.choice([0, 0, 500])))
        earlier += [(name, i) for i in range(n)]
    return JobGraph(nodes, [f"s{s}" for s in range(len(sizes))])


def assert_well_formed(sch, g):
    pos = {k: i for i, k in enumerate(sch.order)}
    assert sorted(pos) == sorted(g.nodes)
    for lst in sch.cta_jobs:  # each CTA's list follows the one global topological order
        assert [pos[k] for k in lst] == sorted(pos[k] for k in lst)
    for k, n in g.nodes.items():
        for d in n.deps:
            assert pos[d] < pos[k]
            assert sch.end[d] <= sch.start[k]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       seed=st.integers(0, 2**32 - 1), ctas=st.integers(1, 300))
def test_every_schedule_of_random_stage_graphs_is_deadlock_free_and_simulates(sizes, seed, ctas):
    g = make_stage_graph(sizes, seed)
    sch = list_schedule(g, ctas, UNIT)
    assert_well_formed(sch, g)
    witness = check_deadlock_free(sch, g, max_resident_ctas=300)
    assert len(witness) == len(g)
    # the schedule's estimates are exactly what playing it with the same costs gives
    assert simulate(sch, g) == sch.makespan
    # and it cannot stall under any other timing either (jittered durations)
    rng = random.Random(seed ^ 0x5A5A)
    jitter = {k: rng.uniform(0, 50) for k in g.nodes}
    assert simulate(sch, g, jitter) >= 0
    # the makespan is at least the critical path and at least the work spread over all CTAs
    work = sum(UNIT.duration(n) for n in g)
    assert sch.makespan >= work / ctas - 1e-6


@pytest.mark.parametrize("t", [GFX950, GFX942, SM90A], ids=lambda t: t.name)
def test_target_cta_counts_schedules_are_deadlock_free_when_co_resident(t):
    g = make_stage_graph([40, 40, 1, 40, 8, 40], seed=7)
    sch = list_schedule(g, t)
    assert sch.num_ctas == t.num_ctas and sch.cost_model == CostModel.for_target(t)
    check_deadlock_free(sch, g, max_resident_ctas=t.num_ctas)
    assert simulate(sch, g) == pytest.approx(sch.makespan)


def cross_graph():
    # b0 needs a1, b1 needs a0
    return JobGraph([J("a", 0), J("a", 1), J("b", 0, deps=[("a", 1)]), J("b", 1, deps=[("a", 0)])])


def test_hand_built_cross_cta_wait_cycle_is_reported_as_deadlock_naming_jobs_and_ctas():
    g = cross_graph()
    # CTA0 runs b0 before a0, CTA1 runs b1 before a1: b0 waits for a1 behind b1, which waits
    # for a0 behind b0.
    bad = Schedule(2, [[("b", 0), ("a", 0)], [("b", 1), ("a", 1)]])
    with pytest.raises(DeadlockError) as e:
        check_deadlock_free(bad, g)
    msg = str(e.value)
    assert "deadlock" in msg
    for s in ("a[0]", "a[1]", "b[0]", "b[1]", "CTA 0", "CTA 1", "dependency", "program order"):
        assert s in msg, (s, msg)
    assert {k for k, *_ in e.value.cycle} == {("a", 0), ("a", 1), ("b", 0), ("b", 1)}
    with pytest.raises(DeadlockError) as e2:
        simulate(bad, g, UNIT)
    assert "CTA 0 stuck at b[0]" in str(e2.value) and "waiting for a[1]" in str(e2.value)
    assert e2.value.stalled == {0: (("b", 0), ("a", 1)), 1: (("b", 1), ("a", 0))}
    # the same jobs in an order consistent with one topological order are fine
    good = Schedule(2, [[("a", 0), ("b", 0)], [("a", 1), ("b", 1)]])
    check_deadlock_free(good, g)
    assert simulate(good, g, UNIT) == 2.0


def test_deadlock_on_one_cta_running_a_consumer_before_its_producer():
    g = JobGraph([J("a", 0), J("a", 1), J("b", 0, deps=[("a", 1)])])
    bad = Schedule(2, [[("b", 0), ("a", 1)], [("a", 0)]])
    with pytest.raises(DeadlockError, match=r"b\[0\] \(CTA 0, position 0\) waits for a\[1\] \(CTA 0, position 1\)"):
        check_deadlock_free(bad, g)
    with pytest.raises(DeadlockError, match="stall"):
        simulate(bad, g, UNIT)


def test_critical_path_first_puts_the_long_chain_first_and_reaches_the_optimum():
    # Stage s0 = three independent jobs x0..x2 and the head c0 of a chain c0 -> c1 -> c2,
    # every job 10 ns, 2 CTAs. Total work 60 and the chain 30, so the optimum is 30: one CTA
    # runs the chain from t=0 while the other runs the x's.
    nodes = [J("s0", i, cost=10) for i in range(3)] + [J("s0", 3, cost=10)]
    nodes += [J("s1", 0, cost=10, deps=[("s0", 3)]), J("s2", 0, cost=10, deps=[("s1", 0)])]
    g = JobGraph(nodes)
    sch = list_schedule(g, 2, UNIT)
    assert sch.order[0] == ("s0", 3)  # the chain head is taken first
    assert [sch.start[k] for k in [("s0", 3), ("s1", 0), ("s2", 0)]] == [0.0, 10.0, 20.0]
    assert sch.makespan == 30.0 == simulate(sch, g)
    # taking jobs in stage order instead starts the chain late: 40
    fifo = list_schedule(g, 2, UNIT, policy="stage_order")
    assert fifo.makespan == 40.0
    check_deadlock_free(fifo, g)


def test_earliest_start_cta_is_chosen_and_ties_are_deterministic():
    g = JobGraph([J("a", 0, cost=5), J("a", 1, cost=1), J("b", 0, cost=1, deps=[("a", 1)])])
    sch = list_schedule(g, 2, UNIT)
    # a0 (rank 5) on CTA0, a1 (rank 2) on CTA1, b0 ready at 1 goes to CTA1 (free at 1), not
    # behind a0 on CTA0 (free at 5)
    assert sch.cta_jobs == [[("a", 0)], [("a", 1), ("b", 0)]]
    assert sch.makespan == 5.0
    assert list_schedule(g, 2, UNIT) == sch


def test_schedule_json_round_trip_and_table():
    g = make_stage_graph([5, 3, 7], seed=1)
    sch = list_schedule(g, 4, UNIT)
    d = sch.to_json()
    s = json.dumps(d)
    back = Schedule.from_json(s)
    assert back == sch and Schedule.from_json(d) == sch
    assert back.placement == sch.placement and back.makespan == sch.makespan
    check_deadlock_free(back, g)
    text = str(sch)
    assert "cta" in text and "s0[0]" in text and f"{sch.num_jobs} jobs on 4 CTAs" in text
    assert len(text.splitlines()) == 2 + len(g)
    c, p = sch.placement[("s1", 0)]
    assert sch.cta_of(("s1", 0)) == c and sch.position_of(["s1", 0]) == p


def test_unknown_dependency_is_a_value_error_naming_the_job():
    with pytest.raises(ValueError, match=r"job b\[0\] depends on unknown job a\[7\]"):
        JobGraph([J("a", 0), J("b", 0, deps=[("a", 7)])])


def test_cyclic_graph_is_a_value_error_naming_the_cycle():
    with pytest.raises(ValueError, match=r"cyclic job graph: .*a\[0\].*b\[0\]"):
        list_schedule([J("a", 0, deps=[("b", 0)]), J("b", 0, deps=[("a", 0)]), J("c", 0)], 2, UNIT)
    with pytest.raises(ValueError, match="itself"):
        JobGraph([J("a", 0, deps=[("a", 0)])])


def test_lds_over_the_per_cta_budget_is_a_value_error_naming_the_job():
    g = JobGraph([J("a", 0, lds=1024), J("topk", 3, lds=200 * 1024)])
    with pytest.raises(ValueError, match=r"job topk\[3\] needs 204800 LDS bytes.*163840"):
        list_schedule(g, GFX950)  # 160 KiB per CU
    with pytest.raises(ValueError, match=r"topk\[3\]"):
        list_schedule(g, 4, UNIT, lds_budget=64 * 1024)
    assert list_schedule(g, 4, UNIT, lds_budget=200 * 1024).num_jobs == 2


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="duplicate job a\\[0\\]"):
        JobGraph([J("a", 0), J("a", 0)])
    with pytest.raises(ValueError, match="cost_bytes"):
        J("a", 0, cost=-1)
    with pytest.raises(ValueError, match="CTA count"):
        list_schedule([J("a", 0)], 0)
    g = JobGraph([J("a", 0), J("a", 1)])
    with pytest.raises(ValueError, match=r"job a\[1\] is on no CTA"):
        check_deadlock_free(Schedule(1, [[("a", 0)]]), g)
    with pytest.raises(ValueError, match=r"unknown job z\[0\]"):
        simulate(Schedule(1, [[("a", 0), ("a", 1), ("z", 0)]]), g)
    with pytest.raises(ValueError, match=r"placed twice"):
        Schedule(2, [[("a", 0)], [("a", 0)]])
    with pytest.raises(ValueError, match="co-resident"):
        check_deadlock_free(list_schedule(g, 300, UNIT), g, max_resident_ctas=GFX950.num_ctas)


def test_more_ctas_than_jobs_leaves_ctas_empty_and_is_deadlock_free():
    g = make_stage_graph([3, 2], seed=3)
    sch = list_schedule(g, 300, UNIT)
    assert 1 <= sum(1 for l in sch.cta_jobs if l) <= len(g) < 300
    check_deadlock_free(sch, g)
    assert simulate(sch, g) == sch.makespan


@pytest.mark.parametrize("ctas", [1, 2, 7, 64, 300])
def test_largest_stage_graphs_are_deadlock_free_on_any_cta_count(ctas):
    g = make_stage_graph([40] * 6, seed=ctas)
    sch = list_schedule(g, ctas, UNIT)
    assert_well_formed(sch, g)
    check_deadlock_free(sch, g)
    assert simulate(sch, g) == sch.makespan


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
       seed=st.integers(0, 2**32 - 1), ctas=st.integers(1, 5))
def test_deadlock_check_agrees_with_simulation_on_arbitrary_hand_orders(sizes, seed, ctas):
    # Random placements in random per-CTA orders (most of them bad): the static proof
    # rejects exactly the schedules whose replay stalls.
    g = make_stage_graph(sizes, seed)
    rng = random.Random(seed)
    keys = list(g.nodes)
    rng.shuffle(keys)
    lists = [[] for _ in range(ctas)]
    for k in keys:
        lists[rng.randrange(ctas)].append(k)
    sch = Schedule(ctas, lists)
    try:
        check_deadlock_free(sch, g)
        proven = True
    except DeadlockError:
        proven = False
    try:
        simulate(sch, g, UNIT)
        ran = True
    except DeadlockError:
        ran = False
    assert proven == ran


def test_earliest_start_runs_ready_cheap_jobs_before_long_jobs_that_start_later():
    """Kind `index` in miniature: a short job a feeds two long jobs b0, b1 (the scoring, one
    per CTA) and three cheap jobs c0..c2 (the front's kv projection) feed a tail d. By rank
    alone (critical_path) both b's are taken before any c and every c queues behind a b,
    as the front's jobs did on the H200; earliest_start runs c's in the time before the b's
    can start, and finishes no later."""
    nodes = [J("a", 0, cost=4)] + [J("b", i, cost=50, deps=[("a", 0)]) for i in range(2)]
    nodes += [J("c", i, cost=2) for i in range(3)] + \
        [J("d", 0, cost=1, deps=[("c", i) for i in range(3)])]
    g = JobGraph(nodes)
    etf = list_schedule(g, 2, UNIT)
    cp = list_schedule(g, 2, UNIT, policy="critical_path")
    assert etf.policy == "earliest_start"

    def cs_before_bs(s):
        return sum(1 for lst in s.cta_jobs for i, k in enumerate(lst)
                   if k[0] == "c" and all(x[0] != "b" for x in lst[:i]))
    assert cs_before_bs(cp) == 0
    assert cs_before_bs(etf) == 2
    assert etf.makespan < cp.makespan
    for s in (etf, cp):
        check_deadlock_free(s, g)
        assert simulate(s, g) == s.makespan


@pytest.mark.parametrize("policy", ["earliest_start", "critical_path", "stage_order"])
def test_a_lead_job_runs_first_on_a_cta_of_its_own_and_the_schedule_stays_deadlock_free(policy):
    """ix_key in miniature: a lead job k waits for p0..p5 (the projections) but has work
    to do before its wait. Without the flag it queues behind projection jobs on a shared
    CTA; with it, it is the first job of a reserved CTA (the last), which other jobs may use
    only after it; at most all CTAs but one are reserved, however many jobs lead."""
    def graph(lead):
        nodes = [J("p", i, cost=10) for i in range(6)]
        nodes.append(JobNode(("k", 0), cost_bytes=5, deps=tuple(("p", i) for i in range(6)),
                             lead=lead))
        nodes += [J("t", i, cost=3, deps=[("k", 0)]) for i in range(4)]
        return JobGraph(nodes)
    plain = list_schedule(graph(False), 3, UNIT, policy=policy)
    assert plain.position_of(("k", 0)) > 0
    g = graph(True)
    s = list_schedule(g, 3, UNIT, policy=policy)
    assert (s.cta_of(("k", 0)), s.position_of(("k", 0))) == (2, 0)
    assert s.start[("k", 0)] == max(s.end[("p", i)] for i in range(6))
    check_deadlock_free(s, g, max_resident_ctas=3)
    assert simulate(s, g) == s.makespan
    many = JobGraph([JobNode(("k", i), cost_bytes=1, lead=True) for i in range(5)])
    s = list_schedule(many, 3, UNIT, policy=policy)
    firsts = {lst[0] for lst in s.cta_jobs if lst}
    assert {("k", 0), ("k", 1)} <= firsts  # the first two leads, on the two reserved CTAs
    check_deadlock_free(s, many)
