"""Named barriers (KernelBuilder.named_barrier: bar.sync / bar.arrive id, count on sm_90a):
the interpreter's semantics and the errors that keep a turn protocol honest.

  * the shared `turns` kernel (test_nvptx.py; test_cuda_run.py runs it on the H200): two
    groups of waves alternate strictly, in every interpreter mode and several schedules;
    without the barriers the random schedules break the alternation (the check can fail);
  * a protocol that leaves arrivals no completion uses (group 0 skips its last wait) is a
    Stall at the kernel's end, one that waits for an arrival nobody makes is a Stall;
  * bad ids, counts and targets are DSL errors naming them.
"""
import numpy as np
import pytest

from monokernel import interp
from monokernel.dsl import ABI, DSLError, Ptr, build_kernel
from monokernel.interp import Stall
from monokernel.types import i32

import test_nvptx as cases

GRID = 3
ABI_TURNS = ABI(counter=Ptr(i32), out=Ptr(i32))


def _run(mode, seed, **kw):
    kern = build_kernel("turns", cases._turns, abi=ABI_TURNS, target="interp",
                        waves=2 * cases.TURN_GROUP, wave_size=32, **kw)
    args = cases._turns_args(None, GRID)
    interp.run(kern, args, grid=GRID, mode=mode, seed=seed)
    return args


@pytest.mark.parametrize("mode,seed", [("inorder", 0), ("random", 1), ("random", 2),
                                       ("relaxed", 3)])
def test_groups_take_strict_turns(mode, seed):
    _check_turns(mode, seed)


def _check_turns(mode, seed):
    """The turns kernel's outputs equal its reference (the strict alternation)."""
    got = _run(mode, seed)
    want = cases._turns_reference(got)
    assert np.array_equal(got["out"], want["out"]), got["out"].reshape(GRID, -1, cases.TURN_STEPS)
    assert np.array_equal(got["counter"], want["counter"])


def test_without_the_barriers_random_schedules_break_the_turns():
    """The negative control: the same kernel without named barriers."""
    broken = 0
    for seed in range(4):
        got = _run("random", seed, named=False)
        broken += not np.array_equal(got["out"], cases._turns_reference(got)["out"])
    assert broken, "the alternation held without barriers: the turn check cannot fail"


def test_arrivals_left_over_are_a_stall():
    with pytest.raises(Stall, match="named barriers left with arrivals.*id 1: 2"):
        _run("inorder", 0, final_sync=False)


def test_waiting_for_an_arrival_nobody_makes_is_a_stall():
    def body(k):
        k.named_barrier(1, 2)  # both waves wait, nobody arrives: completes (2 waves) ...
        with k.if_(k.wave_id().eq(0)):
            k.named_barrier(2, 2)  # ... but here wave 1 never comes
        k.store(k.args.out, k.wave_id(), k.const(1, i32), mask=k.lane_id().eq(0))
    kern = build_kernel("lonely", body, abi=ABI(out=Ptr(i32)), target="interp", waves=2,
                        wave_size=32)
    with pytest.raises(Stall, match="named barrier 2"):
        interp.run(kern, dict(out=np.zeros(2, np.int32)), grid=1)


@pytest.mark.parametrize("kw,target,msg", [
    (dict(bid=0, waves=2), "interp", "named barrier id 0"),
    (dict(bid=16, waves=2), "interp", "named barrier id 16"),
    (dict(bid=1, waves=5), "interp", "named barrier of 5 waves: this CTA has 4"),
    (dict(bid=1, waves=2), "gfx950", "named barriers exist on NVIDIA targets, not gfx950"),
])
def test_bad_named_barriers_are_refused(kw, target, msg):
    def body(k):
        k.named_barrier(kw["bid"], kw["waves"])
    with pytest.raises(DSLError, match=msg):
        build_kernel("bad", body, abi=ABI(out=Ptr(i32)), target=target, waves=4)


# ------------------------------------------------------------------ the runnable-wave cache

def _check_runnable(monkeypatch):
    monkeypatch.setattr(interp.Run, "check_runnable", True)


@pytest.mark.parametrize("mode,seed", [("random", 1), ("random", 2), ("relaxed", 3)])
def test_the_kept_runnable_list_is_the_rebuilt_one(monkeypatch, mode, seed):
    """The scheduler keeps its list of runnable waves between the bumps of waits_changed
    (named barriers, CTA barriers, exits); rebuilt every step (Run.check_runnable) it is the
    same list at every step: the turns kernel, and waves that leave the CTA barrier loop at
    different times."""
    _check_runnable(monkeypatch)
    _check_turns(mode, seed)

    def body(k):
        for _ in range(3):
            k.store(k.args.out, k.cta_id() * 4 + k.wave_id(), k.wave_id(), mask=k.lane_id().eq(0))
            k.barrier()
        with k.if_(k.wave_id().eq(0)):  # wave 0 alone after the others have exited
            for _ in range(3):
                k.store(k.args.out, k.cta_id() * 4, k.const(7, i32), mask=k.lane_id().eq(0))
    kern = build_kernel("exits", body, abi=ABI(out=Ptr(i32)), target="interp", waves=4,
                        wave_size=32)
    out = np.zeros(8, np.int32)
    interp.run(kern, dict(out=out), grid=2, mode=mode, seed=seed)
    assert out.tolist() == [7, 1, 2, 3] * 2


def test_a_missed_bump_is_caught(monkeypatch):
    """The negative control: a named barrier that frees or blocks waves without bumping
    waits_changed leaves the kept list stale, which the check names."""
    _check_runnable(monkeypatch)
    named = interp.Wave.op_named_barrier

    def no_bump(self, op):
        before = self.run.waits_changed
        r = named(self, op)
        self.run.waits_changed = before
        return r
    monkeypatch.setattr(interp.Wave, "op_named_barrier", no_bump)
    with pytest.raises(interp.InterpError, match="no waits_changed bump"):
        _run("random", 1)
