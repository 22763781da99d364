"""Job durations measured by a timeline, for a profile-guided schedule (schedule.ProfiledCost).

Input: the per-job records `time_layers --timeline --jobs-csv FILE` writes (one row a job:
cta, position, stage, job, start and end from the launch's earliest start, in us from a GPU,
in ticks from the interpreter: taken as ns, since every job of the graph comes from the one
file and only the durations' ratios steer the placement). A job's
duration for the scheduler is the time its CTA was needed for it once it could run: from
the later of its start and its dependencies' last end, to its end. The time a job sat
waiting for its producers is theirs, not its own (the list scheduler adds the waits back
from the graph). A lead job (JobNode.lead: work before its first wait, on a CTA held for
it from time 0) too: the list scheduler starts it when its dependencies end, so that rule
gives it its measured end (the fused index's ix_key: dependencies ending at 6.1 us, its end
at 18.8, 12.7 us of duration; its whole span, 18.6, would end it at 24.7 in the model).

The profile must come from the same job graph (kind, config, TP, rows, kv): a job the
graph has and the file lacks, or one the file names that the graph does not have, is an
error naming it, so a profile of another build is never half applied.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

from .schedule import NS_PER_US, CostModel, JobGraph, ProfiledCost, job_name

# ns a unit of write_jobs_csv's time columns (start_<unit>, end_<unit>) is taken as
NS_PER_UNIT = {"us": NS_PER_US, "ticks": 1.0}
# the columns write_jobs_csv (tools/time_layers.py) writes that a profile needs, beside the
# time columns
KEY_COLUMNS = ("stage", "job")


def read_jobs_csv(path) -> dict:
    """{(stage, index): (start_ns, end_ns)} of a --jobs-csv file; a clear error for a
    missing file or column, a bad number, a job listed twice or an end before its start."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"profile {str(path)!r}: no such file (write one with time_layers "
                         f"--timeline --jobs-csv FILE)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0]) if rows else []
    units = [u for u in NS_PER_UNIT if f"start_{u}" in header and f"end_{u}" in header]
    missing = [c for c in KEY_COLUMNS if c not in header] + ([] if units else ["start_/end_us"])
    if not rows or missing:
        raise ValueError(f"profile {str(path)!r}: expected a --jobs-csv table with columns "
                         f"{', '.join(KEY_COLUMNS)}, start_us and end_us (or _ticks); "
                         + (f"missing {', '.join(missing)}" if rows else "it has no rows"))
    unit = units[0]
    scale = NS_PER_UNIT[unit]
    out = {}
    for n, r in enumerate(rows, start=2):  # line 1 is the header
        try:
            key = (r["stage"], int(r["job"]))
            t0, t1 = float(r[f"start_{unit}"]) * scale, float(r[f"end_{unit}"]) * scale
        except ValueError as e:
            raise ValueError(f"profile {str(path)!r} line {n}: {e}") from None
        if not (math.isfinite(t0) and math.isfinite(t1) and 0 <= t0 <= t1):
            raise ValueError(f"profile {str(path)!r} line {n}: job {job_name(key)} runs from "
                             f"{r[f'start_{unit}']} to {r[f'end_{unit}']} {unit}")
        if key in out:
            raise ValueError(f"profile {str(path)!r} line {n}: job {job_name(key)} listed twice")
        out[key] = (t0, t1)
    return out


def job_durations(graph: JobGraph, spans: dict) -> dict:
    """{key: ns} for every job of `graph` from measured (start_ns, end_ns) spans (module
    doc: from the later of its start and its dependencies' last end)."""
    extra = sorted(set(spans) - set(graph.nodes))
    lacking = sorted(set(graph.nodes) - set(spans))
    if extra or lacking:
        def some(keys):
            names = [job_name(k) for k in keys[:4]]
            return ", ".join(names) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        parts = ([f"{len(lacking)} of the launch's jobs are not in it ({some(lacking)})"]
                 if lacking else []) + (
                [f"it has {len(extra)} jobs the launch does not ({some(extra)})"] if extra else [])
        raise ValueError("the profile is of another build: " + "; ".join(parts))
    out = {}
    for key, node in graph.nodes.items():
        t0, t1 = spans[key]
        ready = max((spans[d][1] for d in node.deps), default=0.0)
        # a producer's end stamp follows its publish, so a consumer that needed little after
        # it may end first: no negative durations
        out[key] = max(0.0, t1 - max(t0, ready))
    return out


def profiled_cost(graph: JobGraph, path, base: CostModel) -> ProfiledCost:
    """The ProfiledCost of `graph` from the --jobs-csv file at `path` (its name recorded)."""
    return ProfiledCost.of(job_durations(graph, read_jobs_csv(path)), base, Path(path).name)
