"""The critical path of a measured timeline: from the job that ends last back to the
launch's start, each step the job that kept the next one from running sooner.

Why: a persistent launch's time is one chain of waits, and which chain it is moves with
every placement and every stage change (bench/NOTES.md v37-v39: a q-head job queued behind
ix_key set the scoring's start, then did not). The stage table says how long each stage
ran; this says which jobs the launch waited for, read from the same per-job timestamps.

Rules, per job j on the path (its dependencies' last end D, its start s on its CTA):
  - if D > s, j sat waiting for data: the step before it is the dependency that ended last
    ("waits for"); j could run from D (`ready`);
  - else its CTA picked it up only at s: the step before it is the job its CTA ran before it
    ("after"; the gap between the two is the CTA's loop, its table read and its skipped
    entries);
  - else nothing: j starts the path (its CTA's first job, ready when it started).
j's own time is end - ready: its work once it could run, including the signal latency of
its waits (a release seen by a poll), which no job owns.

Times are whatever the records carry (ns from a GPU, ticks from the interpreter); the
caller scales them.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass

from .link import TimelineRecord
from .profile import NS_PER_UNIT, read_jobs_csv
from .schedule import JobGraph, Key, job_name

WAITS, AFTER, START = "waits for", "after", "start"


@dataclass(frozen=True)
class Step:
    """One job of the critical path: `cause` says how it follows the step before it
    (WAITS: its data; AFTER: its CTA; START: nothing before it)."""
    key: Key
    cta: int
    start: float
    ready: float  # max(start, its dependencies' last end)
    end: float
    cause: str

    @property
    def name(self) -> str:
        return job_name(self.key)

    @property
    def own(self) -> float:
        return self.end - self.ready

    @property
    def waited(self) -> float:
        return self.ready - self.start


def critical_path(graph: JobGraph, records, schedule=None) -> list[Step]:
    """The path (first step first) through `records` (objects with cta, position, stage,
    job, start, end: link.TimelineRecord) of the launch whose job graph is `graph`. Jobs the
    records lack (skipped ones) are taken as ended before anything started. A record of a
    job the graph does not have, or (given the launch's `schedule`) at another place in a
    CTA's list than the schedule's, is an error naming it: a timeline of another build or
    placement (a skipped job leaves no record, so a subset of the jobs proves nothing)."""
    recs = {(r.stage, int(r.job)): r for r in records}
    if not recs:
        raise ValueError("critical path: the timeline recorded no job")
    unknown = sorted(k for k in recs if k not in graph.nodes)
    if unknown:
        raise ValueError(f"critical path: the timeline has jobs its launch does not "
                         f"({', '.join(job_name(k) for k in unknown[:4])}): another build's")
    if schedule is not None:
        lists = schedule.cta_jobs
        moved = sorted(k for k, r in recs.items()
                       if not (r.cta < len(lists) and r.position < len(lists[r.cta])
                               and tuple(lists[r.cta][r.position]) == k))
        if moved:
            names = ", ".join(job_name(k) for k in moved[:4]) + (" ..." if len(moved) > 4 else "")
            raise ValueError(f"critical path: the timeline ran jobs where the launch's schedule "
                             f"does not place them ({names}): another build's or placement's "
                             "(--tune)")
    t0 = min(r.start for r in recs.values())
    before = {}  # key -> the job its CTA ran just before it
    by_cta: dict = {}
    for k, r in recs.items():
        by_cta.setdefault(r.cta, []).append((r.position, k))
    for jobs in by_cta.values():
        jobs.sort()
        for (_, prev), (_, k) in zip(jobs, jobs[1:]):
            before[k] = prev

    rank = {key: i for i, key in enumerate(graph.topo)}

    def last_dependency(k):  # the recorded dependency ending last (ties: the earlier one)
        deps = [d for d in graph.nodes[k].deps if d in recs]
        return max(deps, key=lambda d: (recs[d].end, -rank[d]), default=None)

    path = []
    k = max(recs, key=lambda x: (recs[x].end, x))
    seen = set()
    while k is not None and k not in seen:
        seen.add(k)
        r, last = recs[k], last_dependency(k)
        ready = max(r.start, recs[last].end) if last is not None else r.start
        if last is not None and recs[last].end > r.start:
            cause, nxt = WAITS, last
        elif k in before:
            cause, nxt = AFTER, before[k]
        else:
            cause, nxt = START, None
        path.append(Step(k, r.cta, r.start - t0, ready - t0, r.end - t0, cause))
        k = nxt
    return path[::-1]


def path_rows(path: list[Step], scale: float, unit: str) -> list[dict]:
    """Table rows of a path (times x scale in `unit`), for common.table."""
    rows = []
    for i, s in enumerate(path):
        via = "-" if s.cause == START else f"{s.cause} {path[i - 1].name}"
        rows.append({"job": s.name, "cta": s.cta, f"start ({unit})": f"{s.start * scale:.2f}",
                     f"ready ({unit})": f"{s.ready * scale:.2f}",
                     f"end ({unit})": f"{s.end * scale:.2f}",
                     f"own ({unit})": f"{s.own * scale:.2f}", "follows": via})
    return rows


def read_timeline_csv(path) -> tuple:
    """(records, unit) of a `time_layers --timeline --jobs-csv` file: TimelineRecords with
    its times (in its unit, us or ticks) and each job's CTA and place in the CTA's list; the
    file's checks are monokernel.profile.read_jobs_csv's, plus the two columns this needs."""
    spans = read_jobs_csv(path)  # ns: validated times, one row a job
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [c for c in ("cta", "position") if c not in rows[0]]
    if missing:
        raise ValueError(f"timeline {str(path)!r}: no column {', '.join(missing)}")
    unit = next(u for u in NS_PER_UNIT if f"start_{u}" in rows[0])
    out = []
    for n, r in enumerate(rows, start=2):
        key = (r["stage"], int(r["job"]))
        try:
            cta, position = int(r["cta"]), int(r["position"])
        except ValueError as e:
            raise ValueError(f"timeline {str(path)!r} line {n}: {e}") from None
        t0, t1 = (t / NS_PER_UNIT[unit] for t in spans[key])
        out.append(TimelineRecord(cta, position, key[0], key[1], t0, t1))
    return out, unit
