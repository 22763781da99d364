"""Placement tunables: profile-guided schedules (monokernel.profile, schedule.ProfiledCost,
--tune launch.profile: a timeline's job durations in the cost model's place) and a lead job's
CTA kept for its consumers (list_schedule's lead_alone, --tune launch.lead_alone).

  * the durations: from the later of a job's start and its dependencies' last end;
  * a job the byte model thinks short (v38's ix_key) no longer has a job queued behind it;
  * a profile of another build, a missing file or column, a bad row: errors naming them;
  * the schedule's JSON keeps the profile; the interpreter's outputs do not change with the
    placement, and the placement does change.
"""
import csv
import json

import pytest

from monokernel.profile import job_durations, profiled_cost, read_jobs_csv
from monokernel.schedule import (CostModel, JobGraph, JobNode, ProfiledCost, Schedule,
                                 check_deadlock_free, list_schedule, simulate)

UNIT = CostModel(bytes_per_ns=1.0, flops_per_ns=1.0, name="unit")  # cost_bytes == ns
HEADER = ["cta", "position", "stage", "job", "start_us", "end_us"]


def _write(path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _lead_graph():
    """v38's shape on 3 CTAs: producers p0 (6 ns by the model) and p1 (2 ns), a lead job
    `key` (modelled 1 ns, work before its wait on p1), three q jobs ready when p0 ends, and
    a consumer of everything."""
    return JobGraph([
        JobNode(("p", 0), cost_bytes=6), JobNode(("p", 1), cost_bytes=2),
        JobNode(("key", 0), cost_bytes=1, deps=(("p", 1),), lead=True)]
        + [JobNode(("q", i), cost_bytes=3, deps=(("p", 0),)) for i in range(QS)]
        + [JobNode(("end", 0), cost_bytes=1, deps=(("key", 0),) + tuple(("q", i)
                                                                       for i in range(QS)))])


QS = 3  # q jobs: one more than the CTAs free when they are ready


def test_a_jobs_duration_starts_when_it_could_run(tmp_path):
    g = _lead_graph()
    # measured: the lead job ran from 0 to 20 us (its producer p1 ended at 4)
    f = _write(tmp_path / "t.csv", [
        [0, 0, "p", 0, 0.0, 4.0], [1, 0, "p", 1, 0.0, 4.0], [2, 0, "key", 0, 0.0, 20.0],
        [0, 1, "q", 0, 3.0, 7.5], [1, 1, "q", 1, 4.5, 7.0], [0, 2, "q", 2, 7.5, 10.0],
        [2, 1, "end", 0, 20.0, 21.0]])
    d = job_durations(g, read_jobs_csv(f))
    assert d[("p", 0)] == 4000.0
    assert d[("key", 0)] == 16000.0  # from p1's end, not from its own start
    assert d[("q", 0)] == 3500.0  # started before p0 ended: from p0's end
    assert d[("q", 1)] == 2500.0  # started after: from its start
    assert d[("end", 0)] == 1000.0


def test_the_profile_moves_a_job_from_behind_a_long_lead_job(tmp_path):
    g = _lead_graph()
    by_model = list_schedule(g, 3, UNIT)

    def after_key(sch):
        lst = sch.cta_jobs[sch.cta_of(("key", 0))]
        return [k for k in lst[lst.index(("key", 0)) + 1:] if k[0] == "q"]

    # the byte model ends the lead job at 3 ns and queues a q job behind it
    assert after_key(by_model)
    durations = {("p", 0): 6.0, ("p", 1): 2.0, ("key", 0): 16.0, ("end", 0): 1.0,
                 **{("q", i): 3.0 for i in range(QS)}}
    profiled = list_schedule(g, 3, ProfiledCost.of(durations, UNIT, "t.csv"))
    assert not after_key(profiled)
    assert profiled.end[("end", 0)] == 19.0  # p1 2 + key 16 + end 1: nothing waits for a q job
    # the model's schedule under the measured durations: the q job behind the lead job
    # ends at 2 + 16 + 3, then `end`
    assert simulate(by_model, g, durations) == 22.0
    check_deadlock_free(profiled, g)


def test_a_profile_of_another_build_is_refused_naming_its_jobs(tmp_path):
    g = _lead_graph()
    f = _write(tmp_path / "t.csv", [[0, 0, "p", 0, 0.0, 4.0], [1, 0, "x", 3, 0.0, 1.0]])
    with pytest.raises(ValueError, match=r"another build: 6 of the launch's jobs are not in it "
                                         r"\(end\[0\], key\[0\], p\[1\], q\[0\] and 2 more\); "
                                         r"it has 1 jobs the launch does not \(x\[3\]\)"):
        job_durations(g, read_jobs_csv(f))


@pytest.mark.parametrize("rows,header,match", [
    (None, HEADER, "no such file"),
    ([[0, 0, "p", 0, 1.0]], HEADER[:-1], "missing start_/end_us"),
    ([], HEADER, "it has no rows"),
    ([[0, 0, "p", "zero", 0.0, 1.0]], HEADER, r"line 2: invalid literal"),
    ([[0, 0, "p", 0, 2.0, 1.0]], HEADER, r"line 2: job p\[0\] runs from 2.0 to 1.0 us"),
    ([[0, 0, "p", 0, 0.0, 1.0], [0, 1, "p", 0, 1.0, 2.0]], HEADER, r"line 3: .*listed twice"),
    ([[0, 0, "p", 0, 0.0, "nan"]], HEADER, r"runs from 0.0 to nan us"),
])
def test_a_bad_profile_file_is_a_clear_error(tmp_path, rows, header, match):
    f = tmp_path / "t.csv"
    if rows is not None:
        _write(f, rows, header)
    with pytest.raises(ValueError, match=match):
        read_jobs_csv(f)


def test_the_interpreters_ticks_are_read_too(tmp_path):
    f = _write(tmp_path / "t.csv", [[0, 0, "p", 0, 0, 7]],
               ["cta", "position", "stage", "job", "start_ticks", "end_ticks"])
    assert read_jobs_csv(f) == {("p", 0): (0.0, 7.0)}


def test_the_schedule_json_keeps_the_profile():
    g = _lead_graph()
    cost = ProfiledCost.of({k: 2.0 for k in g.nodes}, UNIT, "t.csv")
    sch = list_schedule(g, 3, cost)
    back = Schedule.from_json(json.dumps(sch.to_json()))
    assert back == sch and back.cost_model == cost and back.cost_model.name == "profile t.csv"
    with pytest.raises(ValueError, match=r"profiled duration of p\[0\] = -1.0 ns"):
        ProfiledCost((("p", 0, -1.0),), UNIT)


def test_a_profiled_launch_computes_the_same_outputs(tmp_path, capsys):
    """End to end in the interpreter: a timeline's --jobs-csv as --tune launch.profile: the
    placement changes (the ticks are not the byte model's figures), the digests do not."""
    from stages import kinds
    from tools import check_layer, common, time_layers
    prof = tmp_path / "jobs.csv"
    base = ["--kind", "index", "--config", "tiny", "--rows", "2"]
    assert time_layers.main(base + ["--pos", "2000", "--backend", "interp", "--timeline",
                                    "--jobs-csv", str(prof)]) == 0
    spec = common.make_spec("tiny", 1, 2, "fp8", "interp")
    plain = common.launch_for(kinds.kind("index"), spec)
    tuned = common.launch_for(kinds.kind("index"), spec, [("launch", "profile", str(prof))])
    assert tuned.schedule.cost_model.name == "profile jobs.csv"
    assert tuned.schedule.cta_jobs != plain.schedule.cta_jobs
    alone = common.launch_for(kinds.kind("index"), spec, [("launch", "lead_alone", "1")])
    assert alone.schedule.cta_jobs != plain.schedule.cta_jobs
    # the same kernel code, another placement: an A/B of them is no A/B of one kernel twice
    assert not common.same_code(plain, alone, "gfx950")
    assert common.same_code(plain, common.launch_for(kinds.kind("index"), spec), "gfx950")
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert check_layer.main(base + ["--kv", "fp8", "--dump", str(a)]) == 0
    assert check_layer.main(base + ["--kv", "fp8", "--dump", str(b), "--tune",
                                    f"launch.profile={prof}"]) == 0
    assert check_layer.main(base + ["--kv", "fp8", "--dump", str(c), "--tune",
                                    "launch.lead_alone=1"]) == 0
    capsys.readouterr()
    assert check_layer.main(["--compare", str(a), str(b)]) == 0
    assert check_layer.main(["--compare", str(a), str(c)]) == 0
    with pytest.raises(ValueError, match=r"launch.lead_alone=yes: expected 0 or 1"):
        common.launch_for(kinds.kind("index"), spec, [("launch", "lead_alone", "yes")])
    with pytest.raises(ValueError, match=r"launch.profile=.*: the profile is of another build"):
        common.launch_for(kinds.kind("index"), common.make_spec("tiny", 1, 4, "fp8", "interp"),
                          [("launch", "profile", str(prof))])


def test_profiled_cost_reads_every_job_from_its_file(tmp_path):
    """profiled_cost names the file it read; every job of the graph comes from it."""
    g = _lead_graph()
    f = _write(tmp_path / "x.csv", [[0, 0, st, i, 0.0, 1.0] for st, i in g.nodes])
    cost = profiled_cost(g, f, UNIT)
    assert cost.source == "x.csv" and len(cost.durations_ns) == len(g)


def test_a_job_that_ends_before_its_producers_end_stamp_gets_no_negative_time(tmp_path):
    """A producer stamps its end after its publish: a consumer may end first (0 ns)."""
    g = JobGraph([JobNode(("p", 0)), JobNode(("c", 0), deps=(("p", 0),))])
    f = _write(tmp_path / "t.csv", [[0, 0, "p", 0, 0.0, 5.0], [1, 0, "c", 0, 1.0, 4.9]])
    assert job_durations(g, read_jobs_csv(f)) == {("p", 0): 5000.0, ("c", 0): 0.0}


def test_lead_alone_keeps_a_lead_jobs_cta_for_its_consumers():
    g = _lead_graph()
    by_model = list_schedule(g, 3, UNIT)
    alone = list_schedule(g, 3, UNIT, lead_alone=True)
    key_cta = alone.cta_of(("key", 0))
    assert by_model.cta_jobs[by_model.cta_of(("key", 0))][1:] != []
    assert all(k[0] in ("key", "end") for k in alone.cta_jobs[key_cta])
    check_deadlock_free(alone, g)
    # a lead job nothing waits for: its CTA is never free again, every job still placed
    lone = JobGraph([JobNode(("key", 0), lead=True)] + [JobNode(("x", i)) for i in range(4)])
    s = list_schedule(lone, 2, UNIT, lead_alone=True)
    assert s.cta_jobs[s.cta_of(("key", 0))] == [("key", 0)] and s.num_jobs == 5
