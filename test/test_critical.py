"""The critical path of a measured timeline (monokernel/critical.py, tools/critical_path.py,
time_layers --timeline): which job held each next one, on hand-made timelines with a known
answer and on the interpreter's timeline of the fused index, where every step must be a
dependency that ended after the next job started or the job before it on its CTA."""
from __future__ import annotations

import csv

import pytest

from monokernel.critical import AFTER, START, WAITS, critical_path, read_timeline_csv
from monokernel.link import TimelineRecord
from monokernel.schedule import JobGraph, JobNode


def _rec(cta, position, stage, job, start, end):
    return TimelineRecord(cta, position, stage, job, start, end)


def _graph():
    # a (CTA 0) and b (CTA 1) feed c (CTA 1, after b); d runs after c on CTA 1 with no data
    return JobGraph([JobNode(("a", 0)), JobNode(("b", 0)),
                     JobNode(("c", 0), deps=(("a", 0), ("b", 0))), JobNode(("d", 0))])


def test_the_path_follows_data_then_the_cta():
    recs = [_rec(0, 0, "a", 0, 100, 110), _rec(1, 0, "b", 0, 100, 104),
            _rec(1, 1, "c", 0, 105, 115), _rec(1, 2, "d", 0, 116, 120)]
    path = critical_path(_graph(), recs)
    assert [(s.name, s.cause) for s in path] == [("a[0]", START), ("c[0]", WAITS),
                                                 ("d[0]", AFTER)]
    a, c, d = path
    assert (a.start, c.start, c.ready, c.end, c.own, c.waited) == (0, 5, 10, 15, 5, 5)
    assert (d.ready, d.own) == (16, 4)  # times from the earliest start


def test_a_job_whose_data_came_first_follows_its_cta():
    # c's dependencies ended before its CTA got to it: b (its CTA's previous job) held it
    recs = [_rec(0, 0, "a", 0, 0, 3), _rec(1, 0, "b", 0, 0, 8), _rec(1, 1, "c", 0, 9, 12),
            _rec(0, 1, "d", 0, 4, 5)]
    path = critical_path(_graph(), recs)
    assert [(s.name, s.cause) for s in path] == [("b[0]", START), ("c[0]", AFTER)]


def test_dependencies_ending_together_take_the_earlier_one_and_skipped_jobs_are_ignored():
    recs = [_rec(0, 0, "a", 0, 0, 10), _rec(1, 0, "b", 0, 0, 10), _rec(2, 0, "c", 0, 1, 12)]
    assert [s.name for s in critical_path(_graph(), recs)] == ["a[0]", "c[0]"]
    # b never ran (a skipped job has no record): c follows a alone
    recs = [_rec(0, 0, "a", 0, 0, 10), _rec(2, 0, "c", 0, 1, 12)]
    assert [s.name for s in critical_path(_graph(), recs)] == ["a[0]", "c[0]"]


def test_a_timeline_of_another_build_is_refused_by_name():
    with pytest.raises(ValueError, match=r"does not \(zz\[3\]\)"):
        critical_path(_graph(), [_rec(0, 0, "zz", 3, 0, 1)])
    with pytest.raises(ValueError, match="recorded no job"):
        critical_path(_graph(), [])


@pytest.fixture(scope="module")
def interp_timeline(tmp_path_factory):
    """The fused index (tiny, rows 2) timed in the interpreter: its --jobs-csv and output."""
    from tools import time_layers
    path = tmp_path_factory.mktemp("timeline") / "jobs.csv"
    args = ["--kind", "index", "--config", "tiny", "--rows", "2", "--pos", "2000",
            "--backend", "interp", "--timeline", "--jobs-csv", str(path)]
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert time_layers.main(args) == 0
    return path, out.getvalue()


def test_every_step_of_the_interpreters_path_is_a_late_dependency_or_the_ctas_last_job(
        interp_timeline):
    from stages import kinds
    from tools import common
    path_csv, printed = interp_timeline
    records, unit = read_timeline_csv(path_csv)
    assert unit == "ticks"
    L = common.launch_for(kinds.kind("index"), common.make_spec("tiny", 1, 2, "fp8", "interp"))
    path = critical_path(L.graph, records, L.schedule)
    by_key = {(r.stage, r.job): r for r in records}
    assert path[0].cause == START and path[-1].end == max(r.end for r in records) - min(
        r.start for r in records)
    for prev, step in zip(path, path[1:]):
        r, p = by_key[step.key], by_key[prev.key]
        if step.cause == WAITS:
            assert prev.key in L.graph.nodes[step.key].deps and p.end > r.start
            assert step.ready == prev.end
        else:
            assert step.cause == AFTER and p.cta == r.cta and p.position == r.position - 1
    # time_layers printed the same path after its stage rows
    assert "critical path (" in printed
    for step in path:
        assert step.name in printed


def test_the_tool_reads_a_saved_timeline_and_refuses_another_builds(interp_timeline, capsys,
                                                                     tmp_path):
    from tools import critical_path as tool
    path_csv, _ = interp_timeline
    base = [str(path_csv), "--config", "tiny", "--rows", "2", "--target", "interp"]
    assert tool.main(base) == 0
    out = capsys.readouterr().out
    assert "critical path of" in out and "sel_out[" in out and "follows" in out
    assert tool.main([str(path_csv), "--config", "tiny", "--rows", "4",
                      "--target", "interp"]) == 2
    assert "another build's" in capsys.readouterr().err
    # the same graph placed otherwise (lead_alone moves ix_key's followers) is refused too
    assert tool.main(base + ["--tune", "launch.lead_alone=1"]) == 2
    assert "placement" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    with open(path_csv) as f, open(bad, "w", newline="") as g:
        rows = list(csv.DictReader(f))
        w = csv.DictWriter(g, [c for c in rows[0] if c != "cta"])
        w.writeheader()
        w.writerows({c: v for c, v in r.items() if c != "cta"} for r in rows)
    assert tool.main([str(bad)] + base[1:]) == 2
    assert "no column cta" in capsys.readouterr().err
