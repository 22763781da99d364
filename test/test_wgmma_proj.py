"""The front's projection on sm_90a's fp8 warpgroup MMA (stages/wgmma_proj.py, opt-in
`front_proj.act_terms` = 1..4): weights as the register A operand straight from memory, x * g
as e4m3 terms in shared memory.

Checked: the tiling against the atom's own A map (every register of every lane of the
warpgroup holds the weight bytes the instruction's A slots name); the terms' reference
against the exact x * g (per-term error bound); the front launch in the interpreter (one
warpgroup of 32-lane warps) against the float64 reference that follows the terms, at f32
rounding (1e-5 max-norm: an A register or B column off by one is far outside it), through the
outputs and the MLA cache; negative controls (a swapped A word, a missing proxy fence); bad
settings named.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from monokernel import dsl
from monokernel.interp import InterpError
from monokernel.types import bf16
from monokernel import numerics
from spec import BuildSpec
from stages import front as F
from stages import wgmma_proj as W

from test_front import bf16_close, check_fp8_cache, fresh, inputs

INTERP_REL_TOL = 1e-5  # exact products of e4m3 terms and weights, f32 sums of <= 1024


def test_tiling_registers_hold_what_the_atom_reads():
    """For every lane of the warpgroup, chunk c and A slot i: the byte the tile places there
    (row held[h] of the lane's warp, block k = 32 window + 4 word + byte) is the element the
    atom's A map names at (row, k = perm^-1 ...): row equal, perm[c * 32 + col] equal."""
    for terms in (1, 3):
        T = W.tiling(8, terms)
        at = T.atom
        ar, ac = at.a_rows(), at.a_cols()
        for lane in range(W.GROUP_LANES):
            warp, ln = divmod(lane, W.WARP)
            win = int(T.a_window.table()[ln])
            for c in range(T.chunks):
                for reg, (h, word) in enumerate(T.a_words[c]):
                    row = 16 * warp + int(T.a_rows[h].table()[ln])
                    for b in range(4):
                        i = 4 * reg + b
                        assert ar[lane, i] == row
                        assert T.perm[c * at.k + ac[lane, i]] == T.lane_k * win + 4 * word + b
    assert sorted(W.tiling(2, 2).perm) == list(range(W.BLOCK))


@pytest.mark.parametrize("terms", [1, 2, 3, 4])
def test_reference_terms_error_bound(terms):
    """Each term adds TERM_BITS: |sum of terms - a| <= 2^-4T |a| (normal digits) plus the
    subnormal floor (2^-10 of S's unit at the last digit); 4 terms hold a bf16 x bf16 exactly
    in the normal range. Rows spanning 30 binades, a zero row and a one-value row."""
    rng = np.random.default_rng(terms)
    x = numerics.to_f64(numerics.convert(rng.standard_normal((6, 256)) *
                                         np.exp2(rng.uniform(-15, 15, (6, 256))), "f64", bf16), bf16)
    g = numerics.to_f64(numerics.convert(rng.uniform(0.5, 2.0, 256), "f64", bf16), bf16)
    a = x * g
    a[4] = 0.0
    a[5] = 0.0
    a[5, 7] = 3.0
    aq = W.reference_terms(a, terms)
    mx = np.abs(a).max(axis=1, keepdims=True)
    s = np.where(mx > 0, 2.0 ** (W.ACT_TOP + 1 - np.ceil(np.log2(np.where(mx > 0, mx, 1)) + 1e-12)), 1)
    floor = 2.0 ** (-10 - W.TERM_BITS * (terms - 1)) / s
    err = np.abs(aq - a)
    assert (err <= 2.0 ** (-W.TERM_BITS * terms) * np.abs(a) + floor).all()
    assert (aq[4] == 0).all() and aq[5, 7] == 3.0
    if terms == 4:
        big = np.abs(a) * s >= 2.0 ** -6  # the digits' normal range
        assert (err[big] == 0).all()


def terms_launch(rows, kv="fp8", terms=3, warpgroups=1, tma=False):
    L = F.front_launch(BuildSpec.make("tiny", rows=rows, kv=kv, target="interp"),
                       waves=warpgroups * W.GROUP_LANES // W.WARP)
    for st in L.stages:
        if isinstance(st, F.FrontProj):
            st.act_terms = terms
            st.tma_weights = tma
    return L


def check_terms_front(L, inp, res):
    """Every stage against the chained float64 references (which follow the terms)."""
    p = L.plan
    ref = L.reference(inp)
    part = res.regions["front_part"]
    assert not np.isnan(part).any()
    rel = np.abs(part - ref["front_part"]).max() / np.abs(ref["front_part"]).max()
    assert rel <= INTERP_REL_TOL, rel
    bf16_close(numerics.to_f64(res.outputs["qr"], bf16), ref["qr"], "qr")
    slots = F.slots_of(p, inp["positions"], inp["block_table"])
    got = F.decode_cache(p, res.outputs["kv_cache"], slots)
    bf16_close(got["rope"], ref["kv_rope"], "rope")
    if p.kv == "bf16":
        bf16_close(got["latent"], ref["kv_c"], "latent")
    else:
        check_fp8_cache(p, got, ref)
    return rel


CASES = [(4, "fp8", 3, "inorder"), (2, "fp8", 3, "random"), (4, "bf16", 2, "relaxed"),
         (8, "fp8", 3, "relaxed"), (8, "bf16", 4, "random"), (2, "fp8", 1, "inorder")]


@pytest.mark.parametrize("rows,kv,terms,mode", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_front_on_fp8_terms_matches_its_reference(rows, kv, terms, mode):
    L = terms_launch(rows, kv, terms)
    inp = inputs(L, seed=rows + 10 * terms)
    res = L.run_interp(fresh(inp), step=0, mode=mode, seed=5, wave_size=W.WARP)
    check_terms_front(L, inp, res)


@pytest.mark.parametrize("rows,mode", [(8, "relaxed"), (2, "random")])
def test_warp_specialized_form_gives_the_same_bits(rows, mode):
    """Two warpgroups (the second stages and fences, the first streams the weights and runs
    the wgmmas, named barriers between): the same reference check, and every output and
    region bit-identical to the one-warpgroup form's."""
    same_bits(terms_launch(rows), terms_launch(rows, warpgroups=2), rows + 40, mode)


def same_bits(base, other, seed, mode):
    """`other` (run in `mode`) passes the reference check and gives every output and the
    partial sums of `base` (run in order) bit for bit."""
    inp = inputs(base, seed=seed)
    r1 = base.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    r2 = other.run_interp(fresh(inp), step=0, mode=mode, seed=5, wave_size=W.WARP)
    check_terms_front(other, inp, r2)
    for n in r1.outputs:
        assert np.array_equal(r1.outputs[n], r2.outputs[n]), n
    assert np.array_equal(r1.regions["front_part"], r2.regions["front_part"])


TMA_CASES = [(8, "fp8", 3, "relaxed"), (2, "bf16", 2, "random"), (4, "fp8", 4, "inorder")]


@pytest.mark.parametrize("rows,kv,terms,mode", TMA_CASES,
                         ids=["-".join(map(str, c)) for c in TMA_CASES])
def test_weights_by_tma_match_the_reference_and_the_register_form(rows, kv, terms, mode):
    """`front_proj.tma_weights`: the weights' boxes copied into LDS at the job's start and
    read by the SS wgmma in their own K order. The same reference check, and the partial sums
    within f32 rounding of the register form's (the block's products are the same; only the
    k a wgmma sums together differ)."""
    regs, tma = terms_launch(rows, kv, terms), terms_launch(rows, kv, terms, tma=True)
    inp = inputs(regs, seed=rows + 7 * terms)
    r1 = regs.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    r2 = tma.run_interp(fresh(inp), step=0, mode=mode, seed=5, wave_size=W.WARP)
    check_terms_front(tma, inp, r2)
    a, b = r1.regions["front_part"], r2.regions["front_part"]
    assert np.abs(a - b).max() <= INTERP_REL_TOL * np.abs(a).max()


def test_weights_by_tma_in_the_permuted_order_are_caught(monkeypatch):
    """Negative control: B staged in the register form's K permutation while A is read in
    the boxes' own order: refused by name, and, the check bypassed, wrong sums."""
    with pytest.raises(ValueError, match="their own K order"):
        monkeypatch.setattr(W, "tiling", lambda rows, terms, natural=False:
                            W.WgTiling.of(rows, terms))
        L = terms_launch(2, tma=True)
        L.run_interp(fresh(inputs(L, seed=4)), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    T = W.WgTiling.of(2, 3)
    monkeypatch.setattr(W, "tiling", lambda rows, terms, natural=False:
                        W.WgTiling(**{**T.__dict__, "perm": tuple(range(W.BLOCK))}))
    L = terms_launch(2, tma=True)
    inp = inputs(L, seed=4)
    res = L.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    with pytest.raises(AssertionError):
        check_terms_front(L, inp, res)


def test_terms_reference_is_close_to_the_exact_math():
    """The stated precision: with 3 terms the chained reference's q_a is within 1e-4 of the
    unrounded model's (max-norm), with 1 term (the serving stacks' fp8 activations) not."""
    L3, L1 = terms_launch(4, terms=3), terms_launch(4, terms=1)
    inp = inputs(L3, seed=3)
    model = F.front_reference(inp, L3.plan)["q_a"]
    err = {t: np.abs(L.reference(inp)["q_a"] - model).max() / np.abs(model).max()
           for t, L in ((3, L3), (1, L1))}
    assert err[3] < 1e-4 < err[1], err


def test_a_swapped_weight_word_is_caught(monkeypatch):
    """Negative control: two A words of chunk 0 swapped (a wrong lane map) fails the check."""
    T = W.tiling(2, 3)
    words = list(T.a_words[0])
    words[0], words[2] = words[2], words[0]
    bad = W.WgTiling(**{**T.__dict__, "a_words": (tuple(words),) + T.a_words[1:]})
    monkeypatch.setattr(W, "tiling", lambda rows, terms, natural=False: bad)
    L = terms_launch(2)
    inp = inputs(L, seed=4)
    res = L.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    with pytest.raises(AssertionError):
        check_terms_front(L, inp, res)


def test_b_staged_without_the_proxy_fence_is_an_interpreter_error(monkeypatch):
    """The staging's generic stores must be proxy-fenced before the wgmmas read them: without
    the fence the interpreter refuses the read (on the H200 it could read stale bytes)."""
    monkeypatch.setattr(dsl.KernelBuilder, "async_proxy_lds", lambda self: contextlib.nullcontext())
    L = terms_launch(2)
    inp = inputs(L, seed=4)
    with pytest.raises(InterpError, match="did not proxy-fence"):
        L.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)


def test_bad_settings_are_named():
    st = F.FrontProj(terms_launch(2).plan)
    with pytest.raises(ValueError, match="act_terms = 5"):
        st.act_terms = 5
    L = F.front_launch(BuildSpec.make("tiny", rows=2, kv="fp8", target="interp"))  # 2 waves
    for s in L.stages:
        if isinstance(s, F.FrontProj):
            s.act_terms = 3
    with pytest.raises(ValueError, match="one warpgroup of 32-lane warps"):
        L.run_interp(fresh(inputs(L, seed=1)), step=0, mode="inorder", seed=5, wave_size=32)
    with pytest.raises(ValueError, match="1 .. 4"):
        W.tiling(2, 0)


def test_sm90a_front_builds_with_the_wgmma_and_no_conversion():
    """The sm_90a PTX of the GLM-5 front kind with 3 terms: m64n24k32 e4m3 wgmmas (4 a block of
    the job), no e4m3 -> f16 weight conversion in the projection (the staging's remainders
    convert 8 values a term), the tolerance the H200's 14-bit sums need."""
    L = F.front_launch(BuildSpec.make("glm5", rows=8, kv="fp8", target="sm_90a"))
    proj = next(s for s in L.stages if isinstance(s, F.FrontProj))
    proj.act_terms, proj.tma_weights = 3, False  # (the register form: weights as operand A)
    assert proj.rel_tol == W.HW_REL_TOL and F.FrontProj.rel_tol == 1e-5
    from monokernel.build import build_many
    ptx = build_many([L.kernel("sm_90a")])[0].data.decode()
    blocks = L.plan.chunk // W.BLOCK
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n24k32.f32.e4m3.e4m3") == blocks * W.BLOCK // 32
    assert "mma.sync.aligned.m16n8k16" not in ptx and "cvt.rn.f16x2.e4m3x2" in ptx


def test_sm90a_front_with_weights_by_tma_builds_without_spills():
    """The GLM-5 front kind, 3 terms, weights by TMA: one tensor copy a block of the job (all
    issued before the staging), the SS wgmmas (A a descriptor), no weight loads into
    registers; ptxas (where installed): no spill, the two CTAs an SM still fit."""
    from conftest import ptxas_report
    from monokernel.build import build_many
    def launch(tma):
        L = F.front_launch(BuildSpec.make("glm5", rows=8, kv="fp8", target="sm_90a"))
        proj = next(s for s in L.stages if isinstance(s, F.FrontProj))
        proj.act_terms, proj.tma_weights = 3, tma
        return L
    regs = build_many([launch(False).kernel("sm_90a")])[0].data.decode()
    L = launch(True)
    kern = L.kernel("sm_90a")
    assert F.FrontProj.WEIGHT_MAP in {s.name for s in kern.abi.slots}
    ptx = build_many([kern])[0].data.decode()
    blocks = L.plan.chunk // W.BLOCK
    T = W.tiling(8, 3)  # the register form's weight loads: 16 bytes, its rows' words a block
    weight_loads = blocks * len(T.a_rows) * (T.lane_k // W.LOAD_BYTES)
    assert regs.count("ld.global.v4.b32") - ptx.count("ld.global.v4.b32") == weight_loads
    assert ptx.count("cp.async.bulk.tensor.2d") == blocks
    wgmmas = [ln for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    assert len(wgmmas) == blocks * W.BLOCK // 32
    assert all("e4m3.e4m3 {" in w and "}, %rd" in w for w in wgmmas)  # A: a descriptor
    from monokernel.targets import SM90A  # (LDS a CTA may have: the SM's, less a reserve)
    assert F.FRONT_KIND_NVIDIA_CTAS_PER_SM * kern.lds_bytes <= SM90A.lds_bytes
    report = ptxas_report(ptx)
    if report is not None:
        assert "0 bytes spill stores" in report, report


def test_weights_by_tma_need_the_fp8_tile():
    L = F.front_launch(BuildSpec.make("tiny", rows=2, kv="fp8", target="interp"), waves=4)
    proj = next(s for s in L.stages if isinstance(s, F.FrontProj))
    proj.tma_weights = True
    with pytest.raises(ValueError, match="set front_proj.act_terms"):
        L.kernel("interp")


def test_the_sm90a_front_kind_takes_two_terms_and_weights_by_tma_by_default():
    """front_launch on sm_90a in its own shape (two 4-warp CTAs an SM): the fp8 tile with
    FRONT_KIND_NVIDIA_ACT_TERMS terms and the weights by TMA, in the PTX (a tensor copy a
    block, no bf16 MMA); another shape (launch.waves, a K split given), a K split the tile
    cannot take (tiny's 128 k), AMD, the interpreter and the index kinds' front keep the bf16
    tile; the bf16 tile back by --tune, and act_terms=0 alone
    (tma_weights left on) refused by name."""
    from monokernel.build import build_many
    from tools import common
    from stages import kinds

    def proj_of(L):
        return next(s for s in L.stages if isinstance(s, F.FrontProj))
    spec = BuildSpec.make("glm5", rows=8, kv="fp8", target="sm_90a")
    L = F.front_launch(spec)
    proj = proj_of(L)
    assert (proj.act_terms, proj.tma_weights) == (F.FRONT_KIND_NVIDIA_ACT_TERMS, True)
    assert F.FRONT_KIND_NVIDIA_ACT_TERMS == 2 and proj.rel_tol == W.HW_REL_TOL
    ptx = build_many([L.kernel("sm_90a")])[0].data.decode()
    assert ptx.count("cp.async.bulk.tensor.2d") == L.plan.chunk // W.BLOCK
    assert "mma.sync.aligned.m16n8k16" not in ptx
    for other in (F.front_launch(spec, waves=8), F.front_launch(spec, splits=1),
                  F.front_launch(BuildSpec.make("tiny", rows=8, kv="fp8", target="sm_90a")),
                  F.front_launch(BuildSpec.make("glm5", rows=8, kv="fp8", target="gfx950")),
                  F.front_launch(BuildSpec.make("tiny", rows=2, kv="fp8", target="interp")),
                  kinds.kind("index").launch(spec)):
        assert [(s.act_terms, s.tma_weights) for s in other.stages
                if isinstance(s, F.FrontProj)] == [(0, False)], other.name
    front = kinds.kind("front")
    old = common.launch_for(front, spec, common.tune_list(
        "front_proj.act_terms=0,front_proj.tma_weights=0"))
    assert (proj_of(old).act_terms, proj_of(old).tma_weights) == (0, False)
    assert "mma.sync.aligned.m16n8k16" in build_many([old.kernel("sm_90a")])[0].data.decode()
    half = common.launch_for(front, spec, common.tune_list("front_proj.act_terms=0"))
    with pytest.raises(ValueError, match="tma_weights=0 with act_terms=0"):
        half.kernel("sm_90a")


def _early(rows, mode, wrong_job=False, monkeypatch=None):
    """The TMA form linked with pdl, its first jobs' boxes asked for before the wait
    (front_proj.boxes_before_wait), run in the interpreter (which refuses any read of a
    non-constant buffer before grid_dep_wait); `wrong_job`: the early boxes those of the
    next job (a negative control)."""
    L = terms_launch(rows, terms=2, tma=True)
    L.pdl = True
    for st in L.stages:
        if isinstance(st, F.FrontProj):
            st.boxes_before_wait = True
    if wrong_job:
        real = F.FrontProj.prefetch_lds
        monkeypatch.setattr(F.FrontProj, "prefetch_lds",
                            lambda self, k, job, args: real(self, k, job + 1, args))
    return L


@pytest.mark.parametrize("rows,mode", [(8, "relaxed"), (2, "random")])
def test_boxes_before_the_pdl_wait_give_the_same_bits(rows, mode):
    """`front_proj.boxes_before_wait` with pdl: each CTA's first projection job finds its
    boxes asked for before grid_dep_wait and only waits for them; a later job of the CTA
    asks itself. Every output and the partial sums bit for bit the plain TMA form's."""
    early = _early(rows, mode)
    same_bits(terms_launch(rows, terms=2, tma=True), early, rows + 70, mode)
    cta_jobs = early.schedule.cta_jobs
    assert any(sum(st == "front_proj" for st, _ in jobs) > 1 for jobs in cta_jobs), \
        "no CTA runs a second projection job (the one that asks for its own boxes)"


def test_early_boxes_of_another_job_are_caught(monkeypatch):
    L = _early(2, "inorder", wrong_job=True, monkeypatch=monkeypatch)
    inp = inputs(L, seed=72)
    res = L.run_interp(fresh(inp), step=0, mode="inorder", seed=5, wave_size=W.WARP)
    ref = L.reference(inp)["front_part"]
    rel = np.abs(res.regions["front_part"] - ref).max() / np.abs(ref).max()
    assert rel > 1e-2, rel


def test_boxes_before_the_wait_need_tma_and_come_first_in_the_ptx():
    """Refused by name without tma_weights; in the sm_90a front kind with pdl the first
    tensor copy precedes griddepcontrol.wait and replaces the L2 prefetch; without pdl the
    setting changes nothing."""
    from monokernel.build import build_many
    L = terms_launch(2, terms=2)
    proj = next(s for s in L.stages if isinstance(s, F.FrontProj))
    proj.boxes_before_wait = True
    L.pdl = True
    with pytest.raises(ValueError, match="boxes_before_wait = 1 .* set front_proj.tma_weights"):
        L.kernel("interp")

    def kind(pdl, early):
        L = F.front_launch(BuildSpec.make("glm5", rows=8, kv="fp8", target="sm_90a"))
        L.pdl = pdl
        next(s for s in L.stages if isinstance(s, F.FrontProj)).boxes_before_wait = early
        return build_many([L.kernel("sm_90a")])[0].data.decode()
    ptx = kind(True, True)
    assert ptx.index("cp.async.bulk.tensor.2d") < ptx.index("griddepcontrol.wait;")
    assert "cp.async.bulk.prefetch.L2" not in ptx
    assert "cp.async.bulk.prefetch.L2" in kind(True, False)
    assert kind(False, True) == kind(False, False)
