import os

import numpy as np
import pytest

MODES = ("inorder", "random", "relaxed")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def pytest_collection_modifyitems(config, items):
    """GPU and emulator tests skip (visibly, with a reason) where their machine is absent."""
    have_gpu = False
    try:
        import torch
        have_gpu = torch.cuda.is_available()
    except Exception:
        pass
    have_emu = bool(os.environ.get("MONOKERNEL_TINYGRAD"))
    for item in items:
        if "gpu" in item.keywords and not have_gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU on this machine"))
        if "emulator" in item.keywords and not have_emu:
            item.add_marker(pytest.mark.skip(reason="MONOKERNEL_TINYGRAD names no tinygrad tree"))


PTXAS_PATHS = ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas")


def ptxas_report(ptx: str, arch: str = "sm_90a"):
    """ptxas -v's stderr for `ptx` where a ptxas is installed (None elsewhere: the caller's
    check then rests on the PTX alone); fails the test if ptxas rejects the PTX."""
    import subprocess
    import tempfile
    exe = next((p for p in PTXAS_PATHS if os.path.exists(p)), None)
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([exe, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.o")],
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stderr


# local memory an sm_90a rows-8 index build may hold in its persistent job loop, outside
# every inner loop (IndexScore.narrow_prefetch: 4 bytes, reloaded once a job; the selection's
# lean listing loop, SelectConfig.lean_scan: 16 more, measured faster with them, bench/
# NOTES.md v22); a key or scan loop holds none (tools.sass.inner_loop_spills, where nvdisasm
# is installed)
JOB_LOOP_SPILL_BYTES = 20


def check_job_loop_spills(report: str, ptx: str):
    """ptxas's report of `ptx`: at most JOB_LOOP_SPILL_BYTES of spill stores, none of them
    (where nvdisasm is installed) inside a loop of the job loop."""
    import re
    from tools import sass
    spilled = int(re.search(r"(\d+) bytes spill stores", report).group(1))
    assert spilled <= JOB_LOOP_SPILL_BYTES, report
    if spilled and sass.find_tool("nvdisasm"):
        assert not sass.inner_loop_spills(*sass.parse(sass.disassemble(ptx))), report


def gemv_ys(inp, builds, *, N, K, R, ksplit=1, mode="random", seed=0):
    """y of gemv_mma built with each keyword set in `builds` (2 waves, the interpreter), each
    run on a NaN-poisoned copy of y (and fresh split scratch): the proof GEMV's variants
    compared bit for bit by the tests that add one."""
    from monokernel import interp
    from monokernel.proofs import gemv_mma
    ys = []
    for kw in builds:
        kern = gemv_mma.build("interp", N=N, K=K, R=R, waves=2, ksplit=ksplit, **kw)
        run_inp = dict(inp, y=np.full_like(inp["y"], np.nan),
                       **({} if ksplit == 1 else gemv_mma.scratch(N, ksplit, L=32)))
        interp.run(kern, run_inp, grid=N // 16 * ksplit, mode=mode, seed=seed)
        ys.append(run_inp["y"])
    return ys
