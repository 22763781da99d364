"""Stages composed into one launch (stages/synthetic.py through stages/launch.py and the
linker): a producer -> K-split reduction -> norm (fan-in and fan-out, bulk hand-off behind a
counter) -> gather launch against its float64 reference in the interpreter's three modes,
two steps on one never-reset scratch, tag wrap, missing publishes, missing fences, the
deadlock check, the offset proof, AMD builds and the H200."""

import numpy as np
import pytest

from layouts.decode import decode
from layouts.offsets import INT32_MAX
from layouts.tags import TAG_MAX, tag_for
from monokernel.link import LaunchFailed
from monokernel.schedule import DeadlockError, Schedule, simulate
from stages import Use
from stages import synthetic as syn
from stages.base import resolve
from stages.synthetic import SyntheticConfig, make_inputs, max_rel_err, synthetic_launch

MODES = ("inorder", "random", "relaxed")
CFG = SyntheticConfig()
GRID = 6


@pytest.fixture(scope="module")
def launch():
    return synthetic_launch(CFG, grid=GRID)


def fresh(inp):
    return dict(inp, out=np.full_like(inp["out"], np.nan))


def check_against_reference(launch, result, inp):
    ref = launch.reference(inp)
    assert not np.isnan(result.outputs["out"]).any(), "unwritten outputs"
    for name, st in (("partials", "produce"), ("y", "reduce"), ("z", "norm"), ("out", "gather")):
        got = result.outputs[name] if name == "out" else result.regions[name]
        tol = next(s.rel_tol for s in launch.stages if s.name == st)
        assert max_rel_err(got, ref[name]) <= tol, name


def check_tags(launch, arena, tag):
    for name in ("partials", "y"):
        assert decode(launch.arena, arena, name).all_tagged(tag), name
    z = decode(launch.arena, arena, "z")
    assert (z.counter_tag, z.counter_count) == (tag, CFG.norm_jobs)


# ------------------------------------------------------------------------------- correctness

@pytest.mark.parametrize("mode", MODES)
def test_synthetic_launch_matches_float64_reference(launch, mode, rng):
    inp = make_inputs(CFG, rng)
    arena = launch.new_arena()
    r = launch.run_interp(fresh(inp), arena=arena, step=0, mode=mode, seed=11)
    check_against_reference(launch, r, inp)
    check_tags(launch, arena, launch.tag(0))


def test_ksplit_reduction_is_bit_identical_across_modes_and_interleavings(launch, rng):
    """Fixed summation order: every schedule of the waves gives the same bits."""
    inp = make_inputs(CFG, rng)
    outs = []
    for mode, seed in [("inorder", 0)] + [(m, s) for m in ("random", "relaxed") for s in (1, 2)]:
        r = launch.run_interp(fresh(inp), step=0, mode=mode, seed=seed)
        outs.append((r.outputs["out"].copy(), r.regions["y"].copy(), r.regions["z"].copy()))
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("waves,wave_size", [(2, 64), (1, 32), (4, 32)])
def test_same_stage_text_runs_multiwave_ctas_and_warp32(waves, wave_size, rng):
    L = synthetic_launch(CFG, grid=4, waves=waves)
    inp = make_inputs(CFG, rng)
    r = L.run_interp(fresh(inp), step=0, mode="relaxed", seed=4, wave_size=wave_size)
    check_against_reference(L, r, inp)


# --------------------------------------------------------------------------- tags, two steps

def test_mailbox_two_steps_on_one_never_reset_scratch_see_their_own_tags(launch):
    arena = launch.new_arena()
    rng = np.random.default_rng(7)
    for step in (0, 1):
        inp = make_inputs(CFG, rng)  # different data each step: a stale word would show
        r = launch.run_interp(fresh(inp), arena=arena, step=step, mode="relaxed", seed=step)
        assert r.tag == step + 1 == tag_for(step, 0, 1)
        check_against_reference(launch, r, inp)
        check_tags(launch, arena, r.tag)


@pytest.mark.parametrize("mode", MODES)
def test_mailbox_stale_tag_from_step1_is_never_accepted_in_step2(mode):
    """Step 1 publishes everything (tag 1). Step 2's producers publish nothing: the words of
    step 1 are still in the scratch, complete and well-formed, and must NOT be taken as
    step 2's: the reduction times out and the error names it and the silent producers."""
    cfg = CFG
    good = synthetic_launch(cfg, grid=GRID)
    silent = synthetic_launch(cfg, grid=GRID, skip_publish=True, poll_bound=64)
    arena = good.new_arena()
    rng = np.random.default_rng(3)
    good.run_interp(fresh(make_inputs(cfg, rng)), arena=arena, step=0)
    inp = fresh(make_inputs(cfg, rng))
    with pytest.raises(LaunchFailed, match=r"stage 'reduce' job \d+ .*timed out waiting for "
                                           r"pairs 'partials'.*not published .* by: produce\[") as e:
        silent.run_interp(inp, arena=arena, step=1, mode=mode, seed=5, on_stall="timeout")
    assert e.value.stage == "reduce"
    assert decode(good.arena, arena, "partials").all_tagged(1), "step 1's words were there"
    assert np.isnan(inp["out"]).all(), "a failed launch writes no output"


def test_mailbox_tag_wraps_past_2_32_minus_1_and_never_yields_0():
    L = synthetic_launch(CFG, grid=4, launches_per_step=3, launch_index=2)
    last = (TAG_MAX - 1 - 2) // 3  # the step whose launch 2 has the last tag before the wrap
    assert L.tag(last) == TAG_MAX and L.tag(last + 1) == 3
    arena = L.new_arena()
    rng = np.random.default_rng(9)
    for step in (last, last + 1):
        inp = make_inputs(CFG, rng)
        r = L.run_interp(fresh(inp), arena=arena, step=step, mode="random", seed=1)
        check_against_reference(L, r, inp)
        check_tags(L, arena, L.tag(step))


# ------------------------------------------------------------------------ negative controls

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("skip", [5, True], ids=["one_job", "whole_stage"])
@pytest.mark.parametrize("waves", [1, 2])
def test_producer_that_never_publishes_gives_an_error_naming_the_stage(mode, skip, waves, rng):
    """on_stall='timeout' lets the kernel's own bounded polls run out; the error word names
    the waiting stage/job/CTA, the host adds the producer jobs whose words are missing. With
    2 waves the CTA agrees on the failure at job boundaries (no wave hangs at a barrier)."""
    L = synthetic_launch(CFG, grid=GRID, waves=waves, skip_publish=skip, poll_bound=32)
    inp = fresh(make_inputs(CFG, rng))
    with pytest.raises(LaunchFailed) as e:
        L.run_interp(inp, step=0, mode=mode, seed=2, on_stall="timeout")
    f = e.value
    missing = [("produce", 5)] if skip == 5 else [("produce", j) for j in range(4)]
    waiting = 1 if skip == 5 else 0
    assert (f.stage, f.job) == ("reduce", waiting)
    assert f.cta == L.schedule.cta_of(("reduce", waiting))
    assert f.missing == missing
    assert "stage 'reduce'" in str(f) and "produce[" in str(f)
    assert np.isnan(inp["out"]).all(), "a failed launch writes no output"


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_mailbox_bulk_handoff_without_fence_fails_under_relaxed_visibility(variant, rng):
    L = synthetic_launch(CFG, grid=GRID, **variant)
    inp = make_inputs(CFG, rng)
    ref = L.reference(inp)
    for seed in (0, 1, 2):
        r = L.run_interp(fresh(inp), step=0, mode="relaxed", seed=seed)
        assert max_rel_err(r.outputs["out"], ref["out"]) > 1e-2, seed
        # the tagged pairs need no fence: they still arrive exactly
        assert max_rel_err(r.regions["y"], ref["y"]) <= 1e-5


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_bulk_handoff_without_fence_passes_sequentially(variant, rng):
    """Sequential consistency hides the missing fence: why the relaxed mode exists."""
    L = synthetic_launch(CFG, grid=GRID, **variant)
    inp = make_inputs(CFG, rng)
    r = L.run_interp(fresh(inp), step=0, mode="inorder")
    check_against_reference(L, r, inp)


# ------------------------------------------------------------- schedule, layout, declarations

def test_schedule_used_is_checked_deadlock_free(launch):
    L = launch
    pos = {k: i for i, k in enumerate(L.witness)}
    for key, node in L.graph.nodes.items():
        assert all(pos[d] < pos[key] for d in node.deps)
    for lst in L.schedule.cta_jobs:
        assert [pos[k] for k in lst] == sorted(pos[k] for k in lst)
    rng = np.random.default_rng(0)
    simulate(L.schedule, L.graph, lambda n: float(rng.uniform(1, 100)))  # any timing
    # the table carries the same witness; a schedule against it is refused
    assert L.table.witness == L.witness
    lists = [list(l) for l in L.schedule.cta_jobs]
    cta = L.schedule.cta_of(("gather", 0))
    lists[cta].remove(("gather", 0))
    lists[cta].insert(0, ("gather", 0))
    from monokernel.link import make_table
    with pytest.raises(DeadlockError):
        make_table(L.stages, Schedule(L.schedule.num_ctas, lists), L.graph)


def test_dependencies_are_derived_from_declared_writes(launch):
    st = {s.name: s for s in launch.stages}
    assert st["reduce"].deps(2) == [("produce", j) for j in range(8, 12)]   # fan-in 4
    assert st["norm"].deps(0) == [("reduce", t) for t in range(4)]          # fan-in, all
    assert all(("reduce", 1) in st["norm"].deps(c) for c in range(4))       # fan-out
    assert st["gather"].deps(1) == [("norm", c) for c in range(4)]          # bulk: all publishers


def test_bad_declarations_are_rejected_naming_the_stage():
    class Reads(syn.Reduce):
        def reads(self, t):
            return [Use("partials", 0, 10**6)]
    with pytest.raises(ValueError, match="reduce"):
        resolve([syn.Produce(CFG), Reads(CFG)])

    class Overlap(syn.Produce):
        def writes(self, j):
            return [Use("partials", 0, 64)]
    with pytest.raises(ValueError, match="written by produce"):
        resolve([Overlap(CFG)])

    class Few(syn.Norm):
        def writes(self, j):
            return [Use("z", 0, 64)] if j == 0 else []
    with pytest.raises(ValueError, match="publishers"):
        resolve([syn.Produce(CFG), syn.Reduce(CFG), Few(CFG)])


def test_offset_proof_is_applied_to_every_arena_access(launch):
    L = launch
    names = set(L.proofs)
    assert {"produce writes partials", "reduce reads partials", "reduce writes y",
            "norm reads y", "norm writes z", "gather reads z", "produce W", "gather out"} <= names
    for p in L.proofs.values():
        assert p.addressing == "buffer32" and p.max_index <= INT32_MAX
    # the proven byte offsets are those of the regions' last elements
    z = L.arena["z"]
    assert L.proofs["gather reads z"].max_byte_offset == z.data_offset + (CFG.n - 1) * 4


def test_int32_index_overflow_in_a_layout_is_rejected_before_any_kernel_is_built():
    big = SyntheticConfig(tiles=4, splits=4, tile_rows=2**28, k=64, norm_jobs=4, gather_jobs=4)
    with pytest.raises(ValueError, match="INT32_MAX"):
        synthetic_launch(big, grid=4)


def test_a_stage_that_asks_for_its_cta_is_rejected_at_link_time():
    """Placement belongs to the scheduler: the linker emits stage bodies in a scope where
    cta_id / num_ctas are build errors naming the stage."""
    from monokernel.dsl import DSLError

    L = synthetic_launch(CFG, grid=4)
    stage = L.stages[0]
    original = stage.body

    def nosy_body(k, job, io):
        k.cta_id()
        return original(k, job, io)
    stage.body = nosy_body
    try:
        with pytest.raises(DSLError, match=f"stage {stage.name!r} asks for cta_id"):
            L.kernel("interp")
    finally:
        stage.body = original


# ------------------------------------------------------------------------------ builds, GPU

def test_synthetic_launch_builds_for_gfx950_and_gfx942_without_spills():
    pytest.importorskip("elftools", reason="pyelftools reads the code objects' notes")
    from monokernel.build import build_many
    one, two = synthetic_launch(CFG, grid=8), synthetic_launch(CFG, grid=8, waves=2)
    arts = build_many([L.kernel(chip) for L in (one, two) for chip in ("gfx950", "gfx942")])
    for a in arts:
        f = a.figures()
        assert f["vgpr_spill"] == 0 and f["sgpr_spill"] == 0 and f["scratch"] == 0, f
        assert 0 < f["vgpr"] <= 128, f
        info = a.code_object.kernel(a.kernel.name)
        explicit = [x for x in info.args if not x.value_kind.startswith("hidden")]
        assert [(x.name, x.offset) for x in explicit] == \
            [(s.name, s.offset) for s in a.kernel.abi.slots]
        assert f["lds"] == a.kernel.lds_bytes


def _cuda_ready():
    try:
        from monokernel.launch import cuda
    except Exception as e:  # pragma: no cover - depends on the checkout
        return f"monokernel.launch.cuda does not import: {e}"
    if not cuda.available():
        return "no CUDA GPU with cuda.bindings"
    try:
        from monokernel.backend import nvptx  # noqa: F401
    except Exception as e:  # pragma: no cover
        return f"the NVPTX backend does not import: {e}"
    return None


@pytest.mark.gpu
def test_synthetic_launch_on_h200_two_steps_and_a_missing_publish():
    why = _cuda_ready()
    if why:
        pytest.skip(why)
    import torch
    dev = "cuda"
    cfg = SyntheticConfig()
    L = synthetic_launch(cfg, grid=16)
    arena = torch.zeros(L.arena.total_bytes, dtype=torch.uint8, device=dev)
    rng = np.random.default_rng(21)
    outs = []
    for step in (0, 1, 2):
        host = make_inputs(cfg, rng) if step < 2 else host  # noqa: F821 (step 2 repeats step 1)
        ref = L.reference(host)
        gpu = {n: torch.from_numpy(v).to(dev) for n, v in host.items()}
        r = L.run_cuda(gpu, arena=arena, step=step)
        out = gpu["out"].cpu().numpy()
        outs.append(out)
        assert max_rel_err(out, ref["out"]) <= 1e-4, step
        check_tags(L, r.arena, L.tag(step))
    assert np.array_equal(outs[1].view(np.uint32), outs[2].view(np.uint32)), \
        "same inputs, same bits"
    bad = synthetic_launch(cfg, grid=16, skip_publish=5, poll_bound=1 << 12)
    with pytest.raises(LaunchFailed, match=r"stage 'reduce' job 1 .*produce\[5\]"):
        bad.run_cuda({n: torch.from_numpy(v).to(dev) for n, v in make_inputs(cfg, rng).items()},
                     arena=torch.zeros_like(arena), step=0)
