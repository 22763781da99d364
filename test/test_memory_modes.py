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


def drop_device_acquires(monkeypatch):
    """Every kernel built from now on (in the test) without its device-scope acquire fences."""
    real = KernelBuilder.fence

    def fence(self, order="acq_rel", scope="device"):
        if order == "acquire" and scope in ("device", "system"):
            return None
        return real(self, order, scope)
    monkeypatch.setattr(KernelBuilder, "fence", fence)


@pytest.mark.parametrize("name", kinds.default_names())
def test_every_kind_needs_its_acquires_in_acquire_only_mode(name, monkeypatch):
    assert _errors(name) == {}, name
    drop_device_acquires(monkeypatch)
    assert _errors(name) != {}, f"{name}: no check failed with every device acquire dropped"


def _word(x: int) -> np.ndarray:
    return np.array([x], np.uint64).view(np.uint8)


def test_causal_memory_makes_visible_only_the_releases_observed():
    """CausalMemory (acquire_only's model), on its own: CTA 2 polls CTA 0's flag and
    acquires: it sees CTA 0's data, not CTA 1's (released, never observed; RelaxedMemory's
    acquire shows both); after it observes CTA 1's flag and acquires again, it does. A
    counter's read-modify-writes carry every publisher's data (a release sequence), and a
    release carries what its CTA had acquired (cumulativity)."""
    from monokernel.memory import ADDR_SHIFT, CausalMemory, RelaxedMemory
    idx = np.arange(8)

    def setup(mem):
        data = mem.add("data", np.zeros(4, np.uint64))
        flags = mem.add("flags", np.zeros(4, np.uint64))
        return (data >> ADDR_SHIFT) - 1, (flags >> ADDR_SHIFT) - 1

    def publish(mem, cta, d, f, slot, value, rmw=False):
        mem.plain_store(cta, d, idx + 8 * slot, _word(value))
        mem.release(cta)
        if rmw:
            old = mem.atomic_load(f, idx + 8 * 3, cta).view(np.uint64)[0]
            mem.atomic_store(cta, f, idx + 8 * 3, _word(old + 1), rmw=True)
        else:
            mem.atomic_store(cta, f, idx + 8 * slot, _word(1))

    def seen(mem, cta, d, slot):
        return int(mem.plain_load(cta, d, idx + 8 * slot).view(np.uint64)[0])

    for model, unobserved in ((RelaxedMemory, 11), (CausalMemory, 0)):  # (Causal's goes on)
        mem = model(4)
        d, f = setup(mem)
        publish(mem, 0, d, f, 0, 10)
        publish(mem, 1, d, f, 1, 11)
        mem.atomic_load(f, idx, 2)  # CTA 2 polls CTA 0's flag only
        mem.acquire(2)
        assert (seen(mem, 2, d, 0), seen(mem, 2, d, 1)) == (10, unobserved), model.__name__
    mem.atomic_load(f, idx + 8, 2)
    mem.acquire(2)
    assert seen(mem, 2, d, 1) == 11
    # a counter's publishers: the reader of its last count sees them all
    mem = CausalMemory(4)
    d, f = setup(mem)
    publish(mem, 0, d, f, 0, 20, rmw=True)
    publish(mem, 1, d, f, 1, 21, rmw=True)
    mem.atomic_load(f, idx + 8 * 3, 2)
    mem.acquire(2)
    assert (seen(mem, 2, d, 0), seen(mem, 2, d, 1)) == (20, 21)
    # cumulativity: CTA 1 acquires CTA 0's data, releases its own flag; CTA 2 observes that
    mem = CausalMemory(4)
    d, f = setup(mem)
    publish(mem, 0, d, f, 0, 30)
    mem.atomic_load(f, idx, 1)
    mem.acquire(1)
    publish(mem, 1, d, f, 1, 31)
    mem.atomic_load(f, idx + 8, 2)
    mem.acquire(2)
    assert (seen(mem, 2, d, 0), seen(mem, 2, d, 1)) == (30, 31)
    assert seen(mem, 3, d, 0) == 0  # CTA 3 observed nothing


def test_the_check_tools_take_every_interpreter_mode():
    """check_layer and check_topk's --mode offers every mode the interpreter has (acquire_only
    included) and refuses another, naming it."""
    from monokernel.interp import MODES
    from tools import check_layer, check_topk
    for tool in (check_layer, check_topk):
        ap = tool._parser()
        assert [ap.parse_args(["--mode", m]).mode for m in MODES] == list(MODES)
        with pytest.raises(SystemExit):
            ap.parse_args(["--mode", "sloppy"])
