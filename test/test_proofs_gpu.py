"""The proof kernels on a real GPU (the H200): each against its float64 reference, as in the
interpreter, plus the hand-off at full grid (132 co-resident CTAs) and its fence mutations.
Skipped with the reason where there is no CUDA GPU."""
from __future__ import annotations

import numpy as np
import pytest

from monokernel.proofs import crosslane, gemv, gemv_mma, handoff, mma, rmsnorm

pytestmark = pytest.mark.gpu
FULL_GRID = 132


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    pytest.importorskip("cuda.bindings", reason="cuda.bindings is not installed")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the PTX is for sm_90a")
    return torch


def run(torch, kern, inp, grid, cooperative=True):
    """Copy numpy inputs to the GPU, launch, copy every array back in place."""
    from monokernel.launch.cuda import CudaKernel
    dev = {n: torch.from_numpy(np.ascontiguousarray(v).view(np.uint8).copy()).cuda()
           if isinstance(v, np.ndarray) else v for n, v in inp.items()}
    CudaKernel(kern).launch(dev, grid=grid, cooperative=cooperative)
    for n, v in inp.items():
        if isinstance(v, np.ndarray):
            v.reshape(-1).view(np.uint8)[:] = dev[n].cpu().numpy().reshape(-1)
    return inp


def test_rmsnorm_on_gpu(torch, rng):
    D, R = 6144, 8
    inp = rmsnorm.make_inputs(rng, R=R, D=D)
    ref = rmsnorm.reference(inp)
    run(torch, rmsnorm.build("sm_90a", D=D, waves=4), inp, grid=R)
    assert rmsnorm.check(inp, ref) <= rmsnorm.REL_TOL


def test_crosslane_on_gpu(torch, rng):
    inp = crosslane.make_inputs(rng, L=32)
    ref = crosslane.reference(inp, L=32)
    run(torch, crosslane.build("sm_90a"), inp, grid=1)
    ints_ok, floats_ok, sum_err = crosslane.check(inp, ref, L=32)
    assert ints_ok and floats_ok and sum_err <= crosslane.SUM_REL_TOL


@pytest.mark.parametrize("R", [1, 8])
def test_gemv_fp8_on_gpu(torch, R, rng):
    N, K = 2624, 6144
    inp = gemv.make_inputs(rng, N=N, K=K, R=R, ctas=FULL_GRID)
    ref = gemv.reference(inp, N=N, K=K, R=R)
    run(torch, gemv.build("sm_90a", N=N, K=K, R=R), inp, grid=FULL_GRID)
    assert gemv.check(inp, ref) <= gemv.REL_TOL
    inp2 = gemv_mma.make_inputs(rng, N=N, K=K, R=R)
    ref2 = gemv_mma.reference(inp2, N=N, K=K, R=R)
    run(torch, gemv_mma.build("sm_90a", N=N, K=K, R=R), inp2, grid=N // gemv_mma.TILE_N,
        cooperative=False)
    assert gemv_mma.check(inp2, ref2) <= gemv_mma.REL_TOL
    y = inp2["y"].copy()
    inp3 = dict(inp2, w=gemv_mma.permute_weights(inp2["w"], N, K),
                y=np.full_like(inp2["y"], np.nan))  # pre-permuted weights: the same bits
    run(torch, gemv_mma.build("sm_90a", N=N, K=K, R=R, flat=True), inp3,
        grid=N // gemv_mma.TILE_N, cooperative=False)
    assert np.array_equal(inp3["y"], y)
    inp5 = dict(inp3, y=np.full_like(inp2["y"], np.nan))  # flat weights by bulk copies
    run(torch, gemv_mma.build("sm_90a", N=N, K=K, R=R, flat=True, bulk=True), inp5,
        grid=N // gemv_mma.TILE_N, cooperative=False)
    assert np.array_equal(inp5["y"], y)
    for flat, piece in ((False, 1536), (True, 384)):  # weights asked of the L2 first: a hint
        inp4 = dict(inp3 if flat else inp2, y=np.full_like(inp2["y"], np.nan))
        run(torch, gemv_mma.build("sm_90a", N=N, K=K, R=R, flat=flat, l2_prefetch=piece), inp4,
            grid=N // gemv_mma.TILE_N, cooperative=False)
        assert np.array_equal(inp4["y"], y), (flat, piece)


@pytest.mark.parametrize("name", [n for n in mma.ATOM_NAMES if n.startswith("sm90")])
def test_mma_atoms_on_gpu(torch, name, rng):
    inp = mma.make_inputs(rng, name)
    ref = mma.reference(inp, name)
    run(torch, mma.builder(name)("sm_90a"), inp, grid=1)
    # wgmma e4m3 adds products at about 14 significant bits on Hopper (measured), so its
    # bound is 2^-11 of the sum of |terms|; mma.sync accumulates in f32
    tol = 2.0 ** -11 * 4 if "wgmma" in name else mma.tolerance(name)
    assert mma.check(inp, ref, name) <= tol


@pytest.mark.parametrize("round_", [0, 1, 2])
def test_mailbox_handoff_at_full_grid_on_gpu(torch, round_):
    pairs, bulk = 64, 256
    kern = handoff.build("sm_90a", pairs=pairs, bulk=bulk)
    inp = handoff.make_inputs(None, ctas=FULL_GRID, pairs=pairs, bulk=bulk, tag=7 + round_)
    ref = handoff.reference(inp, ctas=FULL_GRID, pairs=pairs, bulk=bulk)
    run(torch, kern, inp, grid=FULL_GRID)
    assert all(handoff.check(inp, ref).values())


@pytest.mark.parametrize("variant", [dict(release=False), dict(acquire=False)],
                         ids=["no_release", "no_acquire"])
def test_mailbox_fence_mutations_on_gpu_report(torch, variant, capsys):
    """The mutations are RUN on the GPU and what happened is reported, not asserted: real
    hardware may or may not expose a missing fence in a given run (that is why the
    interpreter's relaxed mode exists); the pairs, single atomic words, must still arrive."""
    pairs, bulk = 64, 4096
    kern = handoff.build("sm_90a", pairs=pairs, bulk=bulk, **variant)
    stale = 0
    for t in range(20):
        inp = handoff.make_inputs(None, ctas=FULL_GRID, pairs=pairs, bulk=bulk, tag=100 + t)
        ref = handoff.reference(inp, ctas=FULL_GRID, pairs=pairs, bulk=bulk)
        run(torch, kern, inp, grid=FULL_GRID)
        res = handoff.check(inp, ref)
        assert res["out_pairs"] and res["err"]
        stale += int(not res["out_bulk"])
    with capsys.disabled():
        print(f"\n[{'/'.join(variant)}=False] stale bulk reads in {stale} of 20 full-grid runs")


@pytest.mark.parametrize("steps", [3, 6])
def test_tma_keys_ring_on_gpu(torch, rng, steps):
    """Pages of keys copied by TMA with SWIZZLE_128B (the tensor map encoded by the launcher
    from the cache tensor) and scored by SS wgmma through the 128B-swizzled A descriptor:
    against float64, and equal to the interpreter's run of the same kernel to the wgmma
    sums' tolerance. A wrong placement model or descriptor reads other bytes: O(1) errors."""
    from monokernel import interp
    from monokernel.proofs import tma_keys as tk
    inp = tk.make_inputs(rng, steps=steps)
    ref = tk.reference(inp, steps=steps)
    mine = {n: v.copy() for n, v in inp.items()}
    interp.run(tk.build("interp", steps=steps), mine, grid=1)
    run(torch, tk.build("sm_90a", steps=steps), inp, grid=1)
    assert tk.check(inp, ref, steps=steps) <= tk.tolerance()
    np.testing.assert_allclose(inp["d"], mine["d"], rtol=tk.tolerance(), atol=tk.tolerance())


def test_a_tensor_map_first_made_inside_a_graph_capture_is_warned_of(torch, rng):
    """A launch whose TMA descriptor is encoded inside a CUDA graph capture captures the
    descriptor's host copy, replayed before every launch (the v50b timing artefact): warned
    of by name; after a launch outside the capture, the same buffers capture silently and
    the graph's launch still scores right."""
    import warnings
    from monokernel.launch.cuda import CudaKernel
    from monokernel.proofs import tma_keys as tk
    inp = tk.make_inputs(rng, steps=3)
    ref = tk.reference(inp, steps=3)
    kern = CudaKernel(tk.build("sm_90a", steps=3))
    dev = {n: torch.from_numpy(np.ascontiguousarray(v).view(np.uint8).copy()).cuda()
           if isinstance(v, np.ndarray) else v for n, v in inp.items()}

    def capture():
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
            kern.launch(dev, grid=1, sync=False, cooperative=False)
        return g
    with pytest.warns(RuntimeWarning, match="first seen inside a CUDA graph capture"):
        capture()
    kern = CudaKernel(tk.build("sm_90a", steps=3))  # (no descriptor cached)
    kern.launch(dev, grid=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = capture()
    assert not [w for w in caught if "graph capture" in str(w.message)]
    g.replay()
    torch.cuda.synchronize()
    for n, v in inp.items():
        if isinstance(v, np.ndarray):
            v.reshape(-1).view(np.uint8)[:] = dev[n].cpu().numpy().reshape(-1)
    assert tk.check(inp, ref, steps=3) <= tk.tolerance()
