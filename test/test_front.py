"""The layer's front (stages/front.py, launch kind "front"): RMSNorm -> FP8 q_a|kv_a
projection split over K (bulk mailbox, fixed-order reduction) -> RMSNorm(q_a) = qr,
RMSNorm(c) + rope -> the MLA cache token at the row's position through the block table.

Against the float64 torch references (each stage's, chained, and the model's math straight
from the inputs), on the tiny config in the interpreter's three modes, rows 2/4/8, kv fp8 and
bf16, wave64 and wave32; pages crossed and shuffled; determinism; invalid input (host and
kernel); the e4m3fnuz (gfx942) format; the rope's angle reduction at GLM-5's longest
context; gfx950/gfx942 code objects without spills and the sm_90a PTX.

Tolerances (stated per check below):
  front_part (partial sums)   max-norm relative 1e-5 (f32 accumulation of <= 1024 exact
                              products: the bf16 MMA reads x * g as exact hi + lo halves)
  qr, bf16 latent, rope       elementwise |got - ref| <= 2^-8 |ref| + 1e-5 max|ref| (one bf16
                              rounding of an f32 value whose own error is ~1e-6)
  fp8 scales and latent bytes EXACT where the reference's own quantization is stable under a
                              relative perturbation of 1e-5 (scale: amax not that close to a
                              power of two times fmax; byte: c/s not that close to a rounding
                              boundary); elsewhere the byte (scale) must be one of the two
                              candidates. Every other cache byte is unchanged.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from monokernel import interp, numerics
from monokernel.link import LaunchFailed
from monokernel.types import bf16
from spec import BuildSpec
from stages import front as F
from stages import kinds

DELTA = 1e-5  # relative perturbation that decides which fp8 roundings are "stable"
BF16_TOL = 2.0 ** -8


@functools.lru_cache(maxsize=None)
def launch(rows=2, kv="fp8", config="tiny", target="interp", **kw):
    return F.front_launch(BuildSpec.make(config, rows=rows, kv=kv, target=target), **kw)


def inputs(L, seed=0, requests=None):
    return F.make_inputs(L.plan, np.random.default_rng(seed), requests)


def fresh(inp):
    """Copies of the output buffers (a run writes them in place)."""
    return dict(inp, qr=inp["qr"].copy(), kv_cache=inp["kv_cache"].copy())


def bf16_close(got, ref, what):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert not np.isnan(got).any(), f"{what}: unwritten (NaN) values"
    bound = BF16_TOL * np.abs(ref) + 1e-5 * np.abs(ref).max()
    bad = np.abs(got - ref) > bound
    assert not bad.any(), f"{what}: {bad.sum()} values off, worst {np.abs(got - ref).max()}"


def fp8_bits(x, fmt):
    t = torch.from_numpy(np.ascontiguousarray(x, np.float64)).to(F._torch_fp8(fmt))
    return t.view(torch.uint8).numpy()


def check_fp8_cache(p, got, ref):
    """Scales and latent bytes exactly where the reference's own rounding is stable."""
    c = torch.from_numpy(ref["kv_c"])
    s_lo = F.ref_cache_scales(c * (1 - DELTA), p).numpy()
    s_hi = F.ref_cache_scales(c * (1 + DELTA), p).numpy()
    s = got["scales"]
    assert ((s == s_lo) | (s == s_hi)).all(), (s, s_lo, s_hi)
    stable = s_lo == s_hi
    assert (s[stable] == ref["kv_scale"][stable]).all() and stable.mean() > 0.9
    v = ref["kv_c"] / np.repeat(s, F.BLOCK, 1)
    lo, hi = fp8_bits(v * (1 - DELTA), p.fp8), fp8_bits(v * (1 + DELTA), p.fp8)
    b = got["latent_bits"]
    assert ((b == lo) | (b == hi)).all(), "latent byte outside its rounding candidates"
    stable = lo == hi
    assert (b[stable] == lo[stable]).all()
    assert stable.mean() > 0.99, f"only {stable.mean():.4f} of the bytes are decided exactly"
    # and the dequantized latent is within half an fp8 step of c (the format's precision)
    err = np.abs(got["latent"] - ref["kv_c"])
    assert (err <= 2.0 ** -4 * np.abs(ref["kv_c"]) + np.repeat(s, F.BLOCK, 1) * 2.0 ** -9).all()


def _part_values(res):
    """front_part's values (the pairs' values with FrontPlan.tagged_parts)."""
    part = res.regions["front_part"]
    return getattr(part, "values", part)


def check_front(L, inp, res):
    """Every stage against the chained float64 references, and the model's math."""
    p = L.plan
    ref = L.reference(inp)
    model = F.front_reference(inp, p)
    # the references agree with the model's math computed directly (h, then W h)
    np.testing.assert_allclose(ref["q_a"], model["q_a"], rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(ref["kv_a"], model["kv_a"], rtol=1e-12, atol=1e-10)
    part = _part_values(res)
    rel = np.abs(part - ref["front_part"]).max() / np.abs(ref["front_part"]).max()
    assert rel <= F.FrontProj.rel_tol, rel
    bf16_close(numerics.to_f64(res.outputs["qr"], bf16), model["qr"], "qr")
    slots = F.slots_of(p, inp["positions"], inp["block_table"])
    got = F.decode_cache(p, res.outputs["kv_cache"], slots)
    bf16_close(got["rope"], ref["kv_rope"], "rope")
    if p.kv == "bf16":
        bf16_close(got["latent"], model["kv_c"], "latent")
    else:
        check_fp8_cache(p, got, ref)
    keep = np.ones(p.cache_pages * F.PAGE, bool)
    keep[slots] = False
    assert np.array_equal(res.outputs["kv_cache"][keep], inp["kv_cache"][keep]), \
        "cache bytes outside the rows' tokens changed"
    return ref


# ------------------------------------------------------------------------------ correctness

# each mode sees rows 2 and 4, kv fp8 and bf16, wave64 and wave32 (and rows 8 twice)
def front_with(rows, **projection):
    """A tiny fp8 front launch of its own (`launch` is cached and shared) with FrontProj's
    tunables set as given."""
    L = F.front_launch(BuildSpec.make("tiny", rows=rows, kv="fp8", target="interp"))
    for st in L.stages:
        if isinstance(st, F.FrontProj):
            for name, value in projection.items():
                setattr(st, name, value)
    return L


CASES = [("inorder", 2, "fp8", 64), ("inorder", 4, "bf16", 32), ("inorder", 8, "bf16", 64),
         ("random", 2, "bf16", 64), ("random", 4, "fp8", 32), ("random", 8, "fp8", 64),
         ("relaxed", 4, "fp8", 64), ("relaxed", 2, "bf16", 32)]


@pytest.mark.parametrize("mode,rows,kv,wave", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_front_matches_float64_reference(mode, rows, kv, wave):
    L = launch(rows, kv)
    inp = inputs(L, seed=rows)
    res = L.run_interp(fresh(inp), step=0, mode=mode, seed=3, wave_size=wave)
    check_front(L, inp, res)
    assert res.regions["front_part"].shape == (L.plan.splits, rows, L.plan.n_out)


def test_rows_cross_a_page_boundary_through_shuffled_pages():
    """Three requests: rows at 62..64 cross page 0 -> 1, rows at 127..128 cross 1 -> 2, and
    three rows end at the last position of the capacity; every logical page maps to a
    shuffled physical page, rows of a request share their table row."""
    L = launch(8, "fp8")
    p = L.plan
    reqs = [(3, 62), (2, 127), (3, p.capacity - 3)]
    inp = inputs(L, seed=5, requests=reqs)
    pos, bt = inp["positions"], inp["block_table"]
    assert list(pos) == [62, 63, 64, 127, 128, p.capacity - 3, p.capacity - 2, p.capacity - 1]
    assert np.array_equal(bt[0], bt[2]) and np.array_equal(bt[3], bt[4])
    slots = F.slots_of(p, pos, bt)
    pages = slots // F.PAGE
    assert pages[1] != pages[2] and pages[3] != pages[4], "the rows cross pages"
    order = list(dict.fromkeys(pages))  # physical pages in logical order: shuffled
    assert order != sorted(order) and max(order) >= len(order), order
    assert list(slots % F.PAGE) == [62, 63, 0, 63, 0, 61, 62, 63]
    res = L.run_interp(fresh(inp), step=0, mode="random", seed=8)
    check_front(L, inp, res)


def test_bf16_cache_rows_cross_a_page_boundary_in_warp32():
    L = launch(4, "bf16")
    inp = inputs(L, seed=7, requests=[(2, 63), (2, 64 * 9 - 1)])
    slots = F.slots_of(L.plan, inp["positions"], inp["block_table"])
    assert list(slots % F.PAGE) == [63, 0, 63, 0] and len(set(slots // F.PAGE)) == 4
    res = L.run_interp(fresh(inp), step=0, mode="relaxed", seed=5, wave_size=32)
    check_front(L, inp, res)


def test_same_inputs_give_identical_bits_in_every_mode_and_interleaving():
    L = launch(4, "fp8")
    inp = inputs(L, seed=11)
    outs = []
    for mode, seed in (("inorder", 0), ("random", 1), ("relaxed", 2)):
        r = L.run_interp(fresh(inp), step=0, mode=mode, seed=seed)
        outs.append((r.outputs["qr"].copy(), r.outputs["kv_cache"].copy(),
                     r.regions["front_part"].view(np.uint32).copy()))
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            assert np.array_equal(a, b)


def test_two_steps_on_one_never_reset_scratch():
    """The bulk counter carries the tag: step 1's consumers never take step 0's partials."""
    L = launch(2, "bf16")
    arena = L.new_arena()
    for step in (0, 1):
        inp = inputs(L, seed=20 + step)
        res = L.run_interp(fresh(inp), arena=arena, step=step, mode="relaxed", seed=step)
        check_front(L, inp, res)


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_a_dropped_fence_fails_under_relaxed_visibility(variant):
    """The partial sums are plain stores ordered by the flags' fences: without the
    projection's release or the consumers' acquire, the relaxed mode shows stale bytes (and
    the sequential mode hides it: why the relaxed mode exists)."""
    L = launch(2, "fp8", **variant)
    inp = inputs(L, seed=6)
    ref = F.front_reference(inp, L.plan)
    seq = L.run_interp(fresh(inp), step=0, mode="inorder")
    bf16_close(numerics.to_f64(seq.outputs["qr"], bf16), ref["qr"], "qr")
    r = L.run_interp(fresh(inp), step=0, mode="relaxed", seed=0)
    got = numerics.to_f64(r.outputs["qr"], bf16)
    assert np.nanmax(np.abs(got - ref["qr"])) > 0.1 * np.abs(ref["qr"]).max()


def test_gfx942_format_in_the_interpreter():
    """e4m3fnuz weights (converted at load, scales doubled) and an fnuz cache quantized
    against fmax 240, projected with gfx942's MFMA (16x16x16 bf16): the same launch text,
    the gfx942 numbers."""
    L = launch(2, "fp8", fp8="fp8e4m3fnuz", chip="gfx942")
    assert L.plan.fp8.name == "fp8e4m3fnuz" and L.plan.fp8_max == 240.0
    inp = inputs(L, seed=4)
    res = L.run_interp(fresh(inp), step=0, mode="inorder")
    ref = check_front(L, inp, res)
    # against the e4m3fn launch on the same checkpoint: the projection agrees to f32 rounding
    Lf = launch(2, "fp8")
    inf = inputs(Lf, seed=4)
    assert np.allclose(Lf.reference(inf)["q_a"], ref["q_a"], rtol=1e-12)


# ---------------------------------------------------------------------------- invalid input

def _bad(L, seed, **change):
    inp = inputs(L, seed)
    for key, (idx, val) in change.items():
        inp[key] = inp[key].copy()
        inp[key][idx] = val
    return inp


@pytest.mark.parametrize("change,match", [
    (dict(positions=(1, 1 << 15)), r"row 1: position 32768 is past the cache capacity of 32768"),
    (dict(positions=(0, -5)), r"row 0: position -5 is negative"),
    (dict(block_table=((1, 7), -1)), r"row 1: block_table\[1, 7\] = -1: position 4\d\d has no "
                                      r"cache page"),
    (dict(block_table=((0, 7), 99)), r"row 0: block_table\[0, 7\] = 99 is outside the cache's 8 pages"),
])
def test_invalid_input_is_rejected_naming_the_value_and_nothing_is_written(change, match):
    L = launch(2, "fp8")
    inp = inputs(L, 0, requests=[(2, 7 * 64 + 10)])
    for key, (idx, val) in change.items():
        inp[key] = inp[key].copy()
        inp[key][idx] = val
    before = fresh(inp)
    run = fresh(inp)
    with pytest.raises(ValueError, match=match):
        L.run_interp(run, step=0)
    assert np.array_equal(run["kv_cache"], before["kv_cache"])
    assert np.array_equal(run["qr"], before["qr"])


def test_two_rows_on_one_slot_are_rejected():
    L = launch(2, "bf16")
    inp = inputs(L, 0, requests=[(1, 100), (1, 100)])  # two requests ...
    inp["block_table"][1] = inp["block_table"][0]  # ... on one page: both rows write slot 100's
    with pytest.raises(ValueError, match=r"rows 0 and 1 both write cache slot"):
        L.run_interp(fresh(inp), step=0)


@pytest.mark.parametrize("change,match", [
    (dict(positions=(1, 1 << 15)), r"a row's position is outside \[0, 32768\)"),
    (dict(block_table=((1, 7), -1)), r"a row's block-table entry for its page is -1")],
    ids=["position", "page"])
def test_kernel_rejects_invalid_input_itself_and_writes_no_output(change, match, monkeypatch):
    """Past the host check (e.g. a launcher that skips it), every front_q / front_kv job
    checks every row: the error word names the stage, no qr and no cache byte is written."""
    L = launch(2, "fp8")
    inp = inputs(L, 0, requests=[(2, 7 * 64 + 10)])
    for key, (idx, val) in change.items():
        inp[key] = inp[key].copy()
        inp[key][idx] = val
    monkeypatch.setattr(L, "check_inputs", lambda inputs: None)
    run = fresh(inp)
    with pytest.raises(LaunchFailed, match=r"stage 'front_(q|kv)' job \d .*invalid input: " + match) as e:
        L.run_interp(run, step=0, mode="random", seed=1)
    assert e.value.stage in ("front_q", "front_kv") and e.value.missing == []
    assert np.array_equal(run["kv_cache"], inp["kv_cache"])
    assert np.array_equal(run["qr"], inp["qr"])


# ------------------------------------------------------------------------ plan and numbers

def test_k_splits_fill_each_target_and_respect_the_config():
    got = {}
    for t in ("gfx950", "gfx942", "sm_90a"):
        p = launch(8, "fp8", "glm5", t).plan
        got[t] = p.splits
        jobs = p.tiles * p.splits
        # one round filling >= ONE_ROUND_FILL of the grid, else at least the whole grid
        assert p.tiles == 41 and (F.ONE_ROUND_FILL * p.grid <= jobs <= p.grid or jobs >= p.grid)
        assert p.hidden % (p.splits * F.BLOCK) == 0
        staged = 4 * 2 * p.rows * F.mma_tile.act_row_words(p.chunk)
        lds = BuildSpec.make("glm5", rows=8, target=t).target_info.lds_bytes
        assert staged <= F.STAGING_LDS_SHARE * lds
    # the front kind on sm_90a: two 4-warp CTAs an SM (264), one round of S = 6 jobs, the
    # weight ring unrolled (front_launch on NVIDIA); plan()'s own default (what the index kinds'
    # front takes) keeps one 8-warp CTA an SM and S = 3; AMD keeps the runtime ring
    assert got == {"gfx950": 6, "gfx942": 12, "sm_90a": 6}
    L = launch(8, "fp8", "glm5", "sm_90a")
    assert (L.plan.grid, L.plan.waves) == (264, 4)
    assert [st.straight for st in L.stages if isinstance(st, F.FrontProj)] == [True]
    assert [st.straight for st in launch(8, "fp8", "glm5", "gfx950").stages
            if isinstance(st, F.FrontProj)] == [False]
    assert F.plan(BuildSpec.make("glm5", rows=8, target="sm_90a")).splits == 3
    # one round only while the staged activations fit: with a small LDS the balanced rule
    # (246 jobs of S = 6 on 132 CTAs) again
    cfg = BuildSpec.make("glm5", rows=8, target="sm_90a").config
    assert F.k_splits(cfg, 41, 132, 8, lds_bytes=64 * 1024) == 6
    assert launch(2, "fp8").plan.splits == 2  # tiny: at least cfg.front_k_splits
    assert launch(8, "fp8", "tiny", "gfx950").plan.splits == 8  # all of tiny's 128-blocks
    p = launch(4, "fp8", "glm5", "gfx942").plan
    assert (p.fp8.name, p.fp8_max, p.token_bytes) == ("fp8e4m3fnuz", 240.0, 656)
    assert launch(4, "bf16", "glm5", "gfx950").plan.token_bytes == 1152


def test_bytes_moved_and_the_cache_access_proof():
    L = launch(8, "fp8", "glm5", "gfx950")
    p = L.plan
    m = L.bytes_moved()
    assert m["qkv_a_w"] == 2624 * 6144 and m["kv_cache"] == 8 * 656 and m["qr"] == 8 * 2048 * 2
    # a 44 GB cache: the token's byte offset is 64-bit (re-based per slot), indices stay int32
    big = F.front_launch(BuildSpec.make("glm5", rows=8, kv="fp8", target="gfx950"),
                         cache_pages=1 << 20)
    pr = big.proofs["front_kv kv_cache"]
    assert pr.max_byte_offset == p.token_bytes - 1 and pr.addressing == "buffer32"


def test_rope_angle_reduction_is_exact_at_the_longest_context():
    """The kernel's sin/cos of pos * inv_freq (0.64 fixed-point revolutions, quadrant
    reduction, f32 polynomials) against float64, for GLM-5 (theta 1e6) and 5.2 (8e6), at
    positions up to 2^19 - 1 (f32 angles would be off by ~0.03 rad there)."""
    from monokernel import interp
    from monokernel.dsl import ABI, Ptr, build_kernel
    from monokernel.types import f32, i32
    positions = np.array([0, 1, 63, 64, 4095, 123457, (1 << 19) - 2, (1 << 19) - 1], np.int32)
    for cfg in ("glm5", "glm5.2"):
        p = F.plan(BuildSpec.make(cfg, rows=2, target="interp"))
        npair = p.rope // 2

        def body(k):
            a = k.args
            lane = k.lane_id()
            m = lane < npair
            freq = F._rope_freq(k, p, lane)
            for i in range(len(positions)):
                s, c = F._sincos(k, k.load(a.pos, i, i32), freq)
                k.store(a.out, (i * npair + lane) * 2, s, mask=m)
                k.store(a.out, (i * npair + lane) * 2 + 1, c, mask=m)
        kern = build_kernel("rope_probe", body, abi=ABI(pos=Ptr(i32), out=Ptr(f32)), target="interp")
        out = np.full(len(positions) * npair * 2, np.nan, np.float32)
        interp.run(kern, dict(pos=positions, out=out), grid=1)
        inv = 1.0 / p.config.rope_theta ** (np.arange(0, p.rope, 2) / p.rope)
        ang = positions[:, None].astype(np.float64) * inv[None, :]
        got = out.reshape(len(positions), npair, 2).astype(np.float64)
        assert np.abs(got[..., 0] - np.sin(ang)).max() < 3e-7
        assert np.abs(got[..., 1] - np.cos(ang)).max() < 3e-7


def test_front_is_a_registered_kind_with_inputs_scaled_as_real_data():
    k = kinds.kind("front")
    assert "front" in kinds.names()
    spec = BuildSpec.make("tiny", rows=2, kv="bf16", target="interp")
    L = k.launch(spec)
    inp = k.inputs(L, spec, np.random.default_rng(1))
    x = numerics.to_f64(inp["x"], bf16)
    assert 2.0 < x.std() < 4.0
    w = numerics.to_f64(inp["qkv_a_w"], "fp8e4m3fn")
    assert np.abs(w).max() == 448.0 and 50 < np.abs(w).mean() < 150
    assert 0.005 < float(np.median(inp["qkv_a_scale"])) < 0.02
    assert (inp["block_table"] >= -1).all() and (inp["positions"] >= 0).all()
    # TP does not change the front: the same plan and kernel text at TP 1 and 8
    a = launch(8, "fp8", "glm5", "gfx950").plan
    b = F.plan(BuildSpec.make("glm5", tp=1, rows=8, kv="fp8", target="gfx950"))
    assert (a.splits, a.grid, a.waves, a.n_out) == (b.splits, b.grid, b.waves, b.n_out)
    res = L.run_interp(fresh(inp), step=0)
    check_front(L, inp, res)


def test_a_stage_body_never_asks_for_its_cta():
    """The body text is placement-free: it links for every target and wave size."""
    for ws in (64, 32):
        launch(2, "fp8").kernel("interp", ws)


# ---------------------------------------------------------------------------------- builds

def test_builds_for_gfx950_gfx942_without_spills_and_ptx_for_sm_90a():
    pytest.importorskip("elftools", reason="pyelftools reads the code objects' notes")
    from monokernel.atoms import atom as get_atom
    from monokernel.build import build_many
    from monokernel.targets import target as get_target
    from stages import mma_tile
    plan = [("tiny", 8, t) for t in ("gfx950", "gfx942", "sm_90a")] + \
           [("glm5", 8, t) for t in ("gfx950", "gfx942", "sm_90a")] + \
           [("glm5", r, t) for r in (2, 4) for t in ("gfx950", "gfx942")]
    launches = [launch(rows, "fp8", cfg, t) for cfg, rows, t in plan]
    arts = build_many([L.kernel(t) for L, (_, _, t) in zip(launches, plan)])
    for L, (cfg, rows, t), a in zip(launches, plan, arts):
        f = a.figures()
        # the projection runs on the chip's bf16 MMA (stages/mma_tile.py), but for the sm_90a
        # front kind's GLM-5 shape: its fp8 warpgroup tile (test_wgmma_proj)
        fp8_tile = [(st.act_terms, st.tma_weights) for st in L.stages
                    if isinstance(st, F.FrontProj)] != [(0, False)]
        assert fp8_tile == (t == "sm_90a" and cfg == "glm5"), (cfg, t)
        assert fp8_tile or get_atom(mma_tile.PROJ_ATOMS[t]).intrinsic in a.llvm_ir
        if t == "sm_90a":
            ptx = a.data.decode()
            assert ".entry front" in ptx and ".target sm_90a" in ptx
            assert "ld.local" not in ptx and "st.local" not in ptx, "register spills in the PTX"
            continue
        tg = get_target(t)
        assert f["vgpr_spill"] == 0 and f["sgpr_spill"] == 0 and f["scratch"] == 0, (cfg, f)
        assert 0 < f["vgpr"] <= tg.max_vgprs and f["agpr"] == 0, (cfg, f)
        assert f["sgpr"] <= tg.max_sgprs + 6, (cfg, f)
        assert f["lds"] == a.kernel.lds_bytes <= tg.lds_bytes, (cfg, f)
        info = a.code_object.kernel(a.kernel.name)
        explicit = [x for x in info.args if not x.value_kind.startswith("hidden")]
        assert [(x.name, x.offset) for x in explicit] == \
            [(s.name, s.offset) for s in a.kernel.abi.slots]


# -------------------------------------------------------------------------------------- GPU

def to_cuda(v):
    v = np.ascontiguousarray(v)
    return torch.from_numpy(v.view(np.int16) if v.dtype == np.uint16 else v).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("cfg,rows,kv", [("tiny", 4, "fp8"), ("glm5", 8, "fp8"), ("glm5", 2, "bf16")])
def test_front_on_h200_against_the_reference(cfg, rows, kv):
    from monokernel.launch import cuda
    from stages.launch import Result
    if not cuda.available():
        pytest.skip("no CUDA GPU with cuda.bindings")
    L = F.front_launch(BuildSpec.make(cfg, rows=rows, kv=kv, target="sm_90a"))
    inp = inputs(L, seed=rows, requests=[(rows // 2, 62), (rows - rows // 2, 1000)])
    arena = torch.zeros(L.arena.total_bytes, dtype=torch.uint8, device="cuda")
    outs = []
    for step in (0, 1):  # the same inputs twice: identical bits
        gpu = {n: to_cuda(v) for n, v in fresh(inp).items()}
        r = L.run_cuda(gpu, arena=arena, step=step)
        host = Result({"qr": gpu["qr"].cpu().numpy().view(np.uint16),
                       "kv_cache": gpu["kv_cache"].cpu().numpy()}, r.regions, r.tag, r.arena)
        check_front(L, inp, host)
        outs.append((host.outputs["qr"], host.outputs["kv_cache"], r.regions["front_part"]))
    assert all(np.array_equal(a, b) for a, b in zip(*outs))
    bad = fresh(inp)
    bad["positions"] = bad["positions"].copy()
    bad["positions"][0] = L.plan.capacity
    with pytest.raises(ValueError, match="past the cache capacity"):
        L.run_cuda({n: to_cuda(v) for n, v in bad.items()}, arena=arena, step=2)


@pytest.mark.parametrize("rows,mode", [(2, "random"), (8, "relaxed")])
def test_unrolled_weight_ring_gives_the_same_bits(rows, mode):
    """front_proj.straight (mma_tile.project's ring unrolled in Python, the sm_90a front
    kind's default): the partial sums and qr bit for bit those of the runtime ring."""
    outs = []
    for straight in (False, True):
        L = front_with(rows, straight=straight)
        inp = inputs(L, seed=rows + 40)
        res = L.run_interp(fresh(inp), step=0, mode=mode, seed=4)
        check_front(L, inp, res)
        outs.append((res.outputs["qr"], res.regions["front_part"].view(np.uint32)))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("rows,mode,wave", [(2, "random", 32), (8, "relaxed", 32),
                                            (4, "inorder", 64)])
def test_async_weight_slots_give_the_same_bits(rows, mode, wave):
    """front_proj.async_weights (every weight block copied into lane-private LDS slots up
    front, block i waiting for its own copy group): the same MMAs in the same order, so the
    partial sums, qr and the cache bit for bit the register ring's; the interpreter fails a
    read of a slot before its group's wait (a wrong wait count cannot pass)."""
    outs = []
    for use_async in (False, True):
        L = front_with(rows, async_weights=use_async)
        inp = inputs(L, seed=rows + 50)
        res = L.run_interp(fresh(inp), step=0, mode=mode, seed=5, wave_size=wave)
        check_front(L, inp, res)
        outs.append((res.outputs["qr"], res.outputs["kv_cache"],
                     res.regions["front_part"].view(np.uint32)))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)


def test_async_weight_slots_refuse_a_wave_with_too_many_blocks():
    """More blocks a wave than the async wait can count (MAX_ASYNC_BLOCKS) is an error naming
    the counts, not a silent wrong wait."""
    from stages import mma_tile
    assert mma_tile.MAX_ASYNC_BLOCKS == 8
    # GLM-5's hidden 6144 in one K split: 48 blocks, each of the 4 waves its m-tile's all
    L = F.front_launch(BuildSpec.make("glm5", rows=2, kv="fp8", target="sm_90a"), splits=1)
    for st in L.stages:
        if isinstance(st, F.FrontProj):  # (the bf16 tile's async form)
            st.async_weights, st.act_terms, st.tma_weights = True, 0, False
    with pytest.raises(ValueError, match="at most 8 blocks a wave and whole K parts; this "
                                         "tile has 48 blocks a wave"):
        L.kernel("sm_90a")


@pytest.mark.parametrize("rows,mode,wave", [(2, "inorder", 32), (8, "random", 32),
                                            (4, "relaxed", 32)])
def test_f16_projection_matches_the_reference(rows, mode, wave):
    """front_proj.half = "f16" (sm_90a's mma.sync f16: e4m3 weights exact in f16, the
    activations f16 hi + lo under a power-of-two range scale a row, undone at emission):
    within the same 1e-5 of the float64 reference as the bf16 form, on activations spanning
    many binades (the inputs are scaled as real data)."""
    L = front_with(rows, half="f16")
    inp = inputs(L, seed=rows + 60)
    res = L.run_interp(fresh(inp), step=0, mode=mode, seed=5, wave_size=wave)
    check_front(L, inp, res)


def test_f16_projection_range_scale_is_checked(monkeypatch):
    """Negative control: an inverse off by 1e-4 relative fails the reference check, so the
    range scale and its inverse are what the f16 test above verifies."""
    from stages import mma_tile
    orig = mma_tile.range_scales
    monkeypatch.setattr(mma_tile, "range_scales",
                        lambda k, b: (lambda s, i: (s, i * 1.0001))(*orig(k, b)))
    L = front_with(2, half="f16")
    inp = inputs(L, seed=62)
    res = L.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=32)
    with pytest.raises(AssertionError):
        check_front(L, inp, res)


def test_f16_projection_needs_a_chip_with_the_atom():
    """No f16 projection atom on AMD: an error naming the chip, before any code is built."""
    from stages import mma_tile
    with pytest.raises(ValueError, match="no f16 projection atom for 'gfx950'"):
        mma_tile.proj_atom_name("gfx950", 64, half="f16")


def test_post_jobs_lead_where_the_grid_holds_every_job():
    """front_q / front_kv jobs are lead jobs (their row's 1/rms(x) on a CTA of their own from
    the start) exactly where the grid holds every projection and post job at once (the sm_90a
    front kind); the outputs are those of the default grid, bit for bit."""
    spec = BuildSpec.make("tiny", rows=4, kv="fp8", target="interp")
    p = F.plan(spec)
    grid = p.tiles * p.splits + 2 * p.rows
    L = F.front_launch(spec, grid=grid, splits=p.splits)
    posts = [jobs for jobs in L.schedule.cta_jobs if jobs[0][0] in ("front_q", "front_kv")]
    assert len(posts) == 2 * p.rows and all(len(j) == 1 for j in posts)
    assert not any(j.lead for j in F.front_launch(spec).stages[1].jobs())  # 8 CTAs: no
    inp = inputs(L, seed=9)
    res = L.run_interp(fresh(inp), step=0, mode="relaxed", seed=2)
    ref = launch(4, "fp8").run_interp(fresh(inp), step=0, mode="random", seed=2)
    check_front(L, inp, res)
    assert np.array_equal(res.outputs["qr"], ref.outputs["qr"])
    assert np.array_equal(res.outputs["kv_cache"], ref.outputs["kv_cache"])
    assert [st.jobs()[0].lead for st in launch(8, "fp8", "glm5", "sm_90a").stages[1:]] == [True, True]


TAGGED_CASES = [(2, "relaxed", 64, 1), (8, "random", 32, 1), (4, "relaxed", 32, 2)]


@pytest.mark.parametrize("rows,mode,wave,form", TAGGED_CASES,
                         ids=[f"r{c[0]}-{c[1]}-w{c[2]}-form{c[3]}" for c in TAGGED_CASES])
def test_tagged_partial_sums_give_the_same_bits(rows, mode, wave, form):
    """FrontPlan.tagged_parts (launch.tagged_parts=1): every partial sum its own tagged pair,
    polled by the post jobs with no flag and no fence. Two steps on one never-reset arena:
    the second step's post jobs find the first step's words (its tag) under the relaxed
    mode's late visibility and must wait them out; each step within the float64 checks and
    bit for bit the flag form's (partial sums, qr, cache). Forms: 1 batched rounds, 2 a
    probe of one word first."""
    outs = {}
    for tagged in (0, form):
        L = launch(rows, "fp8", tagged_parts=tagged)
        arena = L.new_arena()
        for step in (0, 1):
            inp = inputs(L, seed=60 + rows + step)
            res = L.run_interp(fresh(inp), arena=arena, step=step, mode=mode, seed=7 + step,
                               wave_size=wave)
            check_front(L, inp, res)
        outs[tagged] = (res.outputs["qr"], res.outputs["kv_cache"],
                        _part_values(res).view(np.uint32))
    assert "front_done" not in L.arena.names
    for a, b in zip(outs[0], outs[form]):
        assert np.array_equal(a, b)


def test_tagged_parts_form_is_checked():
    with pytest.raises(ValueError, match="tagged_parts 3"):
        launch(2, "fp8", tagged_parts=3)


@pytest.mark.parametrize("mode,form", [("inorder", 1), ("relaxed", 2)])
def test_tagged_partial_sums_never_published_stall_or_time_out_naming_the_wait(mode, form,
                                                                               monkeypatch):
    """FrontPlan.tagged_parts with the first partial sums never published: the post jobs'
    polling loop (poll_pause a round) is a stall the interpreter reports, and with timeouts
    the launch fails naming the front_part wait, never hangs or reads stale words."""
    held = 16  # front_part elements [0, held) (split 0, row 0) stay unpublished
    store = F.FrontProj._store_part

    def lossy(self, k, io, index, v, mask):
        keep = index >= held
        return store(self, k, io, index, v, keep if mask is None else mask & keep)
    monkeypatch.setattr(F.FrontProj, "_store_part", lossy)
    L = launch(2, "fp8", tagged_parts=form, poll_bound=64)
    inp = inputs(L, seed=5)
    with pytest.raises(interp.Stall, match="polls memory that nothing will change"):
        L.run_interp(fresh(inp), step=0, mode=mode, seed=1)
    with pytest.raises(LaunchFailed, match="pairs 'front_part'"):
        L.run_interp(fresh(inp), step=0, mode=mode, seed=1, on_stall="timeout")
