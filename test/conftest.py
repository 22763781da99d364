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
