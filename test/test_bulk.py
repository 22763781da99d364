"""Bulk copies into LDS and their mbarriers (ops mbar_init, mbar_arrive_tx, bulk_load_lds,
mbar_wait, mbar_inval): the interpreter's definition (the bytes land, a wave reads them only after its
wait saw the copy's phase complete, phases alternate parity, a wait nothing will complete is
a stall), the DSL's checks, the sm_90a lowering (cp.async.bulk + mbarrier, assembled by ptxas
where installed) and the clear refusal of the AMD targets."""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ptxas_report

from monokernel import interp
from monokernel.dsl import ABI, DSLError, Ptr, build_kernel
from monokernel.interp import InterpError, Stall
from monokernel.ir import MBARRIER_BYTES
from monokernel.types import u32

WORDS = 512  # a wave's copy: 2 KB
MODES = ("inorder", "random", "relaxed")


def _copy_kernel(*, wait=True, rounds=1, init=True, arrive=True, issue=True, arrivals=1,
                 wait_parity=None, reinit=False, inval=True, wait_rounds=None):
    """Each wave copies its WORDS-word slice of src (round r: slice r of the wave's rounds)
    into its own LDS region with one bulk copy, waits, and writes it (+1) to out. `reinit`:
    every round sets the mbarrier up afresh (phase 0) and invalidates it at its end (unless
    not `inval`), as a job of a persistent CTA does; `wait_rounds`: the rounds that wait."""
    def body(k):
        a = k.args
        buf = k.lds("buf", u32, k.W * WORDS)
        bar = k.ptr_add(k.mbarrier("bars", k.W), k.wave_id() * MBARRIER_BYTES)
        mine = k.ptr_add(buf, k.wave_id() * (WORDS * 4))
        if init and not reinit:
            k.mbar_init(bar, arrivals)
        k.barrier()
        for r in range(rounds):
            if reinit:
                k.mbar_init(bar, arrivals)
            src_word = (k.wave_id() * rounds + r) * WORDS
            if arrive:
                k.mbar_arrive_tx(bar, WORDS * 4)
            if issue:
                k.bulk_load_lds(mine, a.src, src_word * 4, WORDS * 4, bar)
            if wait and (wait_rounds is None or r in wait_rounds):
                parity = 0 if reinit else r & 1
                k.mbar_wait(bar, parity if wait_parity is None else wait_parity)
            for w0 in range(0, WORDS, k.L):
                i = k.lane_id() + w0
                k.store(a.out, src_word + i, k.load(mine, i, u32) + 1)
            k.barrier()  # every lane has read the region before the next copy overwrites it
            if reinit and inval:
                k.mbar_inval(bar)
    return body


def _build(target="interp", waves=2, **kw):
    return build_kernel("bulk", _copy_kernel(**kw), abi=ABI(src=Ptr(u32), out=Ptr(u32)),
                        target=target, waves=waves)


def _run(kernel, rounds=1, waves=2, mode="random", seed=1):
    src = (np.arange(waves * rounds * WORDS, dtype=np.uint32) * 2654435761).astype(np.uint32)
    out = np.full(src.size, 0xDEADBEEF, np.uint32)  # poisoned: an unwritten word shows
    interp.run(kernel, dict(src=src, out=out), grid=2, mode=mode, seed=seed)
    return src, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rounds", [1, 3])
def test_copies_land_and_phases_alternate(mode, rounds):
    """Every word arrives; three copies into one buffer use phases 0, 1, 0 of one mbarrier."""
    src, out = _run(_build(rounds=rounds), rounds=rounds, mode=mode)
    assert np.array_equal(out, src + np.uint32(1))


def test_reading_before_the_wait_is_an_error():
    with pytest.raises(InterpError, match="before this wave waited"):
        _run(_build(wait=False))


def test_waiting_on_the_wrong_parity_fails():
    """Round 1 waits on parity 0 again. On hardware that either hangs (round 1's copy already
    done: phase 2 runs, parity 0, and nothing completes it) or returns at once and reads the
    copy early (copy still in flight); the interpreter's copies land at issue, so it reports
    the hang as a stall on the mbarrier."""
    with pytest.raises(Stall, match="mbarrier at LDS byte"):
        _run(_build(rounds=2, wait_parity=0), rounds=2)


@pytest.mark.parametrize("kw, err, match", [
    (dict(issue=False), Stall, "mbarrier"),  # bytes expected, no copy: the wait never ends
    (dict(arrivals=2), Stall, "mbarrier"),  # one arrival of two: never completes
    (dict(init=False), InterpError, "never initialised"),
])
def test_broken_protocols_fail(kw, err, match):
    with pytest.raises(err, match=match):
        _run(_build(**kw))


@pytest.mark.parametrize("mode", MODES)
def test_invalidated_mbarriers_are_set_up_again(mode):
    """A barrier set up, used for one phase and invalidated each round (a persistent CTA's
    jobs): every word arrives, each round waiting on parity 0 of its own set-up."""
    src, out = _run(_build(rounds=3, reinit=True), rounds=3, mode=mode)
    assert np.array_equal(out, src + np.uint32(1))


def test_setting_up_a_valid_mbarrier_again_is_an_error():
    with pytest.raises(InterpError, match="already set up"):
        _run(_build(rounds=2, reinit=True, inval=False), rounds=2)


def test_a_wait_of_an_earlier_set_up_does_not_cover_a_later_copy():
    """Round 0 waits (phase 1 seen complete), round 1 (set up again) does not: its copy's
    bytes are read before any wait of the new set-up, an error though the wave has seen a
    phase complete on the same LDS bytes before."""
    with pytest.raises(InterpError, match="before this wave waited"):
        _run(_build(rounds=2, reinit=True, wait_rounds=(0,)), rounds=2)


def test_invalidating_a_barrier_with_a_phase_in_flight_is_an_error():
    with pytest.raises(InterpError, match="phase in flight"):
        _run(_build(reinit=True, issue=False, wait=False))


@pytest.mark.parametrize("bad", ["nbytes", "lds_source", "global_dest", "per_lane", "parity",
                                 "bar"])
def test_dsl_rejects_bad_operands(bad):
    def body(k):
        a = k.args
        bar = k.mbarrier("bar")
        buf = k.lds("buf", u32, 64)
        k.mbar_init(bar, 1)
        if bad == "nbytes":
            k.bulk_load_lds(buf, a.src, 0, 24, bar)
        if bad == "lds_source":
            k.bulk_load_lds(buf, buf, 0, 64, bar)
        if bad == "global_dest":
            k.bulk_load_lds(a.out, a.src, 0, 64, bar)
        if bad == "per_lane":
            k.bulk_load_lds(buf, a.src, k.lane_id() * 16, 64, bar)
        if bad == "parity":
            k.mbar_wait(bar, 2)
        if bad == "bar":
            k.mbar_wait(a.out, 0)
    with pytest.raises(DSLError):
        build_kernel("bulk", body, abi=ABI(src=Ptr(u32), out=Ptr(u32)), target="interp")


def test_ptx_lowering_and_ptxas():
    from monokernel.backend import nvptx
    ptx = nvptx.build_ptx(_build("sm_90a", rounds=2))
    for pattern in (r"mbarrier\.init\.shared::cta\.b64 \[%rd\d+\], %r\d+;",
                    r"mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%rd\d+\], %r\d+;",
                    r"cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes "
                    r"\[%rd\d+\], \[%rd\d+\], %r\d+, \[%rd\d+\];",
                    r"mbarrier\.try_wait\.parity\.shared::cta\.b64 p, \[%rd\d+\], %r\d+;"):
        assert re.search(pattern, ptx), pattern
    again = nvptx.build_ptx(_build("sm_90a", rounds=2, reinit=True))
    assert re.search(r"mbarrier\.inval\.shared::cta\.b64 \[%rd\d+\];", again)
    ptxas_report(again)  # where ptxas is installed, it accepts the set-up / invalidate cycle
    if ptxas_report(ptx) is None:
        pytest.skip("no ptxas here: the PTX text was checked, not assembled")


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_amd_targets_refuse_clearly(chip):
    from monokernel.backend import amdgcn  # (not monokernel.build: no ELF reader needed)
    from monokernel.backend.toolchain import BackendError
    with pytest.raises(BackendError, match="sm_90a only"):
        amdgcn.emit_llvm(_build(chip, waves=2), chip)
