"""The user's tools (tools/): build writes code objects + manifests that lint accepts and a
doctored one fails; check_layer digests are identical run to run, --compare tells equal from
different dumps, --perturb changes them; time_layers --timeline prints per-stage rows from the
kernel's own timestamps (interpreter ticks); bad options are clear argparse errors; the HIP
launcher packs kernargs from the ABI and says clearly when ROCm is absent."""
import json
import os
import shutil
import tempfile

import numpy as np
import pytest

from monokernel import link as mlink
from monokernel.codeobject import read_code_object
from stages.synthetic import SyntheticConfig, make_inputs, synthetic_launch
from tools import build, check_layer, common, lint, time_layers


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    rc = build.main(["--config", "tiny", "--kind", "synthetic", "--rows", "2,4",
                     "--target", "gfx950,gfx942,sm_90a", "--out", str(out)])
    assert rc == 0
    return out


# ------------------------------------------------------------------------------------ build

def test_build_writes_every_artifact_with_its_manifest(built):
    for r in (2, 4):
        d = built / "tiny" / "tp1" / f"r{r}" / "fp8"
        for t, ext in (("gfx950", "co"), ("gfx942", "co"), ("sm_90a", "ptx")):
            assert (d / f"synthetic.{t}.{ext}").is_file()
            assert (d / f"synthetic.{t}.json").is_file()
    m = json.loads((built / "tiny/tp1/r2/fp8/synthetic.gfx950.json").read_text())
    assert m["spec"] == dict(config="tiny", tp=1, rows=2, kv="fp8", target="gfx950")
    assert m["launch_kind"] == "synthetic" and m["model"]["name"] == "tiny"
    assert [a["name"] for a in m["abi"]] == ["arena", "sched", "err", "tag", "W", "h", "g", "out"]
    assert [a["offset"] for a in m["abi"]] == [0, 8, 16, 24, 32, 40, 48, 56]
    assert [r["name"] for r in m["arena"]["regions"]] == ["partials", "y", "z"]
    assert m["schedule"]["grid"] == 256 and m["schedule"]["jobs"] == 26
    assert sum(len(c) for c in m["schedule"]["cta_jobs"]) == 26
    assert m["registers"]["within_budget"] and m["registers"]["budget"]["lds"] == 160 * 1024
    assert m["figures"]["vgpr_spill"] == 0 and m["figures"]["scratch"] == 0
    assert m["bytes_moved"]["total"] == sum(m["bytes_moved"]["items"].values()) > 0
    m942 = json.loads((built / "tiny/tp1/r2/fp8/synthetic.gfx942.json").read_text())
    assert m942["schedule"]["grid"] == 304 and m942["registers"]["budget"]["lds"] == 64 * 1024
    co = (built / "tiny/tp1/r2/fp8/synthetic.gfx950.co").read_bytes()
    assert read_code_object(co).chip == "gfx950"


def test_build_prints_the_table_and_exits_nonzero_on_a_spill(tmp_path, capsys, monkeypatch):
    from monokernel.build import Artifact
    real = Artifact.figures

    def spilling(self):
        f = real(self)
        return dict(f, vgpr_spill=3) if self.target == "gfx942" else f
    monkeypatch.setattr(Artifact, "figures", spilling)
    rc = build.main(["--config", "tiny", "--kind", "synthetic", "--rows", "2",
                     "--out", str(tmp_path)])
    cap = capsys.readouterr()
    assert rc == 1 and "spills or scratch in synthetic.gfx942" in cap.err
    assert "vgpr_spill" in cap.out and "tiny/tp1/r2/fp8" in cap.out


def test_build_names_a_setting_the_launch_refuses_and_writes_nothing(tmp_path, capsys):
    """The group maxima on an AMD chip (sm_90a's head-sum layout only): a usage error
    naming the launch and the reason, no traceback, no file."""
    with pytest.raises(SystemExit) as ex:
        build.main(["--config", "tiny", "--kind", "index", "--rows", "2", "--target", "gfx950",
                    "--tune", "launch.group_max=1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "Traceback" not in err
    assert "index tiny/tp1/r2/fp8 gfx950: index: group_max takes" in err, err
    assert not any(tmp_path.iterdir())


def test_build_keeps_the_proof_kernels(tmp_path, capsys):
    assert build.main(["--proofs", "--kernel", "rmsnorm", "--target", "gfx950",
                       "--out", str(tmp_path)]) == 0
    assert (tmp_path / "proofs" / "rmsnorm.gfx950.co").is_file()
    assert lint.main([str(tmp_path)]) == 0


# ------------------------------------------------------------------------------------- lint

def test_lint_accepts_what_build_wrote(built, capsys):
    assert lint.main([str(built)]) == 0
    out = capsys.readouterr().out
    assert "6 code object(s): no violations" in out and "synthetic.gfx942.co" in out


def _copy(built, tmp_path, name):
    src = built / "tiny/tp1/r2/fp8"
    d = tmp_path / "x"
    d.mkdir()
    for ext in (name.rsplit(".", 1)[1], "json"):
        stem = name.rsplit(".", 1)[0]
        shutil.copy(src / f"{stem}.{ext}", d / f"{stem}.{ext}")
    return d / name, d / (name.rsplit(".", 1)[0] + ".json")


def test_lint_fails_a_manifest_whose_abi_is_not_the_kernels(built, tmp_path, capsys):
    co, mf = _copy(built, tmp_path, "synthetic.gfx950.co")
    m = json.loads(mf.read_text())
    m["abi"][4]["offset"] += 8  # W declared 8 bytes later than the code object has it
    mf.write_text(json.dumps(m))
    assert lint.main([str(co.parent)]) == 1
    err = capsys.readouterr().err
    assert "kernarg 4" in err and "W@32:8B ptr" in err and "W@40:8B ptr" in err


def test_lint_fails_a_code_object_for_another_chip(built, tmp_path, capsys):
    import hashlib
    co, mf = _copy(built, tmp_path, "synthetic.gfx950.co")
    data = bytearray(co.read_bytes())
    flags = int.from_bytes(data[48:52], "little")  # e_flags of an ELF64 header
    data[48:52] = ((flags & ~0xFF) | 0x4C).to_bytes(4, "little")  # EF_AMDGPU_MACH gfx942
    co.write_bytes(bytes(data))
    m = json.loads(mf.read_text())
    m["sha256"] = hashlib.sha256(bytes(data)).hexdigest()  # only the chip is wrong
    mf.write_text(json.dumps(m))
    assert lint.main([str(co.parent)]) == 1
    err = capsys.readouterr().err
    assert "chip: e_flags" in err and "gfx942, the manifest says gfx950" in err


def test_lint_fails_altered_bytes_figures_and_ptx_params(built, tmp_path, capsys):
    co, mf = _copy(built, tmp_path, "synthetic.gfx942.co")
    m = json.loads(mf.read_text())
    m["figures"]["vgpr"] = 7
    mf.write_text(json.dumps(m))
    with open(co, "ab") as f:
        f.write(b"\0")
    assert lint.main([str(co.parent)]) == 1
    err = capsys.readouterr().err
    assert "sha256 is not the manifest's" in err and "manifest figure vgpr = 7" in err
    shutil.rmtree(co.parent)
    ptx, mf = _copy(built, tmp_path, "synthetic.sm_90a.ptx")
    m = json.loads(mf.read_text())
    m["abi"][3]["size"] = 8  # the u32 tag declared as 8 bytes
    m.pop("sha256")
    mf.write_text(json.dumps(m))
    assert lint.main([str(ptx.parent)]) == 1
    assert "kernarg: PTX params" in capsys.readouterr().err


def test_lint_budget_depends_on_the_cta_size():
    from monokernel.targets import GFX950
    assert lint.budget(GFX950, 256)["unified"] == 512  # 4 waves: one per SIMD
    assert lint.budget(GFX950, 1024)["unified"] == 128  # 16 waves: 4 per SIMD
    assert lint.unified_used(50) == 56 and lint.unified_used(298) == 304
    assert lint.arch_vgprs(298, 42) == 256 and lint.arch_vgprs(50, 0) == 50


# ------------------------------------------------------------------------------ check_layer

CL = ["--kind", "synthetic", "--config", "tiny", "--rows", "2,8", "--kv", "fp8"]


def test_check_layer_digests_are_identical_run_to_run_and_compare(tmp_path, capsys):
    a, b, p = tmp_path / "a", tmp_path / "b", tmp_path / "p"
    assert check_layer.main(CL + ["--dump", str(a)]) == 0
    assert check_layer.main(CL + ["--dump", str(b)]) == 0
    assert check_layer.main(CL + ["--dump", str(p), "--perturb"]) == 0
    capsys.readouterr()
    da = json.loads((a / "tiny/tp1/r2/fp8/synthetic.json").read_text())
    assert da["backend"] == "interp" and da["perturb"] is None
    assert [lr["tag"] for lr in da["launches"]] == [1, 2]
    assert set(da["launches"][0]["digests"]) == {"output/out", "arena/partials", "arena/y",
                                                 "arena/z"}
    for e in da["launches"][0]["errors"].values():
        assert e["ok"] and e["rel_err"] <= e["tol"]
    assert (a / "tiny/tp1/r2/fp8/synthetic.json").read_text() != "" and \
        check_layer.load_dump(a) == check_layer.load_dump(b)
    assert check_layer.main(["--compare", str(a), str(b)]) == 0
    assert "all 16 digests equal" in capsys.readouterr().out
    # the negative control: one input bit flipped changes every digest it feeds
    dp = json.loads((p / "tiny/tp1/r2/fp8/synthetic.json").read_text())
    assert dp["perturb"] == dict(buffer="W", element=0, bit=22)
    assert check_layer.main(["--compare", str(a), str(p)]) == 1
    out = capsys.readouterr().out
    assert "DIFF tiny/tp1/r2/fp8/synthetic.json launch 0 output/out" in out
    assert "16 of 16 digests differ" in out
    # a dump missing a spec differs too
    (b / "tiny/tp1/r8/fp8/synthetic.json").unlink()
    assert check_layer.main(["--compare", str(a), str(b)]) == 1
    assert "!= missing" in capsys.readouterr().out


def test_check_layer_without_rocm_says_so(tmp_path, capsys, monkeypatch):
    from monokernel.launch import hip
    monkeypatch.setattr(hip, "_LIB", None)
    monkeypatch.setattr(hip, "_candidates", lambda: [str(tmp_path / "libamdhip64.so")])
    assert check_layer.main(CL + ["--backend", "hip", "--dump", str(tmp_path)]) == 2
    assert "libamdhip64.so) is not on this machine" in capsys.readouterr().err


# ------------------------------------------------------------------------------ time_layers

def test_time_layers_timeline_in_the_interpreter_prints_stage_rows(capsys):
    rc = time_layers.main(["--kind", "synthetic", "--config", "tiny", "--rows", "4",
                           "--backend", "interp", "--timeline"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "timeline of synthetic tiny/tp1/r4/fp8" in out and "ticks" in out
    rows = {l.split()[0]: l.split() for l in out.splitlines() if l.split()[:1] and
            l.split()[0] in ("produce", "reduce", "norm", "gather")}
    assert set(rows) == {"produce", "reduce", "norm", "gather"}
    assert [int(rows[s][1]) for s in ("produce", "reduce", "norm", "gather")] == [16, 4, 4, 2]
    # a consumer stage ends after its producers start
    assert float(rows["gather"][3]) > float(rows["norm"][2]) >= float(rows["produce"][2])
    # the scheduler's estimates beside them (the 8th token: "slowest job: time" is two):
    # each stage's model span from the schedule
    from stages import kinds
    L = common.launch_for(kinds.kind("synthetic"), common.make_spec("tiny", 1, 4, "fp8", "interp"),
                          [])
    model = time_layers.model_spans(L.schedule)
    assert [rows[s][7] for s in ("produce", "reduce", "norm", "gather")] == \
        [model[s] for s in ("produce", "reduce", "norm", "gather")]


def test_model_spans_are_each_stage_first_start_to_last_end_in_us():
    from types import SimpleNamespace
    sched = SimpleNamespace(start={("a", 0): 0.0, ("a", 1): 1500.0, ("b", 0): 2000.0},
                            end={("a", 0): 1000.0, ("a", 1): 2600.0, ("b", 0): 6040.0})
    assert time_layers.model_spans(sched) == {"a": "0.0-2.6", "b": "2.0-6.0"}


def test_timeline_records_every_job_in_order_and_leaves_the_plain_abi_alone():
    L = synthetic_launch(SyntheticConfig(), grid=3)
    plain, timed = L.kernel("interp"), L.kernel("interp", timeline=True)
    assert plain.abi.names() == timed.abi.names()[:-1] and timed.abi.names()[-1] == "timeline"
    assert [s.offset for s in plain.abi.slots] == [s.offset for s in timed.abi.slots[:-1]]
    inp = make_inputs(SyntheticConfig(), np.random.default_rng(3))
    ts = L.timeline_buffer()
    r = L.run_interp(inp, step=0, mode="random", seed=5, timeline=ts)
    recs = L.timeline(ts)
    assert len(recs) == L.schedule.num_jobs
    assert {(x.stage, x.job) for x in recs} == set(L.schedule.placement)
    for x in recs:
        assert 0 < x.start < x.end
        assert L.schedule.placement[(x.stage, x.job)] == (x.cta, x.position)
    by_cta = {}
    for x in recs:
        by_cta.setdefault(x.cta, []).append(x)
    for lst in by_cta.values():
        assert all(a.end < b.start for a, b in zip(lst, lst[1:]))
    ref = L.reference(inp)
    assert np.allclose(r.outputs["out"], ref["out"], rtol=1e-4)
    with pytest.raises(mlink.LinkError, match="linker's own"):
        from types import SimpleNamespace
        from monokernel.ir import Ptr
        from monokernel.types import u64
        mlink.link_abi([SimpleNamespace(name="s", kernel_args=lambda: {"timeline": Ptr(u64)})],
                       timeline=True)


def test_phase_marks_land_between_a_jobs_start_and_end_in_order():
    """JobEnv.phase(i) in a timeline kernel: the selection's stages mark when their messages
    are in (p0) and their histogram is counted (p1); every mark lies inside its job, in
    order; time_layers' stage table and --jobs-csv carry them. A bad phase index is an
    error naming it."""
    import csv
    from layouts.scores import ScoresLayout
    from stages.select import (SelectConfig, make_inputs as sel_inputs, random_block_table,
                               request_positions, select_launch)
    from tools.check_topk import scores_for
    cfg = SelectConfig(ScoresLayout(2, 4096, 512), max_slices=2, topk=64)
    L = select_launch(cfg, grid=3, waves=2)
    rng = np.random.default_rng(7)
    n = request_positions(3000, cfg.rows)
    s = scores_for("normal", rng, n, cfg.capacity, cfg.topk)
    ts = L.timeline_buffer()
    L.run_interp(sel_inputs(cfg, s, n, random_block_table(cfg, rng)), step=0, mode="random",
                 seed=2, timeline=ts)
    recs = L.timeline(ts)
    marked = [x for x in recs if any(x.phases)]
    assert {x.stage for x in marked} == {st.name for st in L.stages}  # every stage marks
    for x in marked:
        ph = [t for t in x.phases if t]
        # sel_h0: scores ready, counted; a round (_consume): messages in, [cum summed,]
        # decided, then counted (not sel_out); the cum is skipped once a row is decided
        want = {2} if x.stage.endswith("h0") else {2, 3} if x.stage.endswith("out") else {3, 4}
        assert len(ph) in want, x
        assert x.start <= ph[0] and ph == sorted(ph) and ph[-1] <= x.end, x
    rows = time_layers.stage_rows(recs, 1.0, "ticks", [st.name for st in L.stages])
    assert all(r["phase ends (median from job start)"].startswith("p0 ") for r in rows)
    path = os.path.join(tempfile.mkdtemp(), "jobs.csv")
    time_layers.write_jobs_csv(recs, path, 1.0, "ticks")
    with open(path) as f:
        head = next(csv.reader(f))
    assert head[6:6 + mlink.PHASE_SLOTS] == [f"phase{i}_ticks" for i in range(mlink.PHASE_SLOTS)]
    assert head[6 + mlink.PHASE_SLOTS:] == [f"tally{i}" for i in range(mlink.TALLY_SLOTS)]
    from monokernel.dsl import DSLError

    class Bad(type(L.stages[0])):
        def body(self, k, job, io):
            io.env.phase(mlink.PHASE_SLOTS)
    bad = object.__new__(Bad)
    bad.__dict__.update(L.stages[0].__dict__)
    from stages.launch import Launch
    with pytest.raises(DSLError, match=f"phase {mlink.PHASE_SLOTS}"):
        Launch("bad", [bad], grid=1).kernel("interp", timeline=True)


def test_scoring_cycle_tallies_count_its_steps_and_only_in_timeline_kernels():
    """The scoring's cycle accounts (stages/cycles.py, JobEnv.tally): in a timeline kernel
    every wave adds its stretch's parts (the queries' wait to the key loop's end) into its
    job's tallies (the steps part counts the key steps it ran: a warpgroup's 64-key pages,
    summed over the job's 4 waves); the clock parts add up to the stretch (each wave's
    phase 1 minus phase 0 up to the clock reads' own spacing); time_layers' stage table
    names them; a kernel without a timeline reads no cycle counter; a tally index out of
    range is an error naming it."""
    from stages.index import index_scoring_launch
    from stages.index_ref import make_inputs as ix_inputs
    from stages.index_score import IndexScore
    from spec import BuildSpec
    keys, jobs = 1500, 2
    L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                             capacity=4096, cache_pages=80, score_jobs=jobs)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    inp = ix_inputs(st.p, np.random.default_rng(3), [(4, keys)], cache_pages=80)
    ts = L.timeline_buffer()
    L.run_interp(inp, step=0, mode="inorder", seed=1, timeline=ts)
    recs = [r for r in L.timeline(ts) if r.stage == st.name]
    steps = IndexScore.TALLIES.index("steps")
    pages = -(-keys // 64)
    assert sum(r.tallies[steps] for r in recs) == pages * 4  # each page once, 4 waves a page
    assert all(r.tallies[i] > 0 for r in recs for i in range(steps))
    for r in recs:  # every clock of phase 0 .. 1 in a part (phases: wave 0's clock)
        span = (r.phases[1] - r.phases[0]) * L.waves
        assert 0.9 * span <= sum(r.tallies[:steps]) <= 1.1 * span, (r.tallies, r.phases)
    rows = time_layers.stage_rows(L.timeline(ts), 1.0, "ticks", [s.name for s in L.stages],
                                  L.waves, {st.name: IndexScore.TALLIES})
    row = next(r for r in rows if r["stage"] == st.name)
    assert row[time_layers.TALLY_COLUMN].startswith("staging ") and "steps " in \
        row[time_layers.TALLY_COLUMN]
    from stages.cycles import CycleTally
    with pytest.raises(ValueError, match="no part 'nope'; the parts are staging, rest, chain"):
        CycleTally(None, type("Env", (), {"timing": False})(), IndexScore.TALLIES).mark("nope")
    plain = L.kernel("interp", 32)
    assert not any(op.opcode == "cycles" for op in plain.walk())
    assert any(op.opcode == "cycles" for op in L.kernel("interp", 32, timeline=True).walk())
    from monokernel.dsl import DSLError

    class Bad(type(L.stages[0])):
        def body(self, k, job, io):
            io.env.tally(mlink.TALLY_SLOTS, k.const(1, "u64"))
    bad = object.__new__(Bad)
    bad.__dict__.update(L.stages[0].__dict__)
    from stages.launch import Launch
    with pytest.raises(DSLError, match=f"tally {mlink.TALLY_SLOTS}"):
        Launch("bad", [bad], grid=1).kernel("interp", timeline=True)


def test_bytes_moved_counts_each_buffer_once():
    L = synthetic_launch(SyntheticConfig(), grid=2)
    c = SyntheticConfig()
    assert L.bytes_moved() == {"W": c.n * c.k * 4, "h": c.k * 4, "g": c.n * 4, "out": c.n * 4}


# ---------------------------------------------------------------------------------- options

@pytest.mark.parametrize("tool,argv,message", [
    (check_layer, ["--rows", "3"], "argument --rows: rows 3 is not built; choose from 2, 4, 8"),
    (time_layers, ["--rows", "2,3"], "rows 3 is not built"),
    (build, ["--kind", "nosuch"], "argument --kind: unknown launch kind 'nosuch'; known:"),
    (check_layer, ["--kind", "synthetic,nosuch"], "unknown launch kind 'nosuch'"),
    (build, ["--target", "gfx90a"], "target gfx90a is not built; choose from gfx950, gfx942, sm_90a"),
    (check_layer, ["--tp", "6"], "TP 6 is not built"),
    (check_layer, ["--config", "glm6"], "unknown config 'glm6'"),
    (build, ["--config", "tiny", "--tp", "8"], "TP 8 does not divide tiny's 4 heads"),
    (time_layers, ["--backend", "interp"], "use it with --timeline"),
    (time_layers, ["--plot", "x.png"], "add --timeline"),
    (time_layers, ["--versus", "ix_score.depth=3", "--backend", "interp", "--timeline"],
     "--versus times two variants"),
    (time_layers, ["--versus", "ix_score.depth=3", "--rounds", "0"], "--rounds 0: at least 1"),
    (time_layers, ["--also", "ix_score.depth=3"], "--also adds a variant to an A/B"),
    (time_layers, ["--versus", "ix_score.depth=3", "--versus", "ix_score.depth=2"],
     "--versus ix_score.depth given twice: 3 and 2"),
])
def test_bad_options_are_clear_argparse_errors(tool, argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        tool.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


# -------------------------------------------------------------------------------------- hip

def test_hip_kernargs_are_packed_at_the_abi_offsets():
    from monokernel.launch.hip import HipError, pack_kernargs
    L = synthetic_launch(SyntheticConfig(), grid=2)
    k = L.kernel("gfx950")
    args = dict(arena=0x1000, sched=0x2000, err=0x3000, tag=7, W=0x4000, h=0x5000, g=0x6000,
                out=0x7000)
    buf = pack_kernargs(k, args, 320)
    assert len(buf) == 320 and buf[64:] == bytes(256)
    for s in k.abi.slots:
        got = int.from_bytes(buf[s.offset:s.offset + s.kind.size], "little")
        assert got == args[s.name]
    with pytest.raises(HipError, match="missing"):
        pack_kernargs(k, {n: v for n, v in args.items() if n != "W"})
    with pytest.raises(HipError, match="smaller than"):
        pack_kernargs(k, args, 16)


def test_gpu_backends_move_inputs_with_their_shape_and_bits():
    """What --backend cuda/hip upload keeps each input's shape (launches validate inputs on
    the tensor) and bits (unsigned data travels as the signed integer of its width)."""
    from tools import common
    a = {"x": np.arange(12, dtype=np.uint16).reshape(3, 4) | 0x8000,
         "pos": np.array([5, 70], np.int32), "w": np.arange(6, dtype=np.uint8).reshape(2, 3),
         "s": np.linspace(-1, 1, 5, dtype=np.float32)}
    for n, v in a.items():
        t = common.to_device(v, "cpu")
        assert tuple(t.shape) == v.shape and t.element_size() == v.itemsize
        back = common.from_device(t, v)
        assert back.dtype == v.dtype and np.array_equal(back, v)


def test_time_layers_rejects_a_position_past_the_cache_with_a_clear_error(capsys):
    from tools import time_layers
    rc = time_layers.main(["--kind", "index_scoring", "--config", "tiny", "--rows", "2",
                           "--pos", "9000", "--backend", "interp", "--timeline"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "error:" in err and "9000" in err


def test_time_layers_jobs_csv_lists_every_job_with_its_times(tmp_path, capsys):
    import csv
    from tools import time_layers
    path = tmp_path / "jobs.csv"
    rc = time_layers.main(["--kind", "synthetic", "--config", "tiny", "--rows", "4",
                           "--backend", "interp", "--timeline", "--jobs-csv", str(path)])
    assert rc == 0
    rows = list(csv.DictReader(path.open()))
    from stages import kinds
    from tools import common
    L = kinds.kind("synthetic").launch(common.make_spec("tiny", 1, 4, "fp8", "interp"))
    assert len(rows) == len(L.graph)  # every job once
    assert {(r["stage"], int(r["job"])) for r in rows} == set(L.graph.nodes)
    assert min(float(r["start_ticks"]) for r in rows) == 0.0
    assert all(float(r["end_ticks"]) >= float(r["start_ticks"]) for r in rows)
    # each CTA's rows follow its schedule list
    for c, lst in enumerate(L.schedule.cta_jobs):
        mine = sorted((int(r["position"]), (r["stage"], int(r["job"])))
                      for r in rows if int(r["cta"]) == c)
        assert [k for _, k in mine] == list(lst)
    assert "--jobs-csv:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:  # the records come from --timeline
        time_layers.main(["--kind", "synthetic", "--config", "tiny", "--backend", "interp",
                          "--jobs-csv", str(path)])
    assert e.value.code == 2


# ----------------------------------------------------------------------------------- --tune

def test_tune_launch_waves_builds_the_launch_with_that_cta_size():
    """--tune launch.waves=N: the kind's launch built with N waves a CTA (with stage tunables
    beside it); a launch attribute that is not listed, a non-integer, or a kind whose launch
    fixes its own CTA size is an error naming it."""
    from spec import BuildSpec
    from stages import kinds
    from stages.index_score import IndexScore
    from tools import common
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    L = common.launch_for(kinds.kind("index_scoring"), spec,
                          common.tune_list("launch.waves=16,ix_score.split_pairs=1"))
    assert L.waves == 16
    assert next(s for s in L.stages if isinstance(s, IndexScore)).split_pairs is True
    for kind, tune, msg in (("index_scoring", "launch.grid=4", "launch's tunables are waves"),
                            ("index_scoring", "launch.waves=many", "expected an integer"),
                            ("front", "launch.lean_lists=1", "kind front builds that part"),
                            ("index_scoring", "launch.select_digits=6-9-9-8",
                             "kind index_scoring builds that part"),
                            ("select", "launch.select_digits=6-x", "bit counts joined")):
        with pytest.raises(ValueError, match=msg):
            common.launch_for(kinds.kind(kind), spec, common.tune_list(tune))


def test_tune_launch_q_splits_sets_the_index_q_projection_split():
    """--tune launch.q_splits=N (index, index_scoring): the plan's q_lora split and its
    ix_proj jobs follow it; a split that is not whole 128-blocks is an error naming it; a
    kind without an index projection does not take it."""
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    for name in ("index", "index_scoring"):
        base = kinds.kind(name).launch(spec).plan
        L = common.launch_for(kinds.kind(name), spec, common.tune_list("launch.q_splits=2"))
        assert L.plan.q_splits == 2 and L.plan.qchunk * 2 == L.plan.q_lora
        assert L.plan.q_jobs == base.heads * 2
        with pytest.raises(ValueError, match="/ 3 splits"):
            common.launch_for(kinds.kind(name), spec, common.tune_list("launch.q_splits=3"))
    with pytest.raises(ValueError, match="kind select builds that part"):
        common.launch_for(kinds.kind("select"), spec, common.tune_list("launch.q_splits=2"))


def test_tune_launch_k_splits_sets_the_index_key_projection_split():
    """--tune launch.k_splits=N (index, index_scoring): the plan's hidden split and its key
    jobs follow it (each split's partial sums are test_index_proj's, its CASES' k_splits); a
    split that is not whole 128-blocks is an error naming it; a kind without an index
    projection does not take it."""
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    for name in ("index", "index_scoring"):
        base = kinds.kind(name).launch(spec).plan
        L = common.launch_for(kinds.kind(name), spec, common.tune_list("launch.k_splits=2"))
        assert base.k_splits != 2 and L.plan.k_splits == 2
        assert L.plan.kchunk * 2 == L.plan.hidden
        assert L.plan.proj_jobs == base.q_jobs + 2
        with pytest.raises(ValueError, match="/ 3 splits must be whole"):
            common.launch_for(kinds.kind(name), spec, common.tune_list("launch.k_splits=3"))
    with pytest.raises(ValueError, match="kind select builds that part"):
        common.launch_for(kinds.kind("select"), spec, common.tune_list("launch.k_splits=2"))


def test_select_digits_per_kind_and_target_and_from_tune():
    """The selection's radix plan: the select kinds take SELECT_KIND_DIGITS off AMD (measured
    on the H200; SELECT_KIND_DIGITS_WIDE for rows of many slices; select_hist on sm_90a at
    rows >= 4 FINE_DIGITS, its refined first digits) and DEFAULT_DIGITS on AMD; the fused
    index keeps DEFAULT_DIGITS (measured slower with the wider plan); --tune
    launch.select_digits sets either, and a plan the selection cannot run is an error naming
    it."""
    from spec import BuildSpec
    from stages import kinds
    from stages import select as sel
    from tools import common
    for target, want in (("sm_90a", sel.SELECT_KIND_DIGITS), ("interp", sel.SELECT_KIND_DIGITS),
                         ("gfx950", sel.DEFAULT_DIGITS)):
        spec = BuildSpec.make("glm5", rows=8, target=target)
        for name in ("select", "select_hist"):
            # (select_hist on sm_90a at rows >= 4: the refined first digits' plan, below)
            fine = name == "select_hist" and target == "sm_90a"
            assert kinds.kind(name).launch(spec).select_cfg.digits == \
                (sel.FINE_DIGITS if fine else want), (name, target)
    assert kinds.kind("select_hist").launch(BuildSpec.make("glm5", rows=8, target="sm_90a"),
                                            fine_digits=0).select_cfg.digits == \
        sel.SELECT_KIND_DIGITS
    # rows 2 on the H200: 64 slices a row, past WIDE_ROW_SLICES: the 256-bin second digit
    wide = BuildSpec.make("glm5", rows=2, target="sm_90a")
    cfg = kinds.kind("select_hist").launch(wide).select_cfg
    assert cfg.max_slices > sel.WIDE_ROW_SLICES and cfg.digits == sel.SELECT_KIND_DIGITS_WIDE
    assert kinds.kind("select_hist").launch(
        BuildSpec.make("glm5", rows=2, target="gfx950")).select_cfg.digits == sel.DEFAULT_DIGITS
    # lean lists: the select kinds off AMD (measured), not AMD, not the fused index
    for target, want in (("sm_90a", True), ("interp", True), ("gfx942", False)):
        spec = BuildSpec.make("glm5", rows=8, target=target)
        assert kinds.kind("select").launch(spec).select_cfg.lean_lists is want, target
        assert kinds.kind("index").launch(spec).select_cfg.lean_lists is False, target
    off = common.launch_for(kinds.kind("select_hist"), BuildSpec.make("glm5", rows=8,
                            target="sm_90a"), common.tune_list("launch.lean_lists=0"))
    assert off.select_cfg.lean_lists is False
    on = common.launch_for(kinds.kind("index"), BuildSpec.make("glm5", rows=8, target="sm_90a"),
                           common.tune_list("launch.lean_lists=1"))
    assert on.select_cfg.lean_lists is True  # the fused index: a tune, to be measured
    tiny = BuildSpec.make("tiny", rows=2, target="interp")
    assert kinds.kind("index").launch(tiny).select_cfg.digits == sel.DEFAULT_DIGITS
    for name in ("select", "index"):
        L = common.launch_for(kinds.kind(name), tiny,
                              common.tune_list("launch.select_digits=6-10-10-6"))
        assert L.select_cfg.digits == (6, 10, 10, 6)
        assert [s.name for s in L.stages if isinstance(s, sel.SelectPass)][-1] == "sel_out"
        assert sum(isinstance(s, sel.SelectPass) for s in L.stages) == 5  # h0..h3, out
    with pytest.raises(ValueError, match=r"digits \(6, 13, 13\)"):
        common.launch_for(kinds.kind("select"), tiny,
                          common.tune_list("launch.select_digits=6-13-13"))


def test_check_topk_rejects_a_bad_radix_plan_before_any_launch(capsys):
    """check_topk --tune launch.select_digits: an unparsable or impossible plan is a usage
    error naming it (exit 2), before anything is built or run."""
    from tools import check_topk
    for tune, msg in (("launch.select_digits=6-13-13", "digits (6, 13, 13)"),
                      ("launch.select_digits=6-x", "bit counts joined by '-'")):
        with pytest.raises(SystemExit) as e:
            check_topk.main(["--tune", tune, "--rows", "2"])
        assert e.value.code == 2
        assert msg in capsys.readouterr().err


def test_tune_sets_a_listed_tunable_and_names_what_is_wrong():
    """--tune STAGE.ATTR=VALUE: parsed, typed by the tunable's current value, set on the
    launch's stages of that name; an unknown stage, an attribute the stage does not list in
    TUNABLES, a bad value or a malformed item is an error naming it."""
    import argparse
    from spec import BuildSpec
    from stages import kinds
    from stages.index_score import IndexScore
    from tools import common
    assert common.tune_list("ix_score.ss_keys=1, ix_score.pipeline_min_pairs=none") == [
        ("ix_score", "ss_keys", "1"), ("ix_score", "pipeline_min_pairs", "none")]
    with pytest.raises(argparse.ArgumentTypeError, match="STAGE.ATTR=VALUE"):
        common.tune_list("ss_keys=1")
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    kind = kinds.kind("index_scoring")
    L = common.launch_for(kind, spec, common.tune_list("ix_score.ss_keys=on,"
                                                       "ix_score.pipeline_min_pairs=4,"
                                                       "ix_score.head_sum=MMA"))
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    assert st.ss_keys is True and st.pipeline_min_pairs == 4 and st.head_sum == "mma"
    assert IndexScore.ss_keys is False  # the instance, not the class
    for bad, msg in (("ix_nope.ss_keys=1", "no stage 'ix_nope'"),
                     ("ix_score.rel_tol=1", "not a tunable of stage ix_score"),
                     ("ix_score.ss_keys=maybe", "expected a boolean"),
                     ("ix_score.head_sum=tensor", "expected one of auto, fma, mma")):
        with pytest.raises(ValueError, match=msg):
            common.launch_for(kind, spec, common.tune_list(bad))


@pytest.mark.parametrize("tool", ["build", "time_layers", "check_layer", "check_topk"])
def test_repeated_tune_flags_add_up(tool):
    """--tune given several times sets every tunable it names (each flag a comma list), as
    one comma list would: a repeated flag once silently replaced the earlier ones (v20's
    A/B runs of `--tune ix_score.tma_keys=1 --tune ix_score.tma_slots=4` ran without the
    TMA path). The same tunable given two values is an error naming it."""
    import importlib
    mod = importlib.import_module(f"tools.{tool}")
    ap = mod._parser()
    a = ap.parse_args(["--tune", "ix_score.tma_keys=1", "--tune",
                       "ix_score.tma_slots=4,launch.waves=16", "--tune", "ix_score.tma_keys=1"])
    assert a.tune == [("ix_score", "tma_keys", "1"), ("ix_score", "tma_slots", "4"),
                      ("launch", "waves", "16")]
    assert ap.parse_args([]).tune == []
    with pytest.raises(SystemExit):
        ap.parse_args(["--tune", "ix_score.tma_slots=2", "--tune", "ix_score.tma_slots=4"])


def test_inert_tunes_are_told_apart_from_effective_ones(capsys):
    """common.inert_tunes: a setting that changes nothing in this build (tma_slots without
    tma_keys) leaves the kernel's LLVM IR the defaults' and the A/B tools warn; one that
    changes the code does not, nor does no setting."""
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=4, target="sm_90a")
    kind = kinds.kind("index_scoring")

    def inert(text):
        tunes = common.tune_list(text) if text else []
        return common.inert_tunes(kind, spec, tunes, common.launch_for(kind, spec, tunes),
                                  "sm_90a")
    assert inert("ix_score.tma_slots=4")
    assert not inert("ix_score.tma_keys=1") and not inert("")
    tunes = common.tune_list("ix_score.tma_slots=3")
    common.warn_inert_tunes(kind, spec, tunes, common.launch_for(kind, spec, tunes), "sm_90a")
    assert "WARNING: --tune ix_score.tma_slots=3 leaves index_scoring" in capsys.readouterr().out


def test_inert_tune_check_needs_no_pyelftools():
    """The GPU machine has no pyelftools, and time_layers / check_topk run the inert-tune
    check there (it builds LLVM IR through monokernel.build): v21's first device call failed
    on `import elftools` at module level. In a process where elftools cannot be imported,
    the check must still run."""
    import subprocess
    import sys
    code = (
        "import sys; sys.modules['elftools'] = None\n"
        "from spec import BuildSpec\nfrom stages import kinds\nfrom tools import common\n"
        "spec = BuildSpec.make('tiny', rows=2, target='sm_90a')\n"
        "kind = kinds.kind('index_scoring')\n"
        "t = common.tune_list('ix_score.tma_slots=4')\n"
        "print(common.inert_tunes(kind, spec, t, common.launch_for(kind, spec, t), 'sm_90a'))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_build_with_tune_records_it_and_builds_the_tuned_path(tmp_path):
    """build --tune ix_score.ss_keys=1: the PTX has the SS wgmma (A from a descriptor), the
    manifest lists the setting; without it, neither."""
    import re
    for tune in ("", "ix_score.ss_keys=1"):
        out = tmp_path / (tune or "default")
        argv = ["--kind", "index_scoring", "--rows", "8", "--target", "sm_90a",
                "--out", str(out)] + (["--tune", tune] if tune else [])
        assert build.main(argv) == 0
        d = out / "glm5" / "tp8" / "r8" / "fp8"
        ptx = (d / "index_scoring.sm_90a.ptx").read_text()
        manifest = json.loads((d / "index_scoring.sm_90a.json").read_text())
        ss = re.search(r"m64n128k32\.f32\.e4m3\.e4m3 \{[^}]*\}, %rd", ptx) is not None
        assert ss == bool(tune), tune
        assert manifest["tunes"] == ([tune] if tune else [])


def test_tune_launch_pdl_links_any_kind_for_programmatic_dependent_launch():
    """--tune launch.pdl=1 (any kind, beside stage tunables): the Launch is linked with pdl
    (its kernel has the grid_dep ops); a value other than 0 / 1 is an error naming it."""
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    for name in ("front", "select"):
        L = common.launch_for(kinds.kind(name), spec, common.tune_list("launch.pdl=1"))
        assert L.pdl is True and "grid_dep" in L.kernel("interp").uses
        assert "grid_dep" not in common.launch_for(kinds.kind(name), spec).kernel("interp").uses
    L = common.launch_for(kinds.kind("front"), spec,
                          common.tune_list("launch.pdl=0,front_proj.straight=1"))
    assert L.pdl is False and L.stages[0].straight is True
    with pytest.raises(ValueError, match="launch.pdl=yes: expected 0 or 1"):
        common.launch_for(kinds.kind("front"), spec, common.tune_list("launch.pdl=yes"))


def test_tune_launch_prefetch_next_links_the_next_jobs_prefetches():
    """--tune launch.prefetch_next=1 (any kind): the Launch is linked so that each job asks
    the L2 for the next job's constant inputs (the front's weights are asked of it, nothing
    without the option), and the front's outputs are unchanged."""
    import numpy as np
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    kind = kinds.kind("front")
    on = common.launch_for(kind, spec, common.tune_list("launch.prefetch_next=1"))
    off = common.launch_for(kind, spec)
    assert on.prefetch_next is True and off.prefetch_next is False
    inp, _ = common.workload_inputs(kind, off, spec, np.random.default_rng(4), 100, "W1")
    outs = []
    for L in (off, on):
        seen = {}
        r = L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()},
                         step=0, mode="random", seed=1, prefetched=seen)
        outs.append({n: np.asarray(v).tobytes() for n, v in r.outputs.items()})
        assert (set(seen) == {"qkv_a_w"}) is (L is on), seen.keys()
    assert outs[0] == outs[1]


def test_tune_launch_poll_backoff_sets_the_pause_between_polls():
    """--tune launch.poll_backoff=N (any kind): every wait's pause between polls is N of the
    chip's shortest (sm_90a: nanosleep N * 64 ns, AMD: s_sleep N); a kernel built before the
    setting changed is not reused; values outside 1 .. MAX_POLL_BACKOFF are errors naming
    them, from the tool and from build_kernel."""
    import re
    from monokernel.backend import amdgcn, nvptx
    from monokernel.dsl import ABI, DSLError, MAX_POLL_BACKOFF, Ptr, build_kernel
    from monokernel.types import u32
    from spec import BuildSpec
    from stages import kinds
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    kind = kinds.kind("front")

    def pauses(L):
        ptx_ir = nvptx.emit_llvm(L.kernel("sm_90a"))
        amd_ir = amdgcn.emit_llvm(L.kernel("gfx950"), "gfx950")
        return (set(re.findall(r"@llvm\.nvvm\.nanosleep\(i32 (\d+)\)", ptx_ir)),
                set(re.findall(r"@llvm\.amdgcn\.s\.sleep\(i32 (\d+)\)", amd_ir)))
    default = common.launch_for(kind, spec)
    assert default.poll_backoff == 1 and pauses(default) == ({str(nvptx.BACKOFF_NS)},
                                                            {str(amdgcn.SLEEP_UNITS)})
    L = common.launch_for(kind, spec, common.tune_list("launch.poll_backoff=8"))
    assert L.poll_backoff == 8 and pauses(L) == ({str(8 * nvptx.BACKOFF_NS)},
                                                 {str(8 * amdgcn.SLEEP_UNITS)})
    L.poll_backoff = 1  # changed after a build: built anew
    assert pauses(L) == pauses(default)
    for bad in ("0", str(MAX_POLL_BACKOFF + 1), "fast"):
        with pytest.raises(ValueError, match=f"launch.poll_backoff={bad}: expected an int in 1"):
            common.launch_for(kind, spec, common.tune_list(f"launch.poll_backoff={bad}"))
    with pytest.raises(DSLError, match="poll_backoff 0 must be an int in 1"):
        build_kernel("k", lambda k: None, abi=ABI(out=Ptr(u32)), poll_backoff=0)


def test_check_topk_takes_the_selections_launch_tunables_only():
    """check_topk's selection launch takes launch.select_digits and launch.lean_lists (as
    config_for keywords); another launch tunable is an error naming what it takes."""
    from tools import check_topk, common
    _, cfg, _ = check_topk.build("tiny", 2, "interp", tunes=common.tune_list(
        "launch.select_digits=6-9-9-8,launch.lean_lists=0"))
    assert cfg.digits == (6, 9, 9, 8) and cfg.lean_lists is False
    with pytest.raises(ValueError, match=r"launch.select_digits, launch.lean_lists"):
        check_topk.build("tiny", 2, "interp", tunes=common.tune_list("launch.q_splits=2"))


def test_stage_rows_name_the_slowest_job():
    """A straggler the median hides (bench/NOTES.md v32: one scoring job at 82 us against a
    median of 57): the stage table names the longest job and its time."""
    from types import SimpleNamespace
    recs = [SimpleNamespace(stage="s", job=j, cta=j, start=10, end=10 + d, phases=(),
                            tallies=()) for j, d in enumerate([57, 55, 82, 56])]
    row, = time_layers.stage_rows(recs, 0.5, "us", ["s"])
    assert row[time_layers.SLOWEST_COLUMN] == "2: 41.00"
    assert row["median job (us)"] == 28.25


def _fake_gpu(monkeypatch, fake_time):
    """time_layers' GPU run with no GPU (CI): no backend, no ceilings, `fake_time` in place
    of each timing."""
    from monokernel.launch import timing
    from tools import common
    monkeypatch.setattr(common, "backend", lambda *a, **k: None)
    monkeypatch.setattr(timing, "ceilings", lambda: {})
    monkeypatch.setattr(time_layers, "print_ceilings", lambda ceil: None)
    monkeypatch.setattr(time_layers, "time_or_report", fake_time)


def test_time_layers_versus_times_a_then_b_each_round_and_prints_the_ratio(monkeypatch, capsys):
    """--versus (the GPU's timing faked: no GPU in CI): per case A then B for --rounds rounds,
    B built with --versus' settings on top of --tune's, each row marked; the summary's medians
    and B/A come from the ok runs only (a failed run is counted, not averaged)."""
    from stages.index_score import IndexScore
    calls = []
    fake_us = iter([100.0, 90.0, 104.0, 91.0, 102.0, 500.0])

    def fake_time(kind, spec, args, ceil, pos, wl="W1", lazy=None, launch=None):
        st = next(s for s in launch.stages if isinstance(s, IndexScore))
        calls.append((pos, wl, st.depth, st.cached_new_keys))
        us = next(fake_us)
        return dict(kind=kind.name, spec=spec.path, pos=pos, wl=wl, us=us,
                    status="FAILED: fake" if us == 500.0 else "ok")
    _fake_gpu(monkeypatch, fake_time)
    rc = time_layers.main(["--kind", "index_scoring", "--config", "tiny", "--rows", "2",
                           "--pos", "1000", "--rounds", "3", "--tune", "ix_score.depth=3",
                           "--versus", "ix_score.cached_new_keys=1"])
    out = capsys.readouterr().out
    assert rc == 1  # the failed run
    assert calls == [(1000, "W1", 3, None), (1000, "W1", 3, True)] * 3  # (None: the chip's)
    assert "A = ix_score.depth=3, B = A + ix_score.cached_new_keys=1" in out
    line = next(x for x in out.splitlines() if "B/A" in x and "pos 1000" in x)
    assert "A 102.00 us (100.00, 104.00, 102.00)" in line
    assert "B 90.50 us (90.00, 91.00)" in line and "B/A 0.887" in line
    assert "(1 failed runs left out)" in line


def test_time_layers_also_times_more_variants_in_the_same_rounds(monkeypatch, capsys):
    """--also (repeatable, with --versus): variants C, D after B in every round, each built
    with A's settings and its own on top (not B's), each reported against A."""
    from stages.index_score import IndexScore
    calls = []
    fake_us = iter([100.0, 90.0, 110.0, 120.0, 102.0, 92.0, 108.0, 118.0])

    def fake_time(kind, spec, args, ceil, pos, wl="W1", lazy=None, launch=None):
        st = next(s for s in launch.stages if isinstance(s, IndexScore))
        calls.append((st.depth, st.cached_new_keys))
        return dict(kind=kind.name, spec=spec.path, pos=pos, wl=wl, us=next(fake_us),
                    status="ok")
    _fake_gpu(monkeypatch, fake_time)
    rc = time_layers.main(["--kind", "index_scoring", "--config", "tiny", "--rows", "2",
                           "--pos", "1000", "--rounds", "2", "--versus", "ix_score.depth=3",
                           "--also", "ix_score.cached_new_keys=1",
                           "--also", "ix_score.depth=4,ix_score.cached_new_keys=1"])
    out = capsys.readouterr().out
    assert rc == 0
    d0 = IndexScore.depth  # (A's and C's: the default)
    assert d0 not in (3, 4) and calls == [(d0, None), (3, None), (d0, True), (4, True)] * 2
    assert ("B = A + ix_score.depth=3, C = A + ix_score.cached_new_keys=1, "
            "D = A + ix_score.depth=4,ix_score.cached_new_keys=1") in out
    ratios = [x for x in out.splitlines() if "/A " in x and "pos 1000" in x]
    assert [x.split(": ")[-1] for x in ratios] == ["B/A 0.901", "C/A 1.079", "D/A 1.178"]
    assert "A 101.00 us (100.00, 102.00), C 109.00 us (110.00, 108.00)" in ratios[1]


def test_time_layers_fixed_below_keeps_small_inputs_at_one_copy():
    """--fixed-below: an input under the limit is the same tensor in every rotated set,
    the others are copies (equal values, other storage); the byte count's forms."""
    import argparse as ap_mod
    import torch
    from tools import time_layers
    prepared = {"w": torch.arange(1024, dtype=torch.float32), "pos": torch.arange(8)}
    sizes = {"w": 4096, "pos": 64}
    sets = time_layers.rotated_sets(prepared, sizes, 3, fixed_below=1024)
    assert len(sets) == 3 and sets[0] is prepared
    for s in sets[1:]:
        assert s["pos"] is prepared["pos"]
        assert s["w"].data_ptr() != prepared["w"].data_ptr()
        assert torch.equal(s["w"], prepared["w"])
    everything = time_layers.rotated_sets(prepared, sizes, 2)
    assert everything[1]["pos"].data_ptr() != prepared["pos"].data_ptr()
    assert [time_layers._byte_count(t) for t in ("0", "4096", "64K", "1m")] == \
        [0, 4096, 65536, 1 << 20]
    for bad in ("-1", "1G", "x"):
        with pytest.raises(ap_mod.ArgumentTypeError, match="expected a byte count"):
            time_layers._byte_count(bad)
