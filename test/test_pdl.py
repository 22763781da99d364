"""Programmatic dependent launch (grid_dep_launch / grid_dep_wait, Ptr(constant=True)): the
interpreter holds a kernel to the discipline that makes an overlapped launch safe, the
backends lower the two ops (sm_90a: griddepcontrol; AMD: nothing), and the pdl GEMV gives
the bits of the plain one, in the interpreter and on the GPU in a chain of launches."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import gemv_ys, ptxas_report
from monokernel import interp
from monokernel.dsl import build_kernel
from monokernel.interp import InterpError
from monokernel.ir import ABI, Ptr
from monokernel.launch.cuda import LaunchError, check_pdl
from monokernel.proofs import gemv_mma
from monokernel.types import f32

LANES = 32
PROBE_ABI = ABI(w=Ptr(f32, constant=True), x=Ptr(f32), y=Ptr(f32))


def _scale_body(k, *, mutation=None):
    """y = w * x: w (constant) may be read before the wait, x and y only after it."""
    a = k.args
    k.grid_dep_launch()
    w = k.load(a.w, k.lane_id(), f32)
    if mutation == "read_x_early":
        w = w + k.load(a.x, k.lane_id(), f32)
    if mutation == "store_early":
        k.store(a.y, k.lane_id(), w)
    if mutation != "no_wait":
        k.grid_dep_wait()
    if mutation == "write_constant":
        k.store(a.w, k.lane_id(), w)
    k.store(a.y, k.lane_id(), w * k.load(a.x, k.lane_id(), f32))


def _probe(target="interp", mutation=None, wave_size=LANES, grid_dep=True):
    body = _scale_body if grid_dep else (
        lambda k, **_: k.store(k.args.y, k.lane_id(),
                               k.load(k.args.w, k.lane_id(), f32) * k.load(k.args.x, k.lane_id(), f32)))
    return build_kernel("pdl_probe", body, abi=PROBE_ABI, target=target, waves=1,
                        wave_size=wave_size, mutation=mutation)


def _probe_inputs(rng):
    return dict(w=rng.standard_normal(LANES).astype(np.float32),
                x=rng.standard_normal(LANES).astype(np.float32),
                y=np.full(LANES, np.nan, np.float32))


@pytest.mark.parametrize("mode", ["inorder", "random", "relaxed"])
def test_reads_after_the_wait_pass(mode, rng):
    inp = _probe_inputs(rng)
    want = inp["w"] * inp["x"]
    interp.run(_probe(), inp, mode=mode, seed=3)
    assert np.array_equal(inp["y"], want)


@pytest.mark.parametrize("mutation,message", [
    ("read_x_early", "load of 'x' before grid_dep_wait"),
    ("store_early", "store of 'y' before grid_dep_wait"),
    ("write_constant", "store to 'w', declared Ptr\\(constant=True\\)"),
])
def test_the_discipline_is_enforced(mutation, message, rng):
    """Each way an overlapped launch could read what the one before it still writes (or
    write what it still reads), and a write to a constant buffer, is an error naming the
    buffer."""
    with pytest.raises(InterpError, match=message):
        interp.run(_probe(mutation=mutation), _probe_inputs(rng))


def test_a_kernel_without_the_wait_is_not_launched_with_pdl():
    check_pdl(_probe())  # has the wait
    with pytest.raises(LaunchError, match="no grid_dep_wait"):
        check_pdl(_probe(mutation="no_wait"))


def test_sm90a_lowers_to_griddepcontrol():
    from monokernel.backend.nvptx import build_ptx
    ptx = build_ptx(_probe("sm_90a"), "sm_90a")
    lines = [ln.strip() for ln in ptx.splitlines()]
    launch, wait = lines.index("griddepcontrol.launch_dependents;"), lines.index("griddepcontrol.wait;")
    loads = [i for i, ln in enumerate(lines) if ln.startswith("ld.global")]
    assert launch < loads[0] < wait < loads[-1]  # w before the wait, x after it
    ptxas_report(ptx)


def test_amd_lowers_the_ops_to_nothing():
    pytest.importorskip("elftools")  # the code object reader (not on the GPU machine)
    from monokernel.build import build
    for chip in ("gfx950", "gfx942"):  # no overlapped launches there: the same code object
        with_ops = build(_probe(chip, wave_size=64)).data
        without = build(_probe(chip, wave_size=64, grid_dep=False)).data
        assert with_ops == without


@pytest.mark.parametrize("flat,ksplit,mode,ahead", [
    (False, 1, "random", 0), (True, 1, "relaxed", 0), (True, 2, "random", 0),
    (True, 1, "random", 2), (False, 2, "relaxed", 3)])
def test_pdl_gemv_gives_the_plain_gemvs_bits(flat, ksplit, mode, ahead, rng):
    """gemv_mma pdl=True (weights of the first blocks before grid_dep_wait), alone and with
    the software pipeline (`ahead`: weights that many blocks before their MMAs), passes the
    interpreter's discipline and gives the plain kernel's y bit for bit."""
    N, K, R = 32, 1024, 8
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R, ctas=N // 16)
    if flat:
        inp["w"] = gemv_mma.permute_weights(inp["w"], N, K)
    outs = gemv_ys(inp, [dict(flat=flat), dict(flat=flat, pdl=True, ahead=ahead)], N=N, K=K,
                   R=R, ksplit=ksplit, mode=mode, seed=4)
    assert not np.isnan(outs[1]).any()
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    with pytest.raises(ValueError, match="pdl"):
        gemv_mma.build("interp", N=N, K=K, R=R, waves=2, pdl=True, x_in_lds=True)
    with pytest.raises(ValueError, match="ahead"):
        gemv_mma.build("interp", N=N, K=K, R=R, waves=2, ahead=2, probe="read_w")


@pytest.mark.gpu
def test_pdl_chain_on_gpu(rng):
    """A chain of pdl launches where each consumes the one before (x_{i+1} = w * x_i, the
    probe kernel on the GPU) equals numpy, and the full-size pdl GEMV launched back to back
    with pdl gives the plain GEMV's bits."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings", reason="cuda.bindings is not installed")
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the PTX is for sm_90a")
    from monokernel.launch.cuda import CudaKernel
    ck = CudaKernel(_probe("sm_90a"))
    w = rng.uniform(0.5, 1.5, LANES).astype(np.float32)
    bufs = [torch.from_numpy(rng.standard_normal(LANES).astype(np.float32)).cuda()] + \
        [torch.full((LANES,), float("nan"), device="cuda") for _ in range(16)]
    wd = torch.from_numpy(w).cuda()
    for i in range(16):
        ck.launch(dict(w=wd, x=bufs[i], y=bufs[i + 1]), grid=1, sync=False, cooperative=False,
                  pdl=True)
    torch.cuda.synchronize()
    want = bufs[0].cpu().numpy()
    for i in range(16):
        want = (w * want).astype(np.float32)
    assert np.array_equal(bufs[16].cpu().numpy(), want)

    N, K, R = 2624, 6144, 8
    inp = gemv_mma.make_inputs(rng, N=N, K=K, R=R)
    dev = {n: torch.from_numpy(np.ascontiguousarray(v).view(np.uint8).copy()).cuda()
           for n, v in inp.items() if isinstance(v, np.ndarray)}
    plain = CudaKernel(gemv_mma.build("sm_90a", N=N, K=K, R=R))
    plain.launch(dict(dev, ctas=0), grid=N // 16, cooperative=False)
    y = dev["y"].clone()
    for kw in (dict(), dict(ahead=2, ctas_per_sm=2)):
        pdl = CudaKernel(gemv_mma.build("sm_90a", N=N, K=K, R=R, pdl=True, **kw))
        for _ in range(4):
            dev["y"].fill_(255)
            pdl.launch(dict(dev, ctas=0), grid=N // 16, cooperative=False, sync=False, pdl=True)
        torch.cuda.synchronize()
        assert torch.equal(dev["y"], y), kw


# ---------------------------------------------------------------- the linked launch kinds

def _front(rows=4, kv="fp8", target="interp", pdl=False):
    from spec import BuildSpec
    from stages import front as F
    L = F.front_launch(BuildSpec.make("tiny", rows=rows, kv=kv, target=target))
    L.pdl = pdl
    return L


@pytest.mark.parametrize("mode", ["random", "relaxed"])
def test_pdl_front_gives_the_same_bits_and_prefetches_each_first_jobs_weights(mode):
    """front linked with pdl (grid_dep_launch, the CTA's first job's weight rows asked of the
    L2, grid_dep_wait, then the jobs) passes the interpreter's discipline (nothing but the
    constant schedule and weights touched before the wait) and gives the plain launch's bits;
    each CTA whose first job is a projection job prefetched exactly that job's rows."""
    from stages import front as F
    outs, seen = [], {}
    for pdl in (False, True):
        L = _front(pdl=pdl)
        inp = F.make_inputs(L.plan, np.random.default_rng(5))
        res = L.run_interp(dict(inp, qr=inp["qr"].copy(), kv_cache=inp["kv_cache"].copy()),
                           step=0, mode=mode, seed=2, prefetched=seen if pdl else None)
        outs.append((res.outputs["qr"], res.outputs["kv_cache"]))
    for a, b in zip(*outs):
        assert np.array_equal(a, b)
    p = L.plan
    firsts = [jobs[0] for jobs in L.schedule.cta_jobs if jobs]
    proj = [j for (stage, j) in firsts if stage == "front_proj"]
    want = np.zeros((p.n_out, p.hidden), np.int64)
    for j in proj:
        t, s = divmod(j, p.splits)
        want[t * F.TILE_N:(t + 1) * F.TILE_N, s * p.chunk:(s + 1) * p.chunk] = 1
    assert proj and set(seen) == {"qkv_a_w"}
    assert np.array_equal(seen["qkv_a_w"].reshape(p.n_out, p.hidden), want)


def test_pdl_front_ptx_waits_and_amd_is_unchanged():
    from monokernel.backend.nvptx import build_ptx
    ptx = build_ptx(_front(target="sm_90a", pdl=True).kernel("sm_90a"), "sm_90a")
    # (LLVM may copy the wait into each branch of the table check: one runs)
    assert "griddepcontrol.wait;" in ptx and ptx.count("griddepcontrol.launch_dependents;") == 1
    assert "cp.async.bulk.prefetch.L2" in ptx
    plain = build_ptx(_front(target="sm_90a").kernel("sm_90a"), "sm_90a")
    assert "griddepcontrol" not in plain
    pytest.importorskip("elftools")
    from monokernel.build import build
    for chip in ("gfx950", "gfx942"):
        a = build(_front(target=chip, pdl=True).kernel(chip)).data
        b = build(_front(target=chip).kernel(chip)).data
        assert a == b  # no overlapped launches on AMD: the ops and the L2 hints lower to nothing


def test_a_buffer_is_not_both_an_output_and_constant():
    from stages.base import Buffer
    assert Buffer(f32, (4,), constant=True).ptr.constant
    with pytest.raises(ValueError, match="both an output and constant"):
        Buffer(f32, (4,), output=True, constant=True)
