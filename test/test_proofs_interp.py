"""Every proof kernel against its float64 reference in the interpreter's three modes."""
import contextlib

import numpy as np
import pytest

from conftest import gemv_ys
from monokernel import interp
from monokernel.proofs import crosslane, gemv, gemv_mma, handoff, mma, rmsnorm
from monokernel.types import dtype

MODES = ("inorder", "random", "relaxed")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wave_size", [64, 32])
def test_rmsnorm_matches_float64_reference(mode, wave_size, rng):
    D, R, waves = 1024, 3, 2
    kern = rmsnorm.build("interp", D=D, waves=waves) if wave_size == 64 else \
        rmsnorm.build_kernel("rmsnorm", rmsnorm.body, abi=rmsnorm.ABI_, target="interp",
                             waves=waves, wave_size=32, D=D)
    inp = rmsnorm.make_inputs(rng, R=R, D=D)
    ref = rmsnorm.reference(inp)
    interp.run(kern, inp, grid=R, mode=mode, seed=7)
    assert rmsnorm.check(inp, ref) <= rmsnorm.REL_TOL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wave_size", [64, 32])
def test_crosslane_ops_match_their_definitions(mode, wave_size, rng):
    from monokernel.dsl import build_kernel
    kern = build_kernel("crosslane", crosslane.body, abi=crosslane.ABI_, target="interp",
                        waves=1, wave_size=wave_size)
    inp = crosslane.make_inputs(rng, L=wave_size)
    ref = crosslane.reference(inp, L=wave_size)
    interp.run(kern, inp, grid=1, mode=mode, seed=3)
    ints_ok, floats_ok, sum_err = crosslane.check(inp, ref, L=wave_size)
    assert ints_ok and floats_ok
    assert sum_err <= crosslane.SUM_REL_TOL


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fp8", ["fp8e4m3fn", "fp8e4m3fnuz"])
def test_gemv_fp8_block_scaled_matches_float64(mode, fp8, rng):
    from monokernel.dsl import build_kernel
    N, K, R, ctas = 256, 1024, 2, 3
    kern = build_kernel("gemv_fp8", gemv.body, abi=gemv.abi(dtype(fp8)), target="interp",
                        waves=2, N=N, K=K, R=R, fp8=dtype(fp8))
    inp = gemv.make_inputs(rng, N=N, K=K, R=R, fp8=fp8, ctas=ctas)
    ref = gemv.reference(inp, N=N, K=K, R=R, fp8=fp8)
    interp.run(kern, inp, grid=ctas, mode=mode, seed=11)
    assert not np.isnan(inp["y"]).any(), "unwritten outputs"
    assert gemv.check(inp, ref) <= gemv.REL_TOL


def _handoff(mode, seed, ctas=4, pairs=8, bulk=80, **variant):
    kern = handoff.build("interp", pairs=pairs, bulk=bulk, **variant)
    inp = handoff.make_inputs(None, ctas=ctas, pairs=pairs, bulk=bulk, tag=5)
    ref = handoff.reference(inp, ctas=ctas, pairs=pairs, bulk=bulk)
    interp.run(kern, inp, grid=ctas, mode=mode, seed=seed)
    return handoff.check(inp, ref)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mailbox_handoff_pairs_and_bulk_arrive_exactly(mode, seed):
    assert all(_handoff(mode, seed).values())


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_mailbox_bulk_handoff_without_fence_fails_under_relaxed_visibility(variant):
    """The negative control: the same kernel with the release (or the acquire) removed must
    read stale bulk data in the relaxed mode; pairs, single atomic words, still arrive."""
    results = [_handoff("relaxed", seed, **variant) for seed in range(3)]
    assert all(not r["out_bulk"] for r in results), results
    assert all(r["out_pairs"] for r in results)


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_mailbox_bulk_handoff_without_fence_passes_sequentially(variant):
    """Sequential consistency hides the missing fence: why the relaxed mode exists."""
    assert all(_handoff("inorder", 0, **variant).values())




@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", mma.ATOM_NAMES)
def test_mma_atom_matches_float64_matmul(name, mode, rng):
    kern = mma.builder(name)("interp")
    inp = mma.make_inputs(rng, name)
    ref = mma.reference(inp, name)
    interp.run(kern, inp, grid=1, mode=mode, seed=2)
    assert not np.isnan(inp["d"]).any(), "unwritten outputs"
    assert mma.check(inp, ref, name) <= mma.tolerance(name)


def test_wgmma_result_read_before_wait_is_an_error(rng):
    from monokernel.dsl import build_kernel
    from monokernel.atoms import atom
    at = atom("sm90_wgmma_m64n64k32_e4m3")

    def early(k):
        a = k.args
        lane = k.wave_id() * k.L + k.lane_id()
        k.lds("b_smem", at.b_dtype, int(at.b_smem.table().max()) + 1)
        A = mma._gather(k, a.a, a.a_idx, lane, at.a_slots, at.a_dtype)
        C = mma._gather(k, a.c, a.c_idx, lane, at.c_slots, mma.f32)
        D = k.wgmma(at, A, k.const(at.smem_descriptor(0), mma.u64), C)
        k.store(a.d, lane, D[0])  # before wgmma_wait: the hardware has not written it yet
    kern = build_kernel("early", early, abi=mma.abi(at), target="interp", waves=4, wave_size=32)
    with pytest.raises(interp.InterpError, match="read before wgmma_wait"):
        interp.run(kern, mma.make_inputs(rng, at.name), grid=1)


@pytest.mark.parametrize("groups,mode", [(1, "inorder"), (2, "inorder"), (2, "random")])
def test_wgmma_chained_accumulation_completes_in_order(rng, groups, mode):
    """Two wgmmas chained on one accumulator: D = A(B+B) + C, in one commit group before a
    single wait, or (groups=2) as two groups each waited for with no memory write between
    them (the pipelined scoring halves at step 0): when the last warp's issue completes a
    group and that warp goes on to wait for the next one, the others must be resumed. The
    interpreter once counted only memory writes as progress and reported a stall there
    (inorder mode: warps 0-2 waiting on group 1, warp 3 on group 2)."""
    from monokernel.atoms import atom
    from monokernel.dsl import build_kernel
    at = atom("sm90_wgmma_m64n64k32_e4m3")

    def chain(k):
        a = k.args
        lane = k.wave_id() * k.L + k.lane_id()
        A, C, desc = mma.wg_operands(k, at)
        k.wgmma_fence()
        D = k.wgmma(at, A, desc, C)
        if groups == 2:
            k.wgmma_commit()
            k.wgmma_wait(0)
            k.wgmma_fence()
        D = k.wgmma(at, A, desc, D)
        k.wgmma_commit()
        k.wgmma_wait(0)
        for s in range(at.c_slots):
            k.store(a.d, k.load(a.c_idx, lane * at.c_slots + s, mma.i32), D[s])
    kern = build_kernel("chain", chain, abi=mma.abi(at), target="interp", waves=4, wave_size=32)
    inp = mma.make_inputs(rng, at.name)
    ref = mma.reference(inp, at.name)
    c = inp["c"].astype(np.float64).reshape(at.M, at.N)
    expect = 2 * (ref["d"] - c) + c
    interp.run(kern, inp, grid=1, mode=mode, seed=3)
    got = inp["d"].astype(np.float64).reshape(at.M, at.N)
    assert np.abs(got - expect).max() / np.abs(expect).max() <= mma.tolerance(at.name) * 2


@pytest.mark.parametrize("fence", ["none", "barrier", "wgmma_fence"])
def test_wgmma_reading_b_not_proxy_fenced_is_an_error(rng, fence):
    """B staged in LDS by ordinary stores is read by wgmma through the async proxy: each
    writer must proxy-fence first (an async_proxy barrier, or its wgmma fence inside
    async_proxy_lds). Without either, the interpreter reports the wgmma and the writers;
    with either, the product is right. (The NVPTX build emits the proxy fence only there:
    in the scoring's key loop it waited for every load in flight.)"""
    from monokernel.atoms import atom
    from monokernel.dsl import build_kernel
    from monokernel.types import i32
    at = atom("sm90_wgmma_m64n64k32_e4m3")

    def body(k):
        a = k.args
        lane = k.wave_id() * k.L + k.lane_id()
        smem = k.lds("b_smem", at.b_dtype, int(at.b_smem.table().max()) // at.b_smem.elem_bytes + 1)
        for e0 in k.range(0, at.K * at.N, 128):
            e = e0 + lane
            k.store(smem, k.load(a.b_idx, e, i32, mask=e < at.K * at.N),
                    k.load(a.b, e, at.b_dtype, mask=e < at.K * at.N), mask=e < at.K * at.N)
        with k.async_proxy_lds() if fence == "barrier" else contextlib.nullcontext():
            k.barrier()
        A = mma._gather(k, a.a, a.a_idx, lane, at.a_slots, at.a_dtype)
        C = mma._gather(k, a.c, a.c_idx, lane, at.c_slots, mma.f32)
        with k.async_proxy_lds() if fence == "wgmma_fence" else contextlib.nullcontext():
            k.wgmma_fence()
        D = k.wgmma(at, A, k.const(at.smem_descriptor(0), mma.u64), C)
        k.wgmma_commit()
        k.wgmma_wait(0)
        for s in range(at.c_slots):
            k.store(a.d, k.load(a.c_idx, lane * at.c_slots + s, i32), D[s])
    kern = build_kernel("proxy", body, abi=mma.abi(at), target="interp", waves=4, wave_size=32)
    inp = mma.make_inputs(rng, at.name)
    ref = mma.reference(inp, at.name)
    if fence == "none":
        with pytest.raises(interp.InterpError, match=r"wave\(s\) \[0, 1, 2, 3\] wrote .* did not proxy-fence"):
            interp.run(kern, inp, grid=1, mode="inorder", seed=3)
        return
    interp.run(kern, inp, grid=1, mode="random", seed=3)
    got = inp["d"].astype(np.float64).reshape(at.M, at.N)
    want = ref["d"].astype(np.float64).reshape(at.M, at.N)
    assert np.abs(got - want).max() / np.abs(want).max() <= mma.tolerance(at.name)


@pytest.mark.parametrize("probe", [p for p in gemv_mma.PROBES if p])
def test_gemv_bench_probes_build_run_and_write_every_output(probe, rng):
    """The bench-only probes (bench/h200.py --explore) keep the GEMV's grid and ABI and
    write every output (poisoned first); an unknown probe is an error naming it."""
    N, K, R = 32, 2048, 8
    kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, probe=probe)
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R, ctas=N // 16)
    interp.run(kern, inp, grid=N // 16, mode="random", seed=3)
    assert not np.isnan(inp["y"]).any()
    with pytest.raises(ValueError, match="'bogus'"):
        gemv_mma.build("interp", N=N, K=K, R=R, waves=2, probe="bogus")


@pytest.mark.parametrize("work,tensor,ss,mem", [(0, True, False, 0), (128, False, False, 0),
                                                (128, True, False, 0), (128, True, True, 0),
                                                (0, False, False, 4), (128, True, False, 4)])
def test_wgmma_overlap_probe_runs_and_writes_every_output(work, tensor, ss, mem):
    """The bench-only overlap probe (bench/h200.py --overlap): tensor-only, work-only and
    both (A from registers, or shared memory: `ss`; with `mem` masked store + LDS count pairs)
    run in the interpreter (2 iterations, the wgmma chain retired before its result is
    carried on) and write every thread's output (poisoned first); the work-only sum is the
    host's own recurrence; work not a multiple of the chains' round is an error naming it."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from bench import mma_loops
    kern, at = mma_loops.build_overlap(work, tensor, n=64, target="interp", waves=4, a_smem=ss,
                                       mem=mem)
    src = np.random.default_rng(5).integers(0, 64, 256).astype(np.uint8)
    out = np.full(4 * 32, np.nan, np.float32)
    inp = dict(src=src, out=out, iters=np.int32(2))
    interp.run(kern, inp, grid=1, mode="random", seed=3)
    assert np.isfinite(inp["out"]).all()
    if not tensor:  # acc stays 0: the output is the chains' sum, recomputed here
        lane = np.arange(128) % 128
        w = src[lane % 256].astype(np.float32) * np.float32(-1.0 / 256)
        ep = [src[(lane + 7 * i) % 256].astype(np.float32) - np.float32(31.5)
              for i in range(mma_loops.EPI_CHAINS)]
        for _ in range(2 * work // (2 * mma_loops.EPI_CHAINS)):
            ep = [np.maximum(v, 0) * w + v for v in ep]
        want = sum(ep[1:], ep[0] + 0)
        assert np.allclose(inp["out"], want, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="work 100"):
        mma_loops.build_overlap(100, tensor, n=64, target="interp", waves=4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("R", [1, 8])
def test_gemv_fp8_on_tensor_cores_matches_float64(mode, R, rng):
    from monokernel.proofs import gemv_mma
    N, K = 32, 512
    kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2)
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R, ctas=N // 16)
    ref = gemv_mma.reference(inp, N=N, K=K, R=R)
    interp.run(kern, inp, grid=N // 16, mode=mode, seed=4)
    assert not np.isnan(inp["y"]).any(), "unwritten outputs"
    assert gemv_mma.check(inp, ref) <= gemv_mma.REL_TOL


def test_gemv_fp8_tensor_cores_with_activations_staged_in_lds(rng):
    from monokernel.proofs import gemv_mma
    N, K, R = 32, 1024, 3
    kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, unroll=4, x_in_lds=True)
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R)
    ref = gemv_mma.reference(inp, N=N, K=K, R=R)
    interp.run(kern, inp, grid=N // 16, mode="random", seed=9)
    assert gemv_mma.check(inp, ref) <= gemv_mma.REL_TOL


@pytest.mark.parametrize("mode", MODES)
def test_gemv_split_k_over_the_grid_is_exact_and_deterministic_over_launches(mode, rng):
    """Two launches on the same counters: each launch's last unit resets its tile counter, and
    the bits must not depend on which split came last."""
    from monokernel.proofs import gemv_split
    N, K, R, ctas = 32, 1024, 4, 3
    kern = gemv_split.build("interp", N=N, K=K, R=R, waves=2)
    scratch = gemv_split.scratch(N, K)
    results = []
    for seed in (5, 6):
        inp = gemv_split.make_inputs(np.random.default_rng(0), N=N, K=K, R=R, ctas=ctas)
        inp.update(scratch)
        ref = gemv_split.reference(inp, N=N, K=K, R=R)
        interp.run(kern, inp, grid=ctas, mode=mode, seed=seed)
        assert not np.isnan(inp["y"]).any()
        assert gemv_split.check(inp, ref) <= gemv_split.REL_TOL
        results.append(inp["y"].copy())
    assert np.array_equal(results[0], results[1])
    assert (scratch["counters"] == 0).all()


def test_gemv_fp8_tensor_cores_single_round_with_lds_activations(rng):
    from monokernel.proofs import gemv_mma
    N, K, R = 32, 1024, 8
    kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, unroll=4, x_in_lds=True)
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R)
    ref = gemv_mma.reference(inp, N=N, K=K, R=R)
    interp.run(kern, inp, grid=N // 16, mode="random", seed=3)
    assert gemv_mma.check(inp, ref) <= gemv_mma.REL_TOL


@pytest.mark.parametrize("mode", MODES)
def test_gemv_fp8_tensor_cores_k_split_over_ctas_is_deterministic(mode, rng):
    """ksplit CTAs per tile; the last one sums the partials in split order and resets the
    counter: two launches on the same scratch give the same bits."""
    from monokernel.proofs import gemv_mma
    N, K, R, ks = 32, 1024, 5, 4
    kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, unroll=1, ksplit=ks)
    scratch = gemv_mma.scratch(N, ks)
    outs = []
    for seed in (1, 2):
        inp = gemv_mma.make_inputs(np.random.default_rng(0), N=N, K=K, R=R)
        inp.update(scratch)
        ref = gemv_mma.reference(inp, N=N, K=K, R=R)
        interp.run(kern, inp, grid=N // 16 * ks, mode=mode, seed=seed)
        assert gemv_mma.check(inp, ref) <= gemv_mma.REL_TOL
        outs.append(inp["y"].copy())
    assert np.array_equal(outs[0], outs[1]) and (scratch["counters"] == 0).all()


@pytest.mark.parametrize("unroll,x_in_lds,ksplit", [(2, False, 1), (4, True, 1), (1, False, 2)])
def test_gemv_fp8_on_pre_permuted_weights_gives_the_same_bits(unroll, x_in_lds, ksplit, rng):
    """`flat`: the weights permuted on the host (permute_weights: a lane's two 16-byte pieces
    of a 64-k chunk, lane-major, 1 KB a (tile, chunk)) and read 512 contiguous bytes a load:
    within the float64 bound and bit-identical to the row-major kernel (same products, same
    order); the permutation is a bijection of the bytes, and a shape it cannot tile is named."""
    from monokernel.proofs import gemv_mma
    N, K, R = 32, 1024, 6
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R)
    ref = gemv_mma.reference(inp, N=N, K=K, R=R)
    perm = gemv_mma.permute_weights(inp["w"], N, K)
    tagged = np.arange(N * K, dtype=np.int64).reshape(N, K)
    moved = gemv_mma.permute_weights(tagged, N, K).reshape(-1)
    assert np.array_equal(np.sort(moved), np.arange(N * K))  # a bijection
    assert moved[16] == tagged[0, 16] and moved[512] == tagged[8, 0]  # lane 1's piece; row r+8
    outs = {}
    for flat in (True, False):
        kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, unroll=unroll,
                              x_in_lds=x_in_lds, ksplit=ksplit, flat=flat)
        run = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in inp.items()}
        if flat:
            run["w"] = perm.copy()
        if ksplit > 1:
            run.update(gemv_mma.scratch(N, ksplit))
        interp.run(kern, run, grid=N // 16 * ksplit, mode="random", seed=2)
        assert gemv_mma.check(run, ref) <= gemv_mma.REL_TOL
        outs[flat] = run["y"]
    assert np.array_equal(outs[True], outs[False])
    with pytest.raises(ValueError, match="N=24"):
        gemv_mma.permute_weights(np.zeros((24, K), np.uint8), 24, K)


@pytest.mark.parametrize("flat,ksplit,piece", [(False, 1, 256), (True, 1, 1024),
                                               (False, 2, 128), (True, 2, 512)])
def test_gemv_l2_prefetch_covers_every_weight_byte_once(flat, ksplit, piece, rng):
    """gemv_mma's l2_prefetch: each weight byte is asked of the L2 exactly once over the grid
    (none twice, none missed, no other buffer), and y is bit-identical to the build without
    it; a piece that does not divide a CTA's ranges is an error naming it."""
    N, K, R = 32, 1024, 8
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R, ctas=N // 16)
    if flat:
        inp["w"] = gemv_mma.permute_weights(inp["w"], N, K)
    grid = N // 16 * ksplit
    outs = []
    for pf in (0, piece):
        kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, ksplit=ksplit, flat=flat,
                              l2_prefetch=pf)
        run_inp = dict(inp, y=np.full_like(inp["y"], np.nan),
                       **({} if ksplit == 1 else gemv_mma.scratch(N, ksplit, L=64)))
        seen = {}
        interp.run(kern, run_inp, grid=grid, mode="random", seed=5, prefetched=seen)
        outs.append(run_inp["y"])
        if pf:
            assert set(seen) == {"w"}
            assert (seen["w"] == 1).all(), np.bincount(seen["w"])
        else:
            assert seen == {}
    assert not np.isnan(outs[0]).any()
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    with pytest.raises(ValueError, match="piece 96"):
        gemv_mma.build("interp", N=N, K=K, R=R, waves=2, l2_prefetch=96)


@pytest.mark.parametrize("ksplit,mode", [(1, "random"), (2, "relaxed")])
def test_gemv_bulk_weights_match_the_flat_gemv(ksplit, mode, rng):
    """gemv_mma bulk=True (each wave's flat weights in one bulk copy into LDS, read after its
    mbarrier wait): y bit-identical to the flat GEMV reading global memory; without the flat
    layout it is an error naming the requirement."""
    N, K, R = 32, 1024, 8
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R, ctas=N // 16)
    inp["w"] = gemv_mma.permute_weights(inp["w"], N, K)
    outs = gemv_ys(inp, [dict(flat=True), dict(flat=True, bulk=True)], N=N, K=K, R=R,
                   ksplit=ksplit, mode=mode, seed=6)
    assert not np.isnan(outs[1]).any()
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    with pytest.raises(ValueError, match="flat layout"):
        gemv_mma.build("interp", N=N, K=K, R=R, waves=2, bulk=True)
