"""The linker: stages + a schedule -> ONE persistent kernel (DESIGN.md section 4).

Generic: it knows no layout and no model. It takes duck-typed stage objects, each with

    name: str
    jobs() -> [job]                  job.index, job.cost_bytes, job.cost_flops, job.lds_bytes
    deps(index) -> [(stage, index)]  the jobs whose results job `index` waits for
    kernel_args() -> {name: Ptr | Scalar}   the stage's own buffers (merged by name)
    body(k, job, io)                 DSL: `job` is the job index, a uniform runtime i32

and builds a kernel whose CTAs each run their entries of a schedule table:

    for e in table[cta]:                      # the schedule is DATA (a kernel argument)
        stage_id, job, prio = entry e
        if stage_id == 0: stage0.body(k, job, io)
        elif stage_id == 1: stage1.body(k, job, io)  ...
        stop after the CTA's last entry (word 3 of the entry), or once the CTA has failed

Each stage body is emitted ONCE; which jobs a CTA runs, and in what order, is read from the
table at run time, so one code object serves every grid and every schedule of its stages.

The kernel ABI (one `ir.ABI`, never positional sprawl):

    arena  Ptr(u8)    the scratch arena (mailboxes, counters), zeroed once, never reset
    sched  Ptr(i32)   the schedule table (`ScheduleTable`)
    err    Ptr(u64)   the error word; the host zeroes it before a launch
    tag    u32        this launch's tag (layouts.tags.tag_for: never 0, wraps after 2**32-1)
    ...               the stages' own buffers and scalars, in stage order
    timeline Ptr(u64) only when linked with timeline=True (off by default), LAST, so every
                      other argument keeps its offset: lane 0 of wave 0 stores k.clock() at
                      the start and end of table entry e into timeline[W*e] and
                      timeline[W*e + 1], W = TIMELINE_WORDS, and the job's phase marks
                      (JobEnv.phase(i): where a stage says its waiting, loading or
                      publishing ends) into timeline[W*e + 2 + i] (globaltimer ns on
                      NVIDIA, s_memrealtime ticks on AMD, the interpreter's tick counter),
                      and the job's tallies (JobEnv.tally(i, v): every wave's lane 0 adds v,
                      e.g. cycles a wave spent in a part of its loop) into
                      timeline[W*e + TALLY_WORD0 + i]; `timeline_records` decodes it

Table layout (int32 words):

    [0..4)              MAGIC, grid G, number of stages, number of entries
    [4..4+G+1)          first entry of CTA c (entries of CTA c are [start[c], start[c+1]))
    padded to 4 words
    entries             4 words each: stage id, job index, priority, last (1 on a CTA's
                        last entry, else 0) (16-byte aligned: one uniform 128-bit load per
                        entry). The loop reads `last` again after the job instead of keeping
                        its bound in a register across every stage body.

Error word (u64, written with an atomic unsigned max, device scope):

    0                   no failure
    hi 32 bits          priority = 0xFFFFFFFE - p, where p is the failing job's position in
                        the deadlock-freedom witness (a topological order of dependencies +
                        program order); 0xFFFFFFFF for a table that does not fit the kernel
    lo 32 bits          what failed: 1 + index into `LinkedKernel.whats` (e.g. "pairs 'y'")

Why a max and not "first failure wins": a job whose input never arrives makes every job
downstream of it time out as well, and on a GPU the downstream ones may run out of polls
FIRST (they started polling earlier). The max keeps the failure earliest in the witness
order, which is the most upstream one: the job that waited for the missing producer
directly. All jobs before it in that order complete (they do not depend on the producer),
so that job is always reached and always reports: the decoded error is deterministic and
names the root cause, on the interpreter and on hardware. After recording, the CTA marks
itself failed: its later polls in the same job are masked off (they return at once), its
publishes are masked off (a failed job never publishes garbage under the current tag), and
it skips its remaining jobs.

With more than one wave per CTA the failed flag is made CTA-uniform at every job boundary
(an LDS word between two barriers), so waves never diverge around a barrier; `io.cta_ok()`
gives a body the same agreement mid-job (e.g. before bumping a bulk counter).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable, Sequence

import numpy as np

from .dsl import DSLError, build_kernel
from .ir import DEFAULT_POLL_BOUND, ABI, Ptr, Scalar, derived_args  # noqa: F401 (re-exported)
from .schedule import (JobGraph, JobNode, Key, Schedule, check_deadlock_free, job_name,
                       list_schedule)
from .types import i32, u8, u32, u64

LINK_ARGS = ("arena", "sched", "err", "tag")
TIMELINE_ARG = "timeline"  # the optional per-entry timestamp buffer (link(timeline=True))
PHASE_SLOTS = 4  # marks a job may stamp between its start and end (JobEnv.phase)
TALLY_SLOTS = 5  # cycle accounts a job may sum over its waves (JobEnv.tally)
# u64 a table entry: start, end, the phase marks, then the tallies
TIMELINE_WORDS = 2 + PHASE_SLOTS + TALLY_SLOTS
TALLY_WORD0 = 2 + PHASE_SLOTS
TABLE_MAGIC = 0x4D4B4C31  # "MKL1"
HEADER_WORDS = 4
ENTRY_WORDS = 4  # an entry: (stage id, job, priority, LAST_WORD)
LAST_WORD = ENTRY_WORDS - 1  # 1 on a CTA's last entry
PRIO_TABLE_MISMATCH = 0xFFFFFFFF
PRIO_MAX_JOB = 0xFFFFFFFE
WHAT_TABLE_MISMATCH = "schedule table (magic, grid or stage count) does not fit the kernel/launch"
INVALID_INPUT = "invalid input"  # a `what` starting so is a stage's input check, not a wait


class LinkError(ValueError):
    """Stages or a schedule that cannot be linked (the message names the culprit)."""


class LaunchFailed(RuntimeError):
    """A launch's error word was set: `stage` / `job` (None for a table mismatch) timed out
    on `what`; `cta` is the CTA that ran it; `missing` (filled by a caller that can read the
    arena) the producer jobs whose results never arrived."""

    def __init__(self, message: str, *, stage=None, job=None, cta=None, what="", word=0,
                 missing=()):
        super().__init__(message)
        self.stage, self.job, self.cta, self.what, self.word = stage, job, cta, what, word
        self.missing = list(missing)


# ------------------------------------------------------------------------------------- graph

def job_graph(stages: Sequence) -> JobGraph:
    """The scheduler's input from the stages' declared jobs and dependencies."""
    _check_stage_names(stages)
    nodes = []
    for st in stages:
        for j in st.jobs():
            nodes.append(JobNode((st.name, int(j.index)), j.cost_bytes, j.cost_flops, j.lds_bytes,
                                 tuple(st.deps(int(j.index))), lead=bool(getattr(j, "lead", False))))
    return JobGraph(nodes, [s.name for s in stages])


def _check_stage_names(stages):
    names = [getattr(s, "name", None) for s in stages]
    for n in names:
        if not isinstance(n, str) or not n:
            raise LinkError(f"stage {n!r}: a stage needs a non-empty string name")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise LinkError(f"stage name(s) {dup} appear twice")
    if len(stages) > 255:
        raise LinkError(f"{len(stages)} stages; a launch links at most 255")


# ------------------------------------------------------------------------------ table (host)

@dataclass
class ScheduleTable:
    """The schedule as the kernel reads it, plus what the host needs to decode an error."""
    data: np.ndarray  # int32
    schedule: Schedule
    witness: list  # the deadlock-freedom witness: priority p <-> witness[p]
    stage_ids: dict

    @property
    def grid(self) -> int:
        return self.schedule.num_ctas

    def key_of_priority(self, prio: int) -> Key:
        return self.witness[PRIO_MAX_JOB - prio]


def make_table(stages: Sequence, schedule: Schedule, graph: JobGraph | None = None,
               max_resident_ctas: int | None = None) -> ScheduleTable:
    """Check `schedule` deadlock-free for the stages' job graph and lay it out as the table
    the linked kernel reads."""
    graph = graph if graph is not None else job_graph(stages)
    witness = check_deadlock_free(schedule, graph, max_resident_ctas=max_resident_ctas)
    if len(witness) >= PRIO_MAX_JOB:
        raise LinkError(f"{len(witness)} jobs: more than the error word can name")
    ids = {s.name: i for i, s in enumerate(stages)}
    pos = {k: p for p, k in enumerate(witness)}
    G = schedule.num_ctas
    starts = [0]
    for lst in schedule.cta_jobs:
        starts.append(starts[-1] + len(lst))
    hdr = HEADER_WORDS + G + 1
    hdr = (hdr + ENTRY_WORDS - 1) // ENTRY_WORDS * ENTRY_WORDS
    n = starts[-1]
    # + one zero entry: a prefetch_next kernel loads the entry after each job's with its own
    # (both at once), the last job's too, whose next is never run
    data = np.zeros(hdr + ENTRY_WORDS * (n + 1), np.int64)
    data[:HEADER_WORDS] = (TABLE_MAGIC, G, len(stages), n)
    data[HEADER_WORDS:HEADER_WORDS + G + 1] = starts
    e = 0
    for lst in schedule.cta_jobs:
        for i, key in enumerate(lst):
            if key[1] >= 2**31:
                raise LinkError(f"job {job_name(key)}: index over int32")
            prio = PRIO_MAX_JOB - pos[key]
            data[hdr + ENTRY_WORDS * e: hdr + ENTRY_WORDS * (e + 1)] = (
                ids[key[0]], key[1], prio - (1 << 32) if prio >= 1 << 31 else prio,
                int(i == len(lst) - 1))
            e += 1
    return ScheduleTable(data.astype(np.int32), schedule, witness, ids)


# ---------------------------------------------------------------------------- job environment

class JobEnv:
    """What the linker hands a stage body (directly, or wrapped by the `io` factory):

    k, job (uniform i32), stage (name), tag (uniform u32), arena (uniform pointer),
    args (namespace of the stage's declared kernel_args), poll_bound,
    ok (uniform i1: this wave has not failed), fail(timed_out, what), cta_ok()."""

    def __init__(self, linker: "_Builder", k, stage, stage_id: int, job, prio):
        self._l = linker
        self.k = k
        self.stage = stage.name
        self.stage_id = stage_id
        self.job = job
        # read again at the job's start (DSL reload_arg), not the kernel's copies: a value a
        # job builds from them (an expected word, a region's address) is then per job, and
        # LLVM cannot hoist it out of the job loop into registers held across every stage
        self.tag = k.reload_arg("tag")
        self.arena = k.reload_arg("arena")
        self.poll_bound = linker.poll_bound
        self.waves = k.W
        self._prio = prio
        declared = linker.stage_args[stage.name]
        self.args = SimpleNamespace(**{n: getattr(k.args, n) for n in declared})
        # the running CTA, for the linker's own records (timelines, diagnostics); a stage's
        # math must not depend on it, which is why k.cta_id() is refused inside a body
        self.cta = linker.cta

    def phase(self, i: int):
        """Mark the end of the job's phase i (0 .. PHASE_SLOTS-1; wave 0's clock) in a
        timeline kernel: `time_layers --timeline` prints each stage's median phase ends, so
        a slow job shows which of its parts is slow. No code otherwise."""
        if not 0 <= i < PHASE_SLOTS:
            raise DSLError(f"phase {i}: a job has phase marks 0 .. {PHASE_SLOTS - 1}")
        if self._l.timeline:
            self._l.stamp(self._l.entry, 2 + i)

    @property
    def timing(self) -> bool:
        """Whether this is a timeline kernel: a stage adds its cycle accounts only then."""
        return self._l.timeline

    @property
    def lds_prefetched(self):
        """Uniform i1: this job's constant inputs are already on their way into its LDS
        (its stage's prefetch_lds ran for it before the pdl wait), or None where no stage of
        the launch does that (a plain launch: always ask for them)."""
        v = self._l.lds_prefetched
        return None if v is None else v.get().ne(0)

    def tally(self, i: int, value):
        """Add `value` (uniform u64: e.g. a wave's clocks in one part of its loop, from
        k.cycles()) from every wave into the job's tally i (0 .. TALLY_SLOTS-1) in a timeline
        kernel: `time_layers --timeline` prints each stage's median per wave. No code
        otherwise."""
        if not 0 <= i < TALLY_SLOTS:
            raise DSLError(f"tally {i}: a job has tallies 0 .. {TALLY_SLOTS - 1}")
        if self._l.timeline:
            k = self.k
            k.atomic("add", k.args.timeline, self._l.entry * TIMELINE_WORDS + TALLY_WORD0 + i,
                     k.cast(value, u64), mask=k.lane_id().eq(0), order="relaxed",
                     scope="device")

    @property
    def ok(self):
        """Uniform i1: this wave has not recorded a failure."""
        return self._l.failed.get().eq(0)

    def fail(self, timed_out, what: str):
        """If `timed_out` (uniform i1): record `what` in the error word and mark the CTA
        failed (later polls and publishes of the CTA are masked off, later jobs skipped)."""
        k = self.k
        code = self._l.what_code(what)
        with k.if_(timed_out):
            word = (k.cast(self._prio, u64) << 32) | k.const(code, u64)
            k.atomic("max", k.args.err, 0, word, order="relaxed", scope="device")
            self._l.failed.set(1)
            if self._l.lds_flag is not None:
                k.store(self._l.lds_flag, 0, k.const(1, u32))

    def cta_ok(self):
        """Uniform i1, equal on every wave of the CTA: no wave of the CTA has failed. With
        several waves this is a CTA-wide agreement (two barriers): call it from every wave."""
        self._l.agree()
        return self.ok


def _lds_prefetches(stage) -> bool:
    """Whether `stage` copies its CTA's first job's constant inputs into LDS before a pdl
    wait (Stage.prefetch_lds, switched on by its lds_prefetch())."""
    return hasattr(stage, "prefetch_lds") and bool(getattr(stage, "lds_prefetch", lambda: False)())


# ------------------------------------------------------------------------------------ linker

@dataclass(eq=False)
class LinkedKernel:
    name: str
    stages: list
    kernel: object  # ir.Kernel
    target: str
    waves: int
    poll_bound: int
    whats: list = field(default_factory=list)  # error detail strings, by code - 1
    timeline: bool = False  # the kernel records per-entry timestamps (TIMELINE_ARG)

    @property
    def abi(self) -> ABI:
        return self.kernel.abi

    @property
    def stage_ids(self) -> dict:
        return {s.name: i for i, s in enumerate(self.stages)}

    def table(self, schedule: Schedule, graph: JobGraph | None = None,
              max_resident_ctas: int | None = None) -> ScheduleTable:
        return make_table(self.stages, schedule, graph, max_resident_ctas)

    @staticmethod
    def error_word() -> np.ndarray:
        return np.zeros(1, np.uint64)

    @staticmethod
    def timeline_buffer(table: "ScheduleTable") -> np.ndarray:
        """A zeroed timestamp buffer for a timeline kernel: TIMELINE_WORDS u64 per entry."""
        return timeline_buffer(table)

    def args(self, *, arena, table, err, tag: int, **buffers) -> dict:
        """The kernel's arguments by ABI name (table: a ScheduleTable or its data). A timeline
        kernel also takes `timeline=` (see `timeline_buffer`)."""
        if not isinstance(tag, (int, np.integer)) or isinstance(tag, bool) or not 1 <= tag < 2**32:
            raise ValueError(f"tag {tag!r} must be an int in 1 .. 2**32-1 (0 means 'never written')")
        data = table.data if isinstance(table, ScheduleTable) else table
        args = dict(arena=arena, sched=data, err=err, tag=int(tag))
        names = self.abi.names()
        derived = {s.name for s in derived_args(self.abi)}  # the launchers fill these
        extra = sorted(set(buffers) - set(names) | (set(buffers) & derived))
        missing = [n for n in names if n not in args and n not in buffers and n not in derived]
        if extra or missing:
            raise ValueError(f"launch {self.name}: buffers {extra} are not in the ABI and {missing} "
                             f"are missing; the ABI is {names}")
        args.update(buffers)
        return args

    def decode_error(self, err, table: ScheduleTable, tag: int | None = None) -> LaunchFailed | None:
        """None if the error word is clear, else the LaunchFailed it describes."""
        w = int(np.asarray(err).reshape(-1).view(np.uint64)[0])
        if w == 0:
            return None
        prio, code = w >> 32, w & 0xFFFFFFFF
        what = self.whats[code - 1] if 1 <= code <= len(self.whats) else f"unknown code {code}"
        at = f"launch {self.name!r}" + (f" (tag {tag})" if tag is not None else "")
        if prio == PRIO_TABLE_MISMATCH:
            return LaunchFailed(f"{at}: {what} (grid launched vs the table's {table.grid})",
                                what=what, word=w)
        p = PRIO_MAX_JOB - prio
        if not 0 <= p < len(table.witness):
            return LaunchFailed(f"{at}: error word {w:#x} names no job of the table", what=what,
                                word=w)
        key = table.witness[p]
        cta, position = table.schedule.placement[key]
        # a stage may also report bad input through the same word: fail(cond, "invalid input...")
        why = f"rejected {what}" if what.startswith(INVALID_INPUT) else f"timed out waiting for {what}"
        return LaunchFailed(
            f"{at}: stage {key[0]!r} job {key[1]} (CTA {cta}, position {position}) {why}; "
            f"the CTA skipped its remaining jobs",
            stage=key[0], job=key[1], cta=cta, what=what, word=w)

    def check(self, err, table: ScheduleTable, tag: int | None = None):
        """Raise the LaunchFailed the error word describes, if any."""
        e = self.decode_error(err, table, tag)
        if e is not None:
            raise e

    def run_interp(self, args: dict, table: ScheduleTable, *, mode="inorder", seed=0,
                   on_stall="raise", max_steps=50_000_000):
        """Run in the interpreter on the table's grid; raise LaunchFailed from the error word."""
        from . import interp
        interp.run(self.kernel, args, grid=table.grid, mode=mode, seed=seed, on_stall=on_stall,
                   max_steps=max_steps)
        self.check(args["err"], table, args.get("tag"))
        return args


def timeline_buffer(table: ScheduleTable) -> np.ndarray:
    """A zeroed timestamp buffer for a timeline kernel: TIMELINE_WORDS u64 per table entry."""
    return np.zeros(TIMELINE_WORDS * max(1, int(table.data[3])), np.uint64)


@dataclass(frozen=True)
class TimelineRecord:
    cta: int
    position: int  # in the CTA's list
    stage: str
    job: int
    start: int  # clock ticks (ns on NVIDIA); 0 = never recorded (the job was skipped)
    end: int
    phases: tuple = ()  # PHASE_SLOTS marks (ticks; 0 = the job stamped none there)
    tallies: tuple = ()  # TALLY_SLOTS sums over the job's waves (JobEnv.tally; 0 = none)


def timeline_records(table: ScheduleTable, stamps, stage_names: Sequence[str] | None = None
                     ) -> list[TimelineRecord]:
    """Decode a timeline buffer: one record per table entry whose job ran (start != 0)."""
    ts = np.asarray(stamps).reshape(-1).view(np.uint64)
    d = table.data
    G = int(d[1])
    starts = d[HEADER_WORDS:HEADER_WORDS + G + 1]
    hdr = (HEADER_WORDS + G + 1 + ENTRY_WORDS - 1) // ENTRY_WORDS * ENTRY_WORDS
    ids = {i: n for n, i in table.stage_ids.items()}
    if stage_names is not None:
        ids = dict(enumerate(stage_names))
    out = []
    for c in range(G):
        for p, e in enumerate(range(int(starts[c]), int(starts[c + 1]))):
            w = TIMELINE_WORDS * e
            if w + TIMELINE_WORDS > ts.size:
                raise ValueError(f"timeline buffer of {ts.size} stamps is too short for entry {e}")
            t0, t1 = int(ts[w]), int(ts[w + 1])
            if t0 == 0:
                continue
            sid, job = int(d[hdr + ENTRY_WORDS * e]), int(d[hdr + ENTRY_WORDS * e + 1])
            out.append(TimelineRecord(c, p, ids.get(sid, str(sid)), job, t0, t1,
                                      tuple(int(x) for x in ts[w + 2:w + TALLY_WORD0]),
                                      tuple(int(x) for x in ts[w + TALLY_WORD0:w + TIMELINE_WORDS])))
    return out


class _Builder:
    def __init__(self, stages, waves, poll_bound, io, timeline=False, pdl=False,
                 lds_overlay=False, prefetch_next=False):
        self.timeline = timeline
        self.pdl = pdl
        self.prefetch_next = prefetch_next
        self.lds_overlay = lds_overlay
        self.stage_lds = (0, 0)  # the stages' LDS bytes [lo, hi): poisoned between jobs
        self.stages = stages
        self.waves = waves
        self.poll_bound = poll_bound
        self.io = io
        self.whats: list[str] = []
        self.stage_args: dict[str, list[str]] = {}
        self.failed = None
        self.lds_flag = None
        self.lds_prefetched = None  # (kernel(): a uniform var where a stage prefetches into LDS)
        self.k = None
        self.entry = None  # the running job's table entry (timeline kernels only)

    def what_code(self, what: str) -> int:
        if not isinstance(what, str) or not what:
            raise DSLError("fail(..., what): describe what timed out in a non-empty string")
        if what not in self.whats:
            self.whats.append(what)
        return self.whats.index(what) + 1

    def agree(self):
        """Make `failed` CTA-uniform (several waves): barrier, read the LDS flag, barrier.
        Between the two barriers no wave is in a job: the stages' LDS is poisoned there for
        the interpreter (op lds_poison, nothing on hardware), so a job that reads LDS it did
        not write itself, which the overlay would hand it from another stage, reads poison."""
        k = self.k
        lo, hi = self.stage_lds
        if self.lds_flag is None:
            k.lds_poison(lo, hi - lo)  # one wave: it has finished the job
            return
        k.barrier()
        k.lds_poison(lo, hi - lo)
        f = k.load(self.lds_flag, 0, u32)
        self.failed.set(self.failed.get() | f)
        k.barrier()

    def stage_bodies(self, k, sid, job, prio):
        """Each stage's body under `if sid == its id`. With lds_overlay every stage's LDS
        starts at the same byte (a CTA runs one job at a time and agree's barriers separate
        its jobs, so no two stages' allocations are live together): the kernel's LDS is the
        largest stage's, not their sum. Stacked (the default here), each stage keeps its own
        bytes; either way agree poisons them all between jobs for the interpreter."""
        base = k.lds_mark()
        top = base
        for s_id, st in enumerate(self.stages):
            if self.lds_overlay:
                k.lds_rewind(base)
            with k.if_(sid.eq(s_id)):
                env = JobEnv(self, k, st, s_id, job, prio)
                with k.stage_scope(st.name):
                    st.body(k, job, self.io(env) if self.io else env)
            top = max(top, k.lds_mark())
        k.lds_rewind(top)
        self.stage_lds = (base, top)

    def stamp(self, e, which: int):
        """Lane 0 of wave 0 stores the clock into timeline[TIMELINE_WORDS*e + which]."""
        k = self.k
        t = k.clock()
        with k.if_(k.wave_id().eq(0)):
            k.store(k.args.timeline, e * TIMELINE_WORDS + which, t, mask=k.lane_id().eq(0))

    @staticmethod
    def cta_entries(k, hdr):
        """(lo, hi, base): this CTA's table entries are lo .. hi-1, entry i at word
        base + i * ENTRY_WORDS (the entries start after the header and the per-CTA bounds,
        aligned to an entry)."""
        c = k.cta_id()
        lo = k.load(k.args.sched, c + HEADER_WORDS, i32)
        hi = k.load(k.args.sched, c + (HEADER_WORDS + 1), i32)
        base = (k.extract(hdr, 1) + (HEADER_WORDS + 1 + ENTRY_WORDS - 1)) \
            / ENTRY_WORDS * ENTRY_WORDS
        return lo, hi, base

    def prefetch_hooks(self):
        """(stage id, stage) of the stages that can ask the L2 for a job's constant inputs
        (Stage.prefetch)."""
        return [(s_id, st) for s_id, st in enumerate(self.stages) if hasattr(st, "prefetch")]

    def prefetch_job(self, k, sid, job, first=False):
        """Job (sid, job) asks the L2 for its constant inputs, if its stage can; the CTA's
        `first` job before a pdl wait copies them into its LDS where its stage does that
        (Stage.prefetch_lds), and `lds_prefetched` tells its body so."""
        for s_id, st in self.prefetch_hooks():
            args = SimpleNamespace(**{n: getattr(k.args, n) for n in self.stage_args[st.name]})
            with k.if_(sid.eq(s_id)), k.stage_scope(st.name):
                if first and self.lds_prefetched is not None and _lds_prefetches(st):
                    st.prefetch_lds(k, job, args)
                    self.lds_prefetched.set(1)
                else:
                    st.prefetch(k, job, args)

    def prefetch_first_job(self, k, hdr):
        """pdl (before the wait) or prefetch_next: the CTA's first job asks the L2 for its
        constant inputs (Stage.prefetch); the schedule table is constant, so it may be read
        before a pdl wait."""
        lo, hi, base = self.cta_entries(k, hdr)
        if not self.prefetch_hooks():
            return
        with k.if_(lo < hi):
            ent = k.load(k.args.sched, base + lo * ENTRY_WORDS, i32, ENTRY_WORDS)
            self.prefetch_job(k, k.extract(ent, 0), k.extract(ent, 1), first=self.pdl)

    def kernel(self, k):
        self.k = k
        a = k.args
        if self.pdl:  # the next launch may start its CTAs now (they stop at their wait)
            k.grid_dep_launch()
        self.failed = k.uniform_var(0, u32, name="failed")
        # 1 while the CTA's first job runs if its constant inputs were copied into its LDS
        # before the pdl wait (Stage.prefetch_lds); None where no stage does that
        self.lds_prefetched = (k.uniform_var(0, i32, name="lds_prefetched")
                               if self.pdl and any(_lds_prefetches(st) for st in self.stages)
                               else None)
        if k.W > 1:
            self.lds_flag = k.lds("link_failed", u32, 1)
            with k.if_(k.wave_id().eq(0)):
                k.store(self.lds_flag, 0, k.const(0, u32))
            k.barrier()
        hdr = k.load(a.sched, 0, i32, 4)
        fits = (k.extract(hdr, 0).eq(TABLE_MAGIC) & k.extract(hdr, 1).eq(k.num_ctas())
                & k.extract(hdr, 2).eq(len(self.stages)))
        if self.pdl or self.prefetch_next:
            # (pdl: everything after this reads or writes what the launch before may still use)
            with k.if_(fits):
                self.prefetch_first_job(k, hdr)
        if self.pdl:
            k.grid_dep_wait()
        with k.if_else(fits) as (good, bad):
            with good:
                self.cta = k.cta_id()
                lo, hi, base = self.cta_entries(k, hdr)
                # only the entry's word offset and the failed flag live across the jobs (no
                # loop bound, no table base): every register is left to the stage bodies
                at = k.uniform_var(base + lo * ENTRY_WORDS, i32, name="entry")
                more = k.uniform_var(k.cast(lo < hi, u32), name="more")
                with k.while_(lambda: more.get().eq(1)):
                    w = at.get()
                    ent = k.load(a.sched, w, i32, ENTRY_WORDS)
                    if self.prefetch_next and self.prefetch_hooks():
                        # the next entry's load travels with this one's (the table's last
                        # entry is followed by a zero one): the next job's constant inputs
                        # are asked of the L2 while this job runs
                        nxt = k.load(a.sched, w + ENTRY_WORDS, i32, ENTRY_WORDS)
                        with k.if_(k.extract(ent, LAST_WORD).eq(0)):
                            self.prefetch_job(k, k.extract(nxt, 0), k.extract(nxt, 1))
                    e = (w - base) / ENTRY_WORDS if self.timeline else None
                    self.entry = e
                    sid, job = k.extract(ent, 0), k.extract(ent, 1)
                    prio = k.cast(k.extract(ent, 2), u32)
                    if self.timeline:
                        self.stamp(e, 0)
                    self.stage_bodies(k, sid, job, prio)
                    if self.timeline:
                        self.stamp(e, 1)
                    self.agree()
                    if self.lds_prefetched is not None:  # (the first job's alone)
                        self.lds_prefetched.set(0)
                    last = k.load(a.sched, w + LAST_WORD, i32)
                    at.set(w + ENTRY_WORDS)
                    more.set(k.cast(last.eq(0) & self.failed.get().eq(0), u32))
            with bad:
                word = k.const((PRIO_TABLE_MISMATCH << 32) | self.what_code(WHAT_TABLE_MISMATCH), u64)
                k.atomic("max", a.err, 0, word, order="relaxed", scope="device")


def link_abi(stages: Sequence, timeline: bool = False) -> tuple[ABI, dict]:
    """The one ABI of the linked kernel: the linker's arguments, then every stage's declared
    buffers and scalars (merged by name; a name declared twice must agree), then, with
    `timeline`, the timestamp buffer."""
    merged: dict = {}
    per_stage: dict = {}
    for st in stages:
        decl = dict(st.kernel_args())
        per_stage[st.name] = list(decl)
        for n, kind in decl.items():
            if n in LINK_ARGS or (timeline and n == TIMELINE_ARG):
                raise LinkError(f"stage {st.name!r}: argument name {n!r} is the linker's own")
            if not isinstance(kind, (Ptr, Scalar)):
                raise LinkError(f"stage {st.name!r}: argument {n!r} must be Ptr(...) or Scalar(...)")
            if n in merged and merged[n] != kind:
                raise LinkError(f"argument {n!r} declared as {merged[n]} and as {kind} "
                                f"(stage {st.name!r})")
            merged[n] = kind
    if timeline:
        merged[TIMELINE_ARG] = Ptr(u64)
    # the schedule table is the build's: the same every launch (read before a pdl wait)
    abi = ABI(arena=Ptr(u8), sched=Ptr(i32, readonly=True, constant=True), err=Ptr(u64),
              tag=Scalar(u32), **merged)
    return abi, per_stage


def link(name: str, stages: Sequence, *, target: str = "interp", waves: int = 1,
         wave_size: int | None = None, io: Callable | None = None,
         poll_bound: int = DEFAULT_POLL_BOUND, timeline: bool = False,
         pdl: bool = False, lds_overlay: bool = False,
         prefetch_next: bool = False, poll_backoff: int = 1) -> LinkedKernel:
    """Build the persistent kernel of `stages` for `target`. `io(env)` wraps the JobEnv a
    body receives (e.g. a mailbox helper bound to the arena layout); without it the body
    gets the JobEnv itself. `timeline` adds the per-entry timestamp buffer (module doc).
    `pdl`: launchable with programmatic dependent launch: grid_dep_launch first, then the
    CTA's first job's Stage.prefetch (constant buffers into the L2), then grid_dep_wait
    before anything else (sm_90a; on AMD the ops lower to nothing). `lds_overlay`: the
    stages' LDS allocations share one range (`_Builder.stage_bodies`). `prefetch_next`: the
    CTA's first job asks the L2 for its constant inputs at the start, and every job for the
    next one's before it runs (Stage.prefetch; values never change with it). `poll_backoff`:
    the pause between every wait's polls, in the chip's shortest (ir.Kernel.poll_backoff;
    values never change with it)."""
    stages = list(stages)
    _check_stage_names(stages)
    if not stages:
        raise LinkError("nothing to link: no stages")
    if poll_bound < 1:
        raise LinkError(f"poll bound {poll_bound} must be at least 1")
    abi, per_stage = link_abi(stages, timeline)
    b = _Builder(stages, waves, poll_bound, io, timeline, pdl, lds_overlay, prefetch_next)
    b.stage_args = per_stage
    kern = build_kernel(name, b.kernel, abi=abi, target=target, waves=waves, wave_size=wave_size,
                        poll_backoff=poll_backoff)
    return LinkedKernel(name, stages, kern, kern.target, waves, poll_bound, list(b.whats),
                        bool(timeline))


def schedule_stages(stages: Sequence, ctas: int, cost=None) -> tuple[JobGraph, Schedule]:
    """Convenience: the job graph and a critical-path list schedule on `ctas` CTAs."""
    g = job_graph(stages)
    return g, list_schedule(g, ctas, cost)


__all__ = ["link", "link_abi", "job_graph", "make_table", "schedule_stages", "LinkedKernel",
           "ScheduleTable", "JobEnv", "LinkError", "LaunchFailed", "LINK_ARGS",
           "DEFAULT_POLL_BOUND", "TABLE_MAGIC", "TIMELINE_ARG", "TimelineRecord",
           "timeline_buffer", "timeline_records"]
