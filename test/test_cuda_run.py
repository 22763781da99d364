"""The NVPTX backend and the CUDA launcher on a real GPU (an H200): the kernels of
test_nvptx.py run through monokernel.launch.cuda and must give what the interpreter gives,
bit for bit for integers, cross-lane results, casts and hand-offs (NaN payloads aside), and
to f32 tolerance for MMA sums. Skipped, with the reason, where there is no CUDA GPU, no
cuda.bindings, or a GPU other than sm_90 (the PTX is sm_90a)."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from monokernel import interp, numerics

pytestmark = pytest.mark.gpu

try:  # test/ is on sys.path under pytest's default (prepend) import mode
    import test_nvptx as cases
except ImportError:  # pragma: no cover
    import importlib.util
    import pathlib
    _p = pathlib.Path(__file__).with_name("test_nvptx.py")
    _spec = importlib.util.spec_from_file_location("test_nvptx", _p)
    cases = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(cases)


@pytest.fixture(scope="module")
def torch():
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU")
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        pytest.skip("cuda.bindings (cuda-python) is not installed")
    try:
        import llvmlite  # noqa: F401
    except ImportError:
        pytest.skip("llvmlite is not installed: no PTX can be built")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0):
        pytest.skip(f"the PTX is for sm_90a; this GPU is sm_{cc[0]}{cc[1]}")
    return torch


_LOADED: dict = {}


def loaded(name):
    from monokernel.launch.cuda import CudaKernel
    if name not in _LOADED:
        case = cases.CASE[name]
        _LOADED[name] = CudaKernel(case.build(), cases.ptx_of(name))
    return _LOADED[name]


def run_gpu(torch, name, args, grid):
    """Launch case `name` on copies of the numpy arguments; returns the arrays it wrote."""
    ck = loaded(name)
    dev = torch.device("cuda", ck.device)
    tens, out = {}, {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            raw = np.ascontiguousarray(v).view(np.uint8).reshape(-1)
            tens[k] = torch.from_numpy(raw.copy()).to(dev)
        else:
            tens[k] = v
    ck.launch(tens, grid=grid)
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            out[k] = tens[k].cpu().numpy().view(v.dtype).reshape(v.shape)
    return out


def run_interp(name, args, grid):
    case = cases.CASE[name]
    a = cases.interp_args(case, args)
    interp.run(case.build(), a, grid=grid, **case.interp_kw)
    return a


def _bits(x):
    x = np.ascontiguousarray(x)
    return x.view({2: np.uint16, 4: np.uint32, 8: np.uint64, 1: np.uint8}[x.dtype.itemsize])


def compare(name, got, want, what="interpreter", bound=None):
    case = cases.CASE[name]
    for out in case.outputs:
        g, w = got[out], want[out]
        if out in case.same:
            case.same[out](g, w)
            continue
        if bound is not None and out in bound:
            err = np.abs(g.astype(np.float64) - w.astype(np.float64))
            bad = ~((err <= bound[out]) | (np.isnan(g) & np.isnan(w)))
            print(f"{name}.{out}: max |gpu - {what}| = {err.max():.3g}, "
                  f"max |gpu - {what}| / bound = {(err / bound[out]).max():.3g}")
        elif out in case.decode:
            dt = case.decode[out]
            gn, wn = np.isnan(numerics.to_f64(g, dt)), np.isnan(numerics.to_f64(w, dt))
            bad = ~((g == w) | (gn & wn))
        elif out in case.floats and case.floats[out] != (0, 0):
            rtol, atol = case.floats[out]
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"{name}.{out} vs the {what}")
            continue
        elif out in case.floats:  # bit-exact floats; any NaN equals any NaN
            bad = ~((_bits(g) == _bits(w)) | (np.isnan(g) & np.isnan(w)))
        else:
            bad = _bits(g) != _bits(w)
        if bad.any():
            idx = np.argwhere(bad)[:8]
            detail = ", ".join(f"{tuple(int(i) for i in ix)}: gpu {g[tuple(ix)]!r} vs "
                               f"{w[tuple(ix)]!r}" for ix in idx)
            pytest.fail(f"{name}.{out}: {int(bad.sum())} element(s) differ from the {what}: "
                        f"{detail}")


SIMPLE = ["vscale", "xlane", "atomics", "casts", "lds_barrier", "lds_big", "mma_bf16",
          "mma_e4m3", "wgmma16", "wgmma256", "turns", "relu_pack", "wgmma_relu", "async_ring"]


@pytest.mark.parametrize("name", SIMPLE)
def test_gpu_matches_interpreter(torch, name):
    case = cases.CASE[name]
    rng = np.random.default_rng(20261129)
    grid = case.grid
    args = case.args(rng, grid)
    want = run_interp(name, args, grid)
    got = run_gpu(torch, name, cases.interp_args(case, args), grid)
    bound = case.bound(args) if case.bound is not None else None
    compare(name, got, want, bound=bound)
    if case.reference is not None:
        compare(name, got, case.reference(args), "numpy reference", bound=bound)


def test_tagged_pair_ring_at_full_grid(torch):
    """Two rounds of hand-offs through all CTAs (132 on the H200), co-resident through a
    cooperative launch, polls bounded; equal to the interpreter at the same grid, twice."""
    name = "handoff"
    ck = loaded(name)
    grid = ck.num_sms
    assert grid <= ck.max_resident
    case = cases.CASE[name]
    args = case.args(np.random.default_rng(1), grid)
    want = run_interp(name, args, grid)
    for _ in range(2):
        got = run_gpu(torch, name, cases.interp_args(case, args), grid)
        assert got["err"][0] == 0, f"polls timed out in CTAs {np.nonzero(got['who'])[0].tolist()}"
        assert got["timeouts"].tolist() == [1] * grid  # the poll nothing answers ran out
        assert got["clockok"].tolist() == [1] * grid
        compare(name, got, want)


def test_grid_beyond_coresidency_is_refused(torch):
    from monokernel.launch.cuda import LaunchError
    ck = loaded("handoff")
    case = cases.CASE["handoff"]
    args = case.args(np.random.default_rng(1), ck.max_resident + 1)
    with pytest.raises(LaunchError, match="cannot be co-resident"):
        run_gpu(torch, "handoff", cases.interp_args(case, args), ck.max_resident + 1)


def test_bad_arguments_are_refused_naming_the_kernel(torch):
    from monokernel.launch.cuda import LaunchError
    ck = loaded("vscale")
    with pytest.raises(LaunchError, match="kernel vscale: .*missing"):
        ck.launch(dict(x=torch.zeros(4, device="cuda")), grid=1)
    x = torch.zeros(512, device="cuda")
    with pytest.raises(LaunchError, match="does not fit i32"):
        ck.launch(dict(x=x, out=x, out4=x, n=1 << 40, s=1.0), grid=1)
    with pytest.raises(LaunchError, match="CUDA tensor"):
        ck.launch(dict(x=np.zeros(4), out=x, out4=x, n=1, s=1.0), grid=1)


def test_big_lds_raised_the_dynamic_limit(torch):
    ck = loaded("lds_big")
    assert ck.smem == cases.BIG_WORDS * 4 > 48 * 1024
    assert ck.max_resident >= 1


def test_resource_figures(torch):
    """Registers and local memory of every case (printed; no case may spill)."""
    rows = []
    for name in [c.name for c in cases.CASES]:
        ck = loaded(name)
        rows.append(f"{name:12s} regs {ck.regs:3d} local {ck.local_bytes:4d} "
                    f"smem {ck.smem:6d} ctas/SM {ck.ctas_per_sm}")
        assert ck.local_bytes == 0, rows[-1]
    print("\n" + "\n".join(rows))


def test_ptxas_accepts_every_case(torch, tmp_path):
    """ptxas (where the machine has it) assembles each PTX for sm_90a; its figures and any
    warning (e.g. serialized wgmma: a slow path, not a wrong one) are printed."""
    ptxas = shutil.which("ptxas") or next(
        (p for p in ("/usr/local/cuda/bin/ptxas",) if os.path.exists(p)), None)
    if ptxas is None:
        pytest.skip("no ptxas on this machine")
    for c in cases.CASES:
        f = tmp_path / f"{c.name}.ptx"
        f.write_text(cases.ptx_of(c.name))
        p = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(f), "-o", str(f.with_suffix(".cubin"))],
                           capture_output=True, text=True)
        assert p.returncode == 0, f"{c.name}: ptxas failed:\n{p.stderr}"
        print(f"{c.name}: " + " | ".join(ln.strip() for ln in p.stderr.splitlines()
                                         if "Used" in ln or "warning" in ln.lower()))


def test_plain_launch_through_the_module_cache(torch):
    """`launch()` builds once per kernel object; a non-cooperative launch runs too."""
    from monokernel.launch import cuda as mkcuda
    case = cases.CASE["vscale"]
    kern = case.build()
    args = case.args(np.random.default_rng(3), 2)
    want = run_interp("vscale", args, 2)
    dev = {k: (torch.from_numpy(v.copy()).cuda() if isinstance(v, np.ndarray) else v)
           for k, v in cases.interp_args(case, args).items()}
    ck = mkcuda.launch(kern, dev, grid=2, cooperative=False)
    assert mkcuda.launch(kern, dev, grid=2) is ck  # cached: no second build or load
    got = {k: v.cpu().numpy() for k, v in dev.items() if hasattr(v, "cpu")}
    compare("vscale", got, want)
