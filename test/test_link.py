"""The linker (monokernel/link.py) with duck-typed stages that know no layout: one declared
ABI, the schedule as an int32 table the kernel dispatches on, the deadlock check before
linking, and the error word (which stage/job timed out, the CTA skipping its later jobs)."""
from types import SimpleNamespace

import numpy as np
import pytest

from monokernel import interp, link
from monokernel.ir import Ptr, Scalar
from monokernel.schedule import DeadlockError, Schedule, list_schedule
from monokernel.types import f32, i32, u32

CTAS = 4


class Flagged:
    """A stage whose job j waits for flags[dep] == tag for each dependency (a bounded poll,
    reporting through env.fail), logs (cta + 1, order of completion) and raises its own flag.
    Knows no layout: it uses the JobEnv the linker hands it."""

    def __init__(self, name, n, base, deps=lambda j: (), skip=()):
        self.name, self.n, self.base, self._deps, self.skip = name, n, base, deps, set(skip)

    def jobs(self):
        return [SimpleNamespace(index=j, cost_bytes=1000 + 10 * j, cost_flops=0, lds_bytes=0)
                for j in range(self.n)]

    def deps(self, j):
        return list(self._deps(j))

    def kernel_args(self):
        return {"flags": Ptr(u32), "log": Ptr(i32), "clock": Ptr(u32)}

    def body(self, k, job, env):
        a = env.args
        for (st, dj) in self._deps_symbolic():
            with k.if_(job.eq(dj[0])):
                for src in dj[1]:
                    _, to = k.poll(a.flags, src, env.tag, dt=u32, bound=env.poll_bound, mask=env.ok)
                    env.fail(to, f"flag of {st}")
        seq = k.atomic("add", a.clock, 0, k.const(1, u32))
        slot = (job + self.base) * 2
        k.store(a.log, slot, env.cta + 1)
        k.store(a.log, slot + 1, k.cast(seq, i32))
        if self.skip:
            cond = None
            for s in self.skip:
                c = job.ne(s)
                cond = c if cond is None else cond & c
            with k.if_(cond):
                k.store(a.flags, job + self.base, env.tag, order="relaxed", mask=env.ok)
        else:
            k.store(a.flags, job + self.base, env.tag, order="relaxed", mask=env.ok)

    def _deps_symbolic(self):
        # job j's dependencies as flag indices (the base of the producing stage + its index)
        out = []
        for j in range(self.n):
            srcs = [BASES[s] + i for (s, i) in self._deps(j)]
            if srcs:
                out.append((self._deps(j)[0][0], (j, srcs)))
        return out


BASES = {"A": 0, "B": 8, "C": 12}


def chain(skip_a=()):
    """A: 8 jobs; B[j] waits for A[2j], A[2j+1]; C[j] waits for every B job."""
    a = Flagged("A", 8, 0, skip=skip_a)
    b = Flagged("B", 4, 8, deps=lambda j: [("A", 2 * j), ("A", 2 * j + 1)])
    c = Flagged("C", 2, 12, deps=lambda j: [("B", i) for i in range(4)])
    return [a, b, c]


def run(stages, schedule, *, mode="inorder", seed=0, tag=1, on_stall="raise", grid=None,
        poll_bound=64, flags=None):
    lk = link.link("chain", stages, poll_bound=poll_bound)
    table = lk.table(schedule)
    flags = np.zeros(16, np.uint32) if flags is None else flags
    log = np.zeros(2 * 16, np.int32)
    args = lk.args(arena=np.zeros(128, np.uint8), table=table, err=lk.error_word(), tag=tag,
                   flags=flags, log=log, clock=np.zeros(1, np.uint32))
    interp.run(lk.kernel, args, grid=grid or table.grid, mode=mode, seed=seed, on_stall=on_stall)
    return lk, table, args


def placed(schedule):
    return {key: cta for cta, lst in enumerate(schedule.cta_jobs) for key in lst}


# --------------------------------------------------------------------------------- the ABI

def test_link_abi_is_one_declared_table_linker_arguments_first():
    abi, per_stage = link.link_abi(chain())
    assert abi.names() == ["arena", "sched", "err", "tag", "flags", "log", "clock"]
    assert [s.offset for s in abi.slots] == [0, 8, 16, 24, 32, 40, 48]
    assert per_stage["B"] == ["flags", "log", "clock"]


def test_link_abi_rejects_conflicting_or_reserved_argument_names():
    s1 = SimpleNamespace(name="s1", kernel_args=lambda: {"x": Ptr(f32)})
    s2 = SimpleNamespace(name="s2", kernel_args=lambda: {"x": Ptr(i32)})
    with pytest.raises(link.LinkError, match="'x' declared as"):
        link.link_abi([s1, s2])
    s3 = SimpleNamespace(name="s3", kernel_args=lambda: {"tag": Scalar(u32)})
    with pytest.raises(link.LinkError, match="linker's own"):
        link.link_abi([s3])
    with pytest.raises(link.LinkError, match="appear twice"):
        link.job_graph([SimpleNamespace(name="a"), SimpleNamespace(name="a")])


# ----------------------------------------------------------------------- the table, dispatch

def test_schedule_table_is_int32_data_that_decodes_back_to_the_schedule():
    stages = chain()
    g, sched = link.schedule_stages(stages, CTAS)
    t = link.make_table(stages, sched, g)
    d = t.data
    assert d.dtype == np.int32
    assert list(d[:4]) == [link.TABLE_MAGIC, CTAS, 3, 14]
    starts = d[4:4 + CTAS + 1]
    base = (4 + CTAS + 1 + 3) // 4 * 4
    for c, lst in enumerate(sched.cta_jobs):
        ents = d[base + 4 * starts[c]: base + 4 * starts[c + 1]].reshape(-1, 4)
        names = [s.name for s in stages]
        assert [(names[s], j) for s, j, _, _ in ents] == lst
        for (s, j, prio, _) in ents:  # the priority names the job's witness position
            assert t.key_of_priority(int(prio) & 0xFFFFFFFF) == (names[s], j)


@pytest.mark.parametrize("mode", ["inorder", "random", "relaxed"])
def test_dispatch_runs_each_job_once_on_its_scheduled_cta_after_its_deps(mode):
    stages = chain()
    g, sched = link.schedule_stages(stages, CTAS)
    lk, table, args = run(stages, sched, mode=mode, seed=5)
    log = args["log"].reshape(-1, 2)
    where = placed(sched)
    for st in stages:
        for j in range(st.n):
            cta, seq = log[st.base + j]
            assert cta - 1 == where[(st.name, j)], (st.name, j)
    # dependencies completed before their consumers (the completion counter orders them)
    for st in stages:
        for j in range(st.n):
            for (s, i) in st.deps(j):
                assert log[BASES[s] + i][1] < log[st.base + j][1]
    assert (args["flags"][:14] == 1).all()
    assert lk.decode_error(args["err"], table) is None


def test_one_kernel_runs_any_schedule_table_of_its_stages():
    """The schedule is data: the same code object runs a 2-CTA and a 5-CTA table."""
    stages = chain()
    lk = link.link("chain", stages)
    for ctas in (2, 5):
        g, sched = link.schedule_stages(stages, ctas)
        table = lk.table(sched, g)
        log = np.zeros(32, np.int32)
        args = lk.args(arena=np.zeros(128, np.uint8), table=table, err=lk.error_word(), tag=3,
                       flags=np.zeros(16, np.uint32), log=log, clock=np.zeros(1, np.uint32))
        interp.run(lk.kernel, args, grid=ctas, mode="random", seed=ctas)
        lk.check(args["err"], table)
        where = placed(sched)
        assert all(log.reshape(-1, 2)[st.base + j][0] - 1 == where[(st.name, j)]
                   for st in stages for j in range(st.n))


def test_table_for_another_grid_is_reported_in_the_error_word_not_a_hang():
    stages = chain()
    g, sched = link.schedule_stages(stages, CTAS)
    lk, table, args = run(stages, sched, grid=CTAS - 1)
    e = lk.decode_error(args["err"], table)
    assert e is not None and "does not fit" in str(e)
    assert (args["log"] == 0).all(), "no job may run from a table that does not fit"


def test_deadlock_cycle_in_a_schedule_is_rejected_before_linking():
    stages = chain()
    g = link.job_graph(stages)
    good = list_schedule(g, 2)
    lists = [list(l) for l in good.cta_jobs]
    # put C[0] first on CTA 0: it waits for B jobs that wait for A jobs behind it there
    lists[0].remove(("C", 0)) if ("C", 0) in lists[0] else lists[1].remove(("C", 0))
    lists[0].insert(0, ("C", 0))
    bad = Schedule(2, lists)
    with pytest.raises(DeadlockError, match="deadlock: wait cycle"):
        link.make_table(stages, bad, g)
    # the good one passes and yields the witness the error word's priorities index
    t = link.make_table(stages, good, g)
    assert set(t.witness) == set(g.nodes)


def test_tag_zero_or_past_32_bits_is_refused_by_the_host():
    stages = chain()
    g, sched = link.schedule_stages(stages, CTAS)
    lk = link.link("chain", stages)
    for bad in (0, 2**32, -1):
        with pytest.raises(ValueError, match="tag"):
            lk.args(arena=None, table=lk.table(sched), err=None, tag=bad, flags=None, log=None,
                    clock=None)


# ------------------------------------------------------------------------------ the error word

@pytest.mark.parametrize("mode", ["inorder", "random", "relaxed"])
def test_error_word_names_the_most_upstream_timed_out_stage_and_job(mode):
    """A[3] never raises its flag: B[1] times out (waiting for it), and so do the C jobs
    (waiting for B[1]); the error word keeps B[1], the root cause, whatever the order of the
    timeouts."""
    stages = chain(skip_a=(3,))
    g, sched = link.schedule_stages(stages, CTAS)
    lk, table, args = run(stages, sched, mode=mode, seed=2, on_stall="timeout", poll_bound=16)
    e = lk.decode_error(args["err"], table, tag=1)
    assert e is not None
    assert (e.stage, e.job, e.cta) == ("B", 1, placed(sched)[("B", 1)])
    assert "stage 'B' job 1" in str(e) and "flag of A" in str(e)
    with pytest.raises(link.LaunchFailed, match="stage 'B' job 1"):
        lk.check(args["err"], table)


def test_failed_cta_skips_its_remaining_jobs_and_never_raises_their_flags():
    stages = chain(skip_a=(3,))
    g, sched = link.schedule_stages(stages, 3)  # puts C[0] after B[1] on one CTA
    lk, table, args = run(stages, sched, on_stall="timeout", poll_bound=16)
    log = args["log"].reshape(-1, 2)
    cta = placed(sched)[("B", 1)]
    lst = sched.cta_jobs[cta]
    after = lst[lst.index(("B", 1)) + 1:]
    assert after, "the schedule should put jobs after B[1] on its CTA"
    for (s, j) in after:
        assert log[BASES[s] + j][0] == 0, f"{s}[{j}] ran after its CTA failed"
    # a failed job does not publish: B[1]'s flag stays unraised
    assert args["flags"][BASES["B"] + 1] == 0
    # every A job but the skipped one ran and published
    assert [int(f) for f in args["flags"][:8]] == [1, 1, 1, 0, 1, 1, 1, 1]


def test_stale_flags_of_the_previous_launch_are_not_accepted():
    """Flags from tag 1 left in memory do not satisfy the polls of the launch tagged 2."""
    stages = chain(skip_a=(3,))
    g, sched = link.schedule_stages(stages, CTAS)
    flags = np.ones(16, np.uint32)  # everything published by the launch tagged 1
    lk, table, args = run(stages, sched, tag=2, on_stall="timeout", flags=flags)
    e = lk.decode_error(args["err"], table)
    assert e is not None and (e.stage, e.job) == ("B", 1)
    assert args["flags"][3] == 1  # the stale word was there all along


# ------------------------------------------------------- LDS: stages overlaid, jobs poisoned

class Scratch:
    """A stage with `words` u32 of LDS. Job j stores j + 1 to its first word unless it is
    in `reads_only`, then stores what that word holds (and, each lane, its lane's word
    written by itself just before) to out[2 j], out[2 j + 1]. `keep_mbar`: job 0 leaves an
    mbarrier initialised in its LDS at its end."""

    def __init__(self, name, words, base, n=2, reads_only=(), keep_mbar=False):
        self.name, self.words, self.base, self.n = name, words, base, n
        self.reads_only, self.keep_mbar = set(reads_only), keep_mbar

    def jobs(self):
        return [SimpleNamespace(index=j, cost_bytes=100, cost_flops=0, lds_bytes=4 * self.words)
                for j in range(self.n)]

    def deps(self, j):
        return [(self.name, j - 1)] if j else []  # one CTA anyway: program order

    def kernel_args(self):
        return {"out": Ptr(u32)}

    def body(self, k, job, env):
        w = k.lds(f"{self.name}_w", u32, self.words)
        first = k.thread_id().eq(0)
        fresh = job.ne(-1)
        for j in self.reads_only:
            fresh = fresh & job.ne(j)
        with k.if_(fresh):
            k.store(w, 0, k.cast(job + 1, u32), mask=first)
        lane = k.thread_id() + 1
        k.store(w, lane, k.cast(lane, u32), mask=lane < self.words)
        k.barrier()
        slot = (job + self.base) * 2
        k.store(env.args.out, slot, k.load(w, 0, u32), mask=first)
        k.store(env.args.out, slot + 1, k.load(w, k.min(lane, self.words - 1), u32), mask=first)
        if self.keep_mbar:
            with k.if_(job.eq(0) & k.wave_id().eq(0)):
                k.mbar_init(k.ptr_add(w, 4 * self.words - 8), 1)  # its last 8 bytes
        k.barrier()


def run_scratch(stages, *, waves=1, overlay=False):
    lk = link.link("scratch", stages, waves=waves, lds_overlay=overlay)
    g, sched = link.schedule_stages(stages, 1)
    table = lk.table(sched, g)
    out = np.zeros(2 * sum(s.n for s in stages), np.uint32)
    args = lk.args(arena=np.zeros(64, np.uint8), table=table, err=lk.error_word(), tag=1,
                   out=out)
    interp.run(lk.kernel, args, grid=1, mode="random", seed=3)
    lk.check(args["err"], table)
    return lk, out.reshape(-1, 2)


@pytest.mark.parametrize("waves", [1, 2])
def test_overlaid_stages_share_one_lds_range_and_compute_the_same(waves):
    """lds_overlay: every stage's LDS starts at one byte, so the kernel holds the largest
    stage's LDS, not the sum; each job writes before it reads, so values are the same."""
    def stages():
        return [Scratch("A", 16, 0), Scratch("B", 64, 2)]
    plain, out_plain = run_scratch(stages(), waves=waves)
    over, out_over = run_scratch(stages(), waves=waves, overlay=True)
    flag = 4 if waves > 1 else 0  # the linker's own failed flag, outside the overlay
    assert plain.kernel.lds_bytes == (16 if flag else 0) + 16 * 4 + 64 * 4
    assert over.kernel.lds_bytes == (16 if flag else 0) + 64 * 4
    a = {x.name: x.offset for x in over.kernel.lds}
    assert a["A_w"] == a["B_w"]
    assert (out_over == out_plain).all()
    assert out_plain[:, 0].tolist() == [1, 2, 1, 2]


@pytest.mark.parametrize("overlay", [False, True])
@pytest.mark.parametrize("waves", [1, 2])
def test_a_job_reading_lds_its_job_did_not_write_reads_poison(waves, overlay):
    """Between a CTA's jobs the interpreter poisons the stages' LDS (op lds_poison, nothing
    on hardware): a job that counts on LDS its CTA's previous job left (which the overlay
    may hand to another stage) reads LDS_POISON, so the tests catch it."""
    lk, out = run_scratch([Scratch("A", 16, 0, reads_only={1})], waves=waves, overlay=overlay)
    poison = int.from_bytes(bytes([interp.LDS_POISON]) * 4, "little")
    assert out[0].tolist() == [1, 1]
    assert out[1].tolist() == [poison, 1]  # its own word, written in the job, reads back


def test_an_mbarrier_left_initialised_at_a_jobs_end_is_an_error():
    with pytest.raises(interp.InterpError, match="still initialised at a job's end"):
        run_scratch([Scratch("A", 16, 0, keep_mbar=True)], waves=2)
