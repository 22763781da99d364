"""The scheduler: places the jobs of a launch on persistent CTAs (DESIGN.md section 4).

Input is a generic job graph, independent of the IR: one `JobNode` per job, keyed by
`(stage_name, index)`, with a cost estimate (bytes moved, flops, LDS bytes) and the keys of
the jobs it waits for. The output is a `Schedule`: for every CTA the ordered list of jobs it
runs, each job's CTA and position, and estimated start/end times under a `CostModel` (or a
`ProfiledCost`: the durations a timeline measured, monokernel.profile).

Algorithm (list scheduling: earliest start first, then critical path, "ETF"/"HLFET"):

1. Every job gets a duration from the cost model and a *rank*: the longest path, by duration,
   from the start of the job to the end of the graph (its own duration included).
2. Repeatedly take, among the jobs whose dependencies have all been placed, the one that
   can start earliest, and among those the one of highest rank (ties: stage order, then
   index) -- policy "earliest_start", the default; "critical_path" takes the highest rank
   whatever its start, which queued cheap early jobs behind long late ones on the H200 --
   and append it to the CTA that can start it earliest: start = max(CTA free, latest end
   of its dependencies). Among the CTAs that can start it at that time the one that became free last is taken (best fit), so CTAs that
   fell idle early stay available for jobs that are ready early.
3. The order in which jobs are taken is ONE global topological order of the graph; every
   CTA's list is a subsequence of it.
4. A `lead` job (one with work to do before its first wait) gets a CTA reserved for it from
   the start (the highest-numbered ones, at most all CTAs but one): it is that CTA's first
   job, so its early work runs at time 0 instead of behind other jobs (the cost model sees
   only its dependencies: on the H200 the fused `index` launch's ix_key started at 29 us,
   behind four jobs, and spent 7 us on 1/rms(x) before its first wait; bench/NOTES.md v8).
   Other jobs may follow it on that CTA. It is still taken in the global order.

Why that is the deadlock-freedom proof. All CTAs of a launch are co-resident (one per
compute unit, DESIGN.md section 3), each runs its list in order, and a job blocks only until
its dependencies have published. Draw an edge u -> v when v waits for u: dependency edges,
and program-order edges between consecutive jobs of one CTA. If the union is acyclic, take
the first unfinished job in a topological order of it: every job it waits for (its
dependencies and its CTA predecessor) comes earlier, so is finished, so its CTA has reached
it and it can run: the launch always progresses. Because each CTA list follows one global
topological order of the dependencies, the union is acyclic by construction; but
`check_deadlock_free` checks it anyway, for any schedule (built here, edited, or loaded from
a manifest), and names the cycle if there is one. Co-residency is the other half of the
argument: a grid larger than the number of compute units could leave a producer CTA waiting
for a slot held by a polling consumer, so `check_deadlock_free(..., max_resident_ctas=N)`
checks that too.

`simulate` plays a schedule (each CTA runs its list in order; a job starts when its
dependencies are done and its CTA is free) and returns the makespan, raising `DeadlockError`
on a stall. With the schedule's own cost model it reproduces the estimated times exactly;
with other durations (jitter) it shows the schedule is deadlock-free under any timing.
"""
from __future__ import annotations

import bisect
import heapq
import json
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from .targets import Target

Key = tuple  # (stage_name: str, index: int)
NS_PER_US = 1e3  # the schedule's times are ns; timelines and tables show us


def _norm_key(k, what: str = "job key") -> Key:
    """A job key as a (str, int) tuple (JSON gives lists back)."""
    if isinstance(k, (tuple, list)) and len(k) == 2 and isinstance(k[0], str):
        idx = k[1]
        if isinstance(idx, bool) or not isinstance(idx, int):
            try:
                if int(idx) == idx:
                    idx = int(idx)
                else:
                    raise ValueError
            except (TypeError, ValueError):
                raise ValueError(f"{what} {k!r}: the index must be an int") from None
        return (k[0], int(idx))
    raise ValueError(f"{what} {k!r} is not a (stage_name, index) pair")


def job_name(key: Key) -> str:
    """How a job is written in messages and tables: `stage[index]`."""
    return f"{key[0]}[{key[1]}]"


# --------------------------------------------------------------------------------------------
# Input
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JobNode:
    """One job of a stage: `key = (stage_name, index)`, its cost estimate and the keys of the
    jobs whose results it waits for."""
    key: Key
    cost_bytes: float = 0
    cost_flops: float = 0
    lds_bytes: int = 0
    deps: tuple = ()
    # a job that does real work before its first wait (ix_key: the rows' 1/rms(x) from the
    # inputs): list_schedule gives it a CTA of its own, where it is the first job, so that
    # work runs while its producers do (module doc, step 4)
    lead: bool = False

    def __post_init__(self):
        object.__setattr__(self, "key", _norm_key(self.key))
        object.__setattr__(self, "deps", tuple(
            _norm_key(d, f"dependency of {job_name(self.key)}") for d in self.deps))
        for f in ("cost_bytes", "cost_flops", "lds_bytes"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ValueError(f"job {job_name(self.key)}: {f} = {v!r} must be a finite number >= 0")

    @property
    def name(self) -> str:
        return job_name(self.key)


class JobGraph:
    """The jobs of one launch, with the stage order (used to break ties and to print).

    Validates: unique keys, every dependency names a job of the graph, no cycle. Raises a
    ValueError naming the offending job(s).
    """

    def __init__(self, nodes: Iterable[JobNode], stage_order: Sequence[str] | None = None):
        self.nodes: dict[Key, JobNode] = {}
        for n in nodes:
            if not isinstance(n, JobNode):
                raise ValueError(f"{n!r} is not a JobNode")
            if n.key in self.nodes:
                raise ValueError(f"duplicate job {n.name}")
            self.nodes[n.key] = n
        seen_stages: list[str] = []
        for k in self.nodes:
            if k[0] not in seen_stages:
                seen_stages.append(k[0])
        if stage_order is None:
            stage_order = seen_stages
        stage_order = list(stage_order)
        if len(set(stage_order)) != len(stage_order):
            raise ValueError(f"stage order {stage_order} names a stage twice")
        missing = [s for s in seen_stages if s not in stage_order]
        if missing:
            raise ValueError(f"stage(s) {missing} have jobs but are not in the stage order {stage_order}")
        self.stage_order: list[str] = stage_order
        self._stage_rank = {s: i for i, s in enumerate(stage_order)}
        # dependencies must exist
        for n in self.nodes.values():
            for d in n.deps:
                if d not in self.nodes:
                    raise ValueError(f"job {n.name} depends on unknown job {job_name(d)}")
                if d == n.key:
                    raise ValueError(f"job {n.name} depends on itself (cyclic graph)")
        self.succs: dict[Key, list[Key]] = {k: [] for k in self.nodes}
        for n in self.nodes.values():
            for d in dict.fromkeys(n.deps):
                self.succs[d].append(n.key)
        self.topo = self._topological_order()

    def sort_key(self, key: Key):
        return (self._stage_rank[key[0]], key[1])

    def _topological_order(self) -> list[Key]:
        indeg = {k: len(set(n.deps)) for k, n in self.nodes.items()}
        ready = [self.sort_key(k) + (k,) for k, d in indeg.items() if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            k = heapq.heappop(ready)[-1]
            order.append(k)
            for s in self.succs[k]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, self.sort_key(s) + (s,))
        if len(order) != len(self.nodes):
            left = {k for k, d in indeg.items() if d > 0}
            cyc = _find_cycle(left, lambda k: [d for d in self.nodes[k].deps if d in left])
            raise ValueError("cyclic job graph: " + " -> ".join(job_name(k) for k in cyc)
                             + f" -> {job_name(cyc[0])}")
        return order

    def __len__(self):
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes.values())

    def __getitem__(self, key) -> JobNode:
        return self.nodes[_norm_key(key)]

    def __contains__(self, key) -> bool:
        try:
            return _norm_key(key) in self.nodes
        except ValueError:
            return False


def _find_cycle(nodes: set, preds: Callable[[Key], list]) -> list:
    """A cycle among `nodes`, every one of which has a predecessor in `nodes`; returned in
    forward order (each element waits for the one before it, the first for the last)."""
    start = min(nodes, key=lambda k: (str(k[0]), k[1]))
    pos: dict = {}
    path: list = []
    k = start
    while k not in pos:
        pos[k] = len(path)
        path.append(k)
        k = preds(k)[0]
    cyc = path[pos[k]:]  # each element is waited on... walked backwards: path[i+1] is a pred of path[i]
    cyc.reverse()  # forward: cyc[i] must finish before cyc[i+1]
    return cyc


# --------------------------------------------------------------------------------------------
# Cost model
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Estimated duration of a job on one CTA, in nanoseconds:

        duration = job_overhead_ns + cost_bytes / bytes_per_ns + cost_flops / flops_per_ns

    `bytes_per_ns` is one CTA's share of the device's memory bandwidth when every CTA streams
    (device bandwidth / compute units); `flops_per_ns` one CTA's share of the dense MMA rate.
    Decode jobs stream weights and caches, so the byte term dominates; the flop term matters
    for the few compute-heavy jobs. Memory and math are added, not overlapped: an upper
    estimate that keeps the model monotone in both. Only the ratios between jobs steer the
    schedule; the absolute figures are for reading tables.
    """
    bytes_per_ns: float
    flops_per_ns: float
    job_overhead_ns: float = 0.0
    name: str = "custom"

    def __post_init__(self):
        if not (self.bytes_per_ns > 0 and self.flops_per_ns > 0 and self.job_overhead_ns >= 0):
            raise ValueError(f"cost model {self}: rates must be > 0 and the overhead >= 0")

    def duration(self, job: JobNode) -> float:
        return self.job_overhead_ns + job.cost_bytes / self.bytes_per_ns + job.cost_flops / self.flops_per_ns

    @staticmethod
    def for_target(t: Target | str) -> "CostModel":
        """Per-CTA shares of each chip's figures.

        gfx950 (MI355X): 8.0 TB/s HBM3E, 5.0 PFLOP/s dense FP8, 256 CUs (datasheet peaks).
        gfx942 (MI300X): 5.3 TB/s HBM3, 2.6 PFLOP/s dense FP8, 304 CUs (datasheet peaks).
        sm_90a (H200): 4.25 TB/s and 1280 TFLOP/s FP8, the ceilings measured as DESIGN.md
        section 8 describes, 132 SMs.
        interp: the gfx950 figures (the interpreter's default grid is small, but the relative
        costs are what steer the order).
        """
        from .targets import target as _target
        t = _target(t)
        figs = {"gfx950": (8.0e12, 5.0e15, 256), "gfx942": (5.3e12, 2.6e15, 304),
                "sm_90a": (4.25e12, 1.28e15, 132), "interp": (8.0e12, 5.0e15, 256)}
        bw, fl, cus = figs[t.name]
        return CostModel(bw / cus / 1e9, fl / cus / 1e9, 0.0, t.name)

    def to_json(self) -> dict:
        return {"name": self.name, "bytes_per_ns": self.bytes_per_ns,
                "flops_per_ns": self.flops_per_ns, "job_overhead_ns": self.job_overhead_ns}

    @staticmethod
    def from_json(d: Mapping) -> "CostModel":
        return CostModel(float(d["bytes_per_ns"]), float(d["flops_per_ns"]),
                         float(d.get("job_overhead_ns", 0.0)), str(d.get("name", "custom")))


DEFAULT_COST = CostModel.for_target("gfx950")


@dataclass(frozen=True)
class ProfiledCost:
    """Measured job durations (ns, by job key) in the cost model's place, `base` for jobs
    the profile lacks: a profile-guided schedule. The byte/flop model misjudges the
    latency-bound jobs most (an H100 timeline of the fused index r8: ix_key modelled 4 us,
    18.6 measured; front_kv 0.7 against ~2.5 of work; bench/NOTES.md v38), and the list
    scheduler then queues a job behind one it thinks short. monokernel.profile derives the
    durations from a timeline. Any durations give a deadlock-free schedule (module doc)."""
    durations_ns: tuple  # ((stage, index, ns), ...), sorted: hashable and comparable
    base: CostModel
    source: str = ""  # where the durations were measured (a file name), for manifests

    def __post_init__(self):
        for st, i, ns in self.durations_ns:
            if not (isinstance(ns, (int, float)) and math.isfinite(ns) and ns >= 0):
                raise ValueError(f"profiled duration of {job_name((st, i))} = {ns!r} ns must be "
                                 f"a finite number >= 0")

    @staticmethod
    def of(durations: Mapping[Key, float], base: CostModel, source: str = "") -> "ProfiledCost":
        return ProfiledCost(tuple(sorted((str(k[0]), int(k[1]), float(v))
                                         for k, v in durations.items())), base, source)

    @property
    def name(self) -> str:
        return f"profile {self.source}" if self.source else "profile"

    def duration(self, job: JobNode) -> float:
        ns = self._table.get(job.key)
        return self.base.duration(job) if ns is None else ns

    @property
    def _table(self) -> dict:
        t = self.__dict__.get("_t")
        if t is None:
            t = {(st, i): ns for st, i, ns in self.durations_ns}
            object.__setattr__(self, "_t", t)
        return t

    def to_json(self) -> dict:
        return {"name": self.name, "kind": PROFILE_KIND, "source": self.source,
                "base": self.base.to_json(),
                "durations_ns": [[st, i, ns] for st, i, ns in self.durations_ns]}


PROFILE_KIND = "profile"  # a cost model's JSON "kind": ProfiledCost (absent: CostModel)


def cost_from_json(d: Mapping) -> "CostModel | ProfiledCost":
    """A manifest's cost model back: a CostModel, or a ProfiledCost (its "kind")."""
    if d.get("kind") == PROFILE_KIND:
        return ProfiledCost(tuple((str(st), int(i), float(ns)) for st, i, ns in d["durations_ns"]),
                            CostModel.from_json(d["base"]), str(d.get("source", "")))
    return CostModel.from_json(d)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------

class DeadlockError(ValueError):
    """A schedule whose CTAs can wait on each other forever. `cycle` lists the jobs of one
    wait cycle as (job, cta, position, why, waits_for): `job` (on CTA `cta` at `position`)
    waits for `waits_for`, the job of the previous entry, because of `why` ("dependency" or
    "program order on CTA c"); `stalled` (from `simulate`)
    maps each stuck CTA to (the job at its head, the job it waits for)."""

    def __init__(self, msg: str, cycle=None, stalled=None):
        super().__init__(msg)
        self.cycle = cycle or []
        self.stalled = stalled or {}


@dataclass
class Schedule:
    """Per-CTA ordered job lists plus where and when (estimated) each job runs."""
    num_ctas: int
    cta_jobs: list  # list[list[Key]]: CTA c runs cta_jobs[c] in order
    start: dict = field(default_factory=dict)  # Key -> ns (estimate)
    end: dict = field(default_factory=dict)  # Key -> ns (estimate)
    order: list = field(default_factory=list)  # the global topological order the lists follow
    cost_model: "CostModel | ProfiledCost | None" = None
    policy: str = "critical_path"

    def __post_init__(self):
        self.cta_jobs = [[_norm_key(k) for k in lst] for lst in self.cta_jobs]
        if len(self.cta_jobs) != self.num_ctas:
            raise ValueError(f"schedule has {len(self.cta_jobs)} CTA lists for {self.num_ctas} CTAs")
        self.placement: dict[Key, tuple[int, int]] = {}
        for c, lst in enumerate(self.cta_jobs):
            for p, k in enumerate(lst):
                if k in self.placement:
                    c0, p0 = self.placement[k]
                    raise ValueError(f"job {job_name(k)} is placed twice: CTA {c0} position {p0} "
                                     f"and CTA {c} position {p}")
                self.placement[k] = (c, p)
        self.order = [_norm_key(k) for k in self.order]

    # -- queries ---------------------------------------------------------------------------
    def cta_of(self, key) -> int:
        return self.placement[_norm_key(key)][0]

    def position_of(self, key) -> int:
        return self.placement[_norm_key(key)][1]

    @property
    def makespan(self) -> float:
        return max(self.end.values(), default=0.0)

    @property
    def num_jobs(self) -> int:
        return len(self.placement)

    # -- printing --------------------------------------------------------------------------
    def __str__(self) -> str:
        used = sum(1 for l in self.cta_jobs if l)
        cm = self.cost_model.name if self.cost_model else "none"
        lines = [f"Schedule: {self.num_jobs} jobs on {self.num_ctas} CTAs ({used} used), "
                 f"policy {self.policy}, cost model {cm}, est. makespan {self.makespan / 1e3:.3f} us"]
        w = max([len(job_name(k)) for k in self.placement] + [3])
        lines.append(f"{'cta':>4} {'pos':>4}  {'job':<{w}} {'start_us':>10} {'end_us':>10}")
        for c, lst in enumerate(self.cta_jobs):
            for p, k in enumerate(lst):
                s = self.start.get(k)
                e = self.end.get(k)
                ss = f"{s / 1e3:10.3f}" if s is not None else f"{'-':>10}"
                es = f"{e / 1e3:10.3f}" if e is not None else f"{'-':>10}"
                lines.append(f"{c:>4} {p:>4}  {job_name(k):<{w}} {ss} {es}")
        return "\n".join(lines)

    # -- serialisation ---------------------------------------------------------------------
    def to_json(self) -> dict:
        """A JSON-serialisable dict (keys as [stage, index] lists), for manifests."""
        return {
            "num_ctas": self.num_ctas,
            "policy": self.policy,
            "cost_model": self.cost_model.to_json() if self.cost_model else None,
            "makespan_ns": self.makespan,
            "order": [list(k) for k in self.order],
            "ctas": [[{"job": list(k), "start_ns": self.start.get(k), "end_ns": self.end.get(k)}
                      for k in lst] for lst in self.cta_jobs],
        }

    @staticmethod
    def from_json(d) -> "Schedule":
        if isinstance(d, (str, bytes)):
            d = json.loads(d)
        cta_jobs, start, end = [], {}, {}
        for lst in d["ctas"]:
            row = []
            for e in lst:
                k = _norm_key(e["job"])
                row.append(k)
                if e.get("start_ns") is not None:
                    start[k] = float(e["start_ns"])
                if e.get("end_ns") is not None:
                    end[k] = float(e["end_ns"])
            cta_jobs.append(row)
        cm = cost_from_json(d["cost_model"]) if d.get("cost_model") else None
        return Schedule(int(d["num_ctas"]), cta_jobs, start, end,
                        [_norm_key(k) for k in d.get("order", [])], cm, d.get("policy", "critical_path"))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return (self.num_ctas == other.num_ctas and self.cta_jobs == other.cta_jobs
                and self.start == other.start and self.end == other.end and self.order == other.order
                and self.cost_model == other.cost_model and self.policy == other.policy)


# --------------------------------------------------------------------------------------------
# Scheduling
# --------------------------------------------------------------------------------------------

def ranks(graph: JobGraph, durations: Mapping[Key, float]) -> dict[Key, float]:
    """Longest remaining path (by duration) from the start of each job to the end of the graph."""
    r: dict[Key, float] = {}
    for k in reversed(graph.topo):
        r[k] = durations[k] + max((r[s] for s in graph.succs[k]), default=0.0)
    return r


def list_schedule(graph: JobGraph | Iterable[JobNode], ctas: int | Target,
                  cost: "CostModel | ProfiledCost | None" = None, lds_budget: int | None = None,
                  policy: str = "earliest_start", lead_alone: bool = False) -> Schedule:
    """Place `graph`'s jobs on `ctas` persistent CTAs (an int, or a Target: its CU count, its
    LDS per CTA as the default budget and its cost model).

    policy "critical_path" takes ready jobs by longest remaining path; "earliest_start"
    (the default) takes the ready job that can START first (the earliest-free CTA or its
    dependencies' end, whichever is later), longest remaining path among those that can start
    then: a CTA's list then follows time, so a cheap job that is ready early is never queued
    behind a long job that only becomes runnable later (on the H200, kind `index` under
    critical_path ran the front's kv projection jobs after the scoring jobs that waited on
    the index projections: 380 us for a launch whose parts take ~100; bench/NOTES.md);
    "stage_order" takes them by (stage, index) only: a baseline to compare against.
    `lead_alone`: a lead job's CTA takes no further job until one that waits for the lead
    job is ready (then it is free from the lead's modelled end as usual): the byte model
    cannot see how long a lead job's latency-bound work holds its CTA (the fused index's
    ix_key: modelled 4 us, 12-18 measured on an H100), so nothing else is queued behind it
    (bench/NOTES.md v38: a q-head job behind ix_key set ix_q's last end).
    Raises ValueError for a dependency on an unknown job, a cyclic graph, or a job whose LDS
    bytes exceed the per-CTA budget (naming the job).
    """
    if not isinstance(graph, JobGraph):
        graph = JobGraph(graph)
    if isinstance(ctas, Target):
        t = ctas
        num_ctas = t.num_ctas
        if lds_budget is None:
            lds_budget = t.lds_bytes
        if cost is None:
            cost = CostModel.for_target(t)
    else:
        num_ctas = ctas
    if isinstance(num_ctas, bool) or not isinstance(num_ctas, int) or num_ctas < 1:
        raise ValueError(f"CTA count {num_ctas!r} must be an int >= 1")
    if cost is None:
        cost = DEFAULT_COST
    if policy not in POLICIES:
        raise ValueError(f"unknown scheduling policy {policy!r}")
    if lds_budget is not None:
        for n in graph:
            if n.lds_bytes > lds_budget:
                raise ValueError(f"job {n.name} needs {n.lds_bytes} LDS bytes, over the per-CTA "
                                 f"budget of {lds_budget} bytes")

    dur = {k: cost.duration(n) for k, n in graph.nodes.items()}
    rank = ranks(graph, dur)

    def prio(k):
        if policy != "stage_order":
            return (-rank[k],) + graph.sort_key(k)
        return graph.sort_key(k)

    missing = {k: len(set(n.deps)) for k, n in graph.nodes.items()}
    leads = sorted((k for k, n in graph.nodes.items() if n.lead), key=graph.sort_key)
    reserved = {k: num_ctas - 1 - i for i, k in enumerate(leads[:num_ctas - 1])}
    # CTAs by (free time, index); best fit = the latest-free CTA that is free by `ready_at`.
    # A reserved CTA joins them once its lead job is placed.
    held = set(reserved.values())
    free = [(0.0, c) for c in range(num_ctas) if c not in held]
    parked: dict[Key, tuple] = {}  # lead_alone: lead job -> (its end, its CTA) not yet free
    cta_jobs: list[list[Key]] = [[] for _ in range(num_ctas)]
    start: dict[Key, float] = {}
    end: dict[Key, float] = {}
    order: list[Key] = []
    if policy == "earliest_start":
        take = _EarliestStart(graph, prio, end, free)
    else:
        take = _ByPriority(prio)
    for k, m in missing.items():
        if m == 0:
            take.push(k)
    while take:
        k = take.pop()
        node = graph.nodes[k]
        ready_at = max((end[d] for d in node.deps), default=0.0)
        if k in reserved:
            t_free, c = 0.0, reserved[k]
        else:
            i = bisect.bisect_right(free, (ready_at, math.inf)) - 1
            if i >= 0:
                # free[i] is the latest-free CTA among those free by ready_at; take the lowest
                # index among the ones free at that same time (deterministic).
                t_free = free[i][0]
                i = bisect.bisect_left(free, (t_free, -1))
            else:
                i = 0
            t_free, c = free.pop(i)
        s = max(t_free, ready_at)
        e = s + dur[k]
        start[k], end[k] = s, e
        cta_jobs[c].append(k)
        order.append(k)
        if lead_alone and node.lead:
            parked[k] = (e, c)
        else:
            bisect.insort(free, (e, c))
        for sk in graph.succs[k]:
            missing[sk] -= 1
            if missing[sk] == 0:
                for d in graph.nodes[sk].deps:  # a lead's consumer: its CTA is free again
                    if d in parked:
                        bisect.insort(free, parked.pop(d))
                take.push(sk)
    assert len(order) == len(graph)
    return Schedule(num_ctas, cta_jobs, start, end, order, cost, policy)


POLICIES = ("critical_path", "earliest_start", "stage_order")


class _ByPriority:
    """Ready jobs by priority alone (critical_path, stage_order)."""

    def __init__(self, prio):
        self.prio, self.heap = prio, []

    def push(self, k):
        heapq.heappush(self.heap, self.prio(k) + (k,))

    def pop(self):
        return heapq.heappop(self.heap)[-1]

    def __bool__(self):
        return bool(self.heap)


class _EarliestStart:
    """Ready jobs by earliest possible start, then priority. A job's start is max(its
    dependencies' end, the earliest CTA free time); every job whose dependencies end by that
    CTA time starts then, so those compete by priority alone (`now`), the others wait by
    their dependencies' end (`later`). Jobs are pushed once all their dependencies are placed,
    so the order taken is still one topological order (the deadlock-freedom argument)."""

    def __init__(self, graph, prio, end, free):
        self.graph, self.prio, self.end, self.free = graph, prio, end, free
        self.now, self.later = [], []

    def push(self, k):
        at = max((self.end[d] for d in self.graph.nodes[k].deps), default=0.0)
        heapq.heappush(self.later, (at,) + self.prio(k) + (k,))

    def pop(self):
        cta_free = self.free[0][0]
        while self.later and self.later[0][0] <= cta_free:
            e = heapq.heappop(self.later)
            heapq.heappush(self.now, e[1:])
        if self.now:
            return heapq.heappop(self.now)[-1]
        return heapq.heappop(self.later)[-1]

    def __bool__(self):
        return bool(self.now or self.later)


# --------------------------------------------------------------------------------------------
# Proofs and replay
# --------------------------------------------------------------------------------------------

def _check_cover(schedule: Schedule, graph: JobGraph) -> None:
    for k in schedule.placement:
        if k not in graph.nodes:
            c, p = schedule.placement[k]
            raise ValueError(f"schedule places unknown job {job_name(k)} (CTA {c} position {p})")
    for k in graph.topo:
        if k not in schedule.placement:
            waiters = [job_name(s) for s in graph.succs[k]]
            raise ValueError(f"job {job_name(k)} is on no CTA" +
                             (f": {', '.join(waiters)} would wait for it forever" if waiters else ""))


def _where(schedule: Schedule, k: Key) -> str:
    c, p = schedule.placement[k]
    return f"{job_name(k)} (CTA {c}, position {p})"


def check_deadlock_free(schedule: Schedule, graph: JobGraph | Iterable[JobNode],
                        max_resident_ctas: int | None = None) -> list[Key]:
    """Prove that the co-resident persistent CTAs running `schedule` cannot deadlock: the union
    of the dependency edges and the per-CTA program-order edges is acyclic.

    Returns a witness: a topological order of that union (every job after everything it
    waits for). Raises DeadlockError naming the jobs and CTAs of a wait cycle if there is
    one, and ValueError if the schedule does not place every job of the graph exactly once,
    or uses more CTAs than `max_resident_ctas` (then not all CTAs are co-resident and a
    polling CTA could hold the compute unit a producer needs).
    """
    if not isinstance(graph, JobGraph):
        graph = JobGraph(graph)
    if max_resident_ctas is not None and schedule.num_ctas > max_resident_ctas:
        raise ValueError(f"schedule uses {schedule.num_ctas} CTAs but only {max_resident_ctas} can be "
                         "co-resident: persistent CTAs that poll need every CTA resident")
    _check_cover(schedule, graph)
    # predecessors in the union graph, with why
    preds: dict[Key, dict[Key, str]] = {k: {} for k in graph.nodes}
    for c, lst in enumerate(schedule.cta_jobs):
        for a, b in zip(lst, lst[1:]):
            preds[b][a] = f"program order on CTA {c}"
    for k, n in graph.nodes.items():
        for d in n.deps:
            preds[k][d] = "dependency"  # a dependency is the stronger reason to name
    indeg = {k: len(p) for k, p in preds.items()}
    succs: dict[Key, list[Key]] = {k: [] for k in graph.nodes}
    for k, p in preds.items():
        for a in p:
            succs[a].append(k)
    ready = [graph.sort_key(k) + (k,) for k, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    witness = []
    while ready:
        k = heapq.heappop(ready)[-1]
        witness.append(k)
        for s in succs[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, graph.sort_key(s) + (s,))
    if len(witness) == len(graph):
        return witness
    left = {k for k, d in indeg.items() if d > 0}
    cyc = _find_cycle(left, lambda k: [a for a in preds[k] if a in left])
    # cyc[i] must finish before cyc[i+1]; report "cyc[i+1] waits for cyc[i]"
    cycle, parts = [], []
    for i, k in enumerate(cyc):
        nxt = cyc[(i + 1) % len(cyc)]
        why = preds[nxt][k]
        c, p = schedule.placement[nxt]
        cycle.append((nxt, c, p, why, k))
        parts.append(f"{_where(schedule, nxt)} waits for {_where(schedule, k)} [{why}]")
    ctas = sorted({schedule.placement[k][0] for k in cyc})
    raise DeadlockError(f"deadlock: wait cycle over CTA(s) {ctas}: " + "; ".join(parts),
                        cycle=cycle)


def simulate(schedule: Schedule, graph: JobGraph | Iterable[JobNode],
             durations: Mapping[Key, float] | Callable[[JobNode], float] | CostModel | None = None,
             ) -> float:
    """Play `schedule`: each CTA runs its list in order; a job starts once every dependency has
    finished and its CTA has finished the previous job. Returns the makespan (ns).

    `durations`: None (the schedule's cost model), a CostModel, a mapping key -> ns, or a
    callable JobNode -> ns. Raises DeadlockError if the CTAs stall, naming each stuck CTA,
    the job at its head and the job it waits for; ValueError if the schedule does not place
    every job of the graph exactly once.
    """
    if not isinstance(graph, JobGraph):
        graph = JobGraph(graph)
    _check_cover(schedule, graph)
    if durations is None:
        durations = schedule.cost_model or DEFAULT_COST
    if isinstance(durations, CostModel):
        dur = durations.duration
    elif callable(durations):
        dur = durations
    else:
        dmap = {_norm_key(k): float(v) for k, v in durations.items()}
        dur = lambda n: dmap[n.key]  # noqa: E731

    done: dict[Key, float] = {}
    head = [0] * schedule.num_ctas
    cta_time = [0.0] * schedule.num_ctas
    waiters: dict[Key, list[int]] = {}
    waiting_on: dict[int, Key] = {}
    work = list(range(schedule.num_ctas - 1, -1, -1))
    while work:
        c = work.pop()
        lst = schedule.cta_jobs[c]
        while head[c] < len(lst):
            k = lst[head[c]]
            node = graph.nodes[k]
            blocker = next((d for d in node.deps if d not in done), None)
            if blocker is not None:
                waiters.setdefault(blocker, []).append(c)
                waiting_on[c] = blocker
                break
            waiting_on.pop(c, None)
            s = max([cta_time[c]] + [done[d] for d in node.deps])
            d = float(dur(node))
            if not (d >= 0 and math.isfinite(d)):
                raise ValueError(f"job {node.name}: duration {d!r} must be finite and >= 0")
            e = s + d
            done[k] = e
            cta_time[c] = e
            head[c] += 1
            work.extend(reversed(waiters.pop(k, [])))
    if len(done) != len(graph):
        stalled = {c: (schedule.cta_jobs[c][head[c]], waiting_on[c])
                   for c in range(schedule.num_ctas) if head[c] < len(schedule.cta_jobs[c])}
        parts = [f"CTA {c} stuck at {_where(schedule, h)} waiting for {_where(schedule, b)}"
                 for c, (h, b) in sorted(stalled.items())]
        raise DeadlockError("stall: " + "; ".join(parts), stalled=stalled)
    return max(done.values(), default=0.0)
