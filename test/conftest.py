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
