"""The interpreter's acquire_only mode (monokernel/interp.py) against every kind the build makes:
each launch passes its checks in it, and fails them with every device-scope acquire fence
dropped from its kernel (a consumer then reads another CTA's plain stores stale). Why the
mode exists: the relaxed mode's random refreshes come during a long poll often enough to hide
a missing acquire (bench/NOTES.md v59: a scoring job's wait), so a kind's dropped acquires
must show here, whatever its waits' lengths.
"""
from __future__ import annotations

import numpy as np
import pytest

from monokernel.dsl import KernelBuilder
from monokernel.interp import InterpError, Stall
from monokernel.link import LaunchFailed
from spec import BuildSpec
from stages import kinds
from tools import common

ROWS = 2
SEED = 3


def _errors(name: str, rows: int = ROWS):
    """The checks' failures ({name: error} of the outputs past their tolerances, or the
    run's own error) of kind `name` (tiny, interp) run once in acquire_only mode."""
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    kind = kinds.kind(name)
    L = common.launch_for(kind, spec)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(SEED), None, "W1")
    try:
        r = L.run_interp(inp, step=0, mode="acquire_only", seed=SEED)
    except (LaunchFailed, Stall, InterpError) as e:  # stale counts may derail a loop
        return {"run": str(e)[:200]}
    errs = common.reference_errors(L, inp, r.outputs, r.regions)
    exact = getattr(L, "exact_errors", None)
    errs.update(exact(inp, r.outputs, r.regions) if exact else {})
    return {n: e for n, e in errs.items() if not e["ok"]}


def _drop_device_acquires(monkeypatch):
    real = KernelBuilder.fence

    def fence(self, order="acq_rel", scope="device"):
        if order == "acquire" and scope in ("device", "system"):
            return None
        return real(self, order, scope)
    monkeypatch.setattr(KernelBuilder, "fence", fence)


@pytest.mark.parametrize("name", kinds.default_names())
def test_every_kind_needs_its_acquires_in_acquire_only_mode(name, monkeypatch):
    assert _errors(name) == {}, name
    _drop_device_acquires(monkeypatch)
    assert _errors(name) != {}, f"{name}: no check failed with every device acquire dropped"
