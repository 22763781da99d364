"""TMA tensor copies (op tma_load_rows, ir.TensorMap) and the 128B-swizzled wgmma operand:
the interpreter's definition (the box lands swizzled, marked until its mbarrier phase is
waited for), the proof kernel that scores pages of keys from a TMA-filled ring by SS wgmma
(monokernel.proofs.tma_keys) against float64, a negative control (an unswizzled placement
scores wrong), the checks on bad operands, the sm_90a lowering (ptxas where installed), the
AMD refusal, and the launcher-derived tensor map. The H200 run is test_proofs_gpu's."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import ptxas_report

from monokernel import interp
from monokernel.backend.toolchain import BackendError
from monokernel.dsl import ABI, DSLError, Ptr, build_kernel
from monokernel.interp import InterpError
from monokernel.memory import MemoryFault
from monokernel.ir import TensorMap
from monokernel.proofs import tma_keys as tk
from monokernel.types import i32, u8, u32

MODES = ("inorder", "random", "relaxed")


def _run(steps, mode, seed=1, pages=5):
    rng = np.random.default_rng(seed)
    inp = tk.make_inputs(rng, steps=steps, pages=pages)
    ref = tk.reference(inp, steps=steps)
    out = interp.run(tk.build("interp", steps=steps), inp, grid=1, mode=mode, seed=seed)
    assert "cache_tmap" not in out  # derived: not one of the caller's buffers
    return tk.check(inp, ref, steps=steps)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [1, 3, 6])
def test_tma_ring_scores_pages_as_float64(mode, steps):
    """Every step's D = keys(page) @ Q within the f32 sums' tolerance: the box landed where
    the swizzled descriptor reads it, each slot's phases alternate (6 steps: three uses of
    each slot), a slot is refilled only after its chain retired."""
    assert _run(steps, mode) <= tk.tolerance()


def test_an_unswizzled_box_scores_wrong(monkeypatch):
    """The negative control: the copy placing rows unswizzled (the 1-D bulk copy's
    placement) under the same swizzled descriptor reads the wrong bytes."""
    monkeypatch.setattr(interp, "swizzled", lambda idx: idx)
    assert _run(2, "inorder") > 0.1


def _copy_kernel(*, dst_offset=0, swizzle=128, row=1, wait=True, target="interp",
                 row_bytes=128, box_row_bytes=0, col=0):
    tm = TensorMap(of="src", row_bytes=row_bytes, box_rows=1024 // (box_row_bytes or row_bytes),
                   swizzle=swizzle, box_row_bytes=box_row_bytes)

    def body(k):
        a = k.args
        if dst_offset:
            k.lds("pad", u8, dst_offset)
        buf = k.lds("buf", u8, 8 * 128)
        bar = k.mbarrier("bar", 1)
        with k.if_(k.wave_id().eq(0)):
            k.mbar_init(bar, 1)
        k.barrier()
        with k.if_(k.wave_id().eq(0)):
            k.mbar_arrive_tx(bar, tm.box_bytes)
            k.tma_load_rows(buf, "src_tmap", row, bar, col=col if isinstance(col, int) else
                            k.const(col[0], i32))
        if wait:
            k.mbar_wait(bar, 0)
        for i0 in range(0, 8 * 128 // 4, k.L):
            i = k.lane_id() + i0
            k.store(a.out, k.wave_id() * 256 + i, k.load(buf, i, u32), mask=k.wave_id().eq(0))
    return build_kernel("tma_copy", body, abi=ABI(src=Ptr(u8), src_tmap=tm, out=Ptr(u32)),
                        target=target, waves=1)


@pytest.mark.parametrize("swizzle", [0, 128])
def test_a_box_lands_at_its_swizzled_places(swizzle):
    """Rows 1..8 of a [16, 128] byte view: byte b of box row r at LDS byte swizzled(r * 128 +
    b) (128B), or r * 128 + b (none)."""
    from monokernel.atoms.base import swizzled
    src = np.arange(16 * 128, dtype=np.uint32).astype(np.uint8) ^ 0x5A
    out = np.zeros(256, np.uint32)
    interp.run(_copy_kernel(swizzle=swizzle), dict(src=src, out=out), grid=1)
    got = out.view(np.uint8)
    want = np.zeros(1024, np.uint8)
    plain = np.arange(1024)
    want[swizzled(plain) if swizzle else plain] = src[128:128 + 1024]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("swizzle", [0, 128])
def test_a_column_window_box_lands_at_its_swizzled_places(swizzle):
    """Boxes of 128 bytes of 512-byte rows (a 128-k block of a row-major weight tile): rows
    1..8, bytes 256..383 of each, row after row, swizzled as whole-row boxes are."""
    from monokernel.atoms.base import swizzled
    src = (np.arange(16 * 512, dtype=np.uint32) * 7 % 251).astype(np.uint8)
    out = np.zeros(256, np.uint32)
    interp.run(_copy_kernel(swizzle=swizzle, row_bytes=512, box_row_bytes=128, col=256),
               dict(src=src, out=out), grid=1)
    want = np.zeros(1024, np.uint8)
    plain = np.arange(1024)
    box = src.reshape(16, 512)[1:9, 256:384].reshape(-1)
    want[swizzled(plain) if swizzle else plain] = box
    np.testing.assert_array_equal(out.view(np.uint8), want)


def test_the_column_window_is_checked_in_the_dsl_and_at_run_time():
    """A column past the row or off the 16-byte grid: by name at build time (a constant) and
    in the interpreter (a run-time value)."""
    with pytest.raises(DSLError, match="col 448"):
        _copy_kernel(row_bytes=512, box_row_bytes=128, col=448)
    with pytest.raises(DSLError, match="col 8"):
        _copy_kernel(row_bytes=512, box_row_bytes=128, col=8)
    src, out = np.zeros(16 * 512, np.uint8), np.zeros(256, np.uint32)
    with pytest.raises(InterpError, match="col 392"):
        interp.run(_copy_kernel(row_bytes=512, box_row_bytes=128, col=(392,)),
                   dict(src=src, out=out), grid=1)


def test_reading_the_box_before_the_wait_is_an_error():
    src, out = np.zeros(16 * 128, np.uint8), np.zeros(256, np.uint32)
    with pytest.raises(InterpError, match="before this wave waited"):
        interp.run(_copy_kernel(wait=False), dict(src=src, out=out), grid=1)


@pytest.mark.parametrize("kw, err, match", [
    (dict(dst_offset=16), InterpError, "1024-byte boundary"),  # a swizzled box off its atom
    (dict(row=9), MemoryFault, "rows 9 .. 16.*outside buffer 'src'"),  # past the buffer's end
])
def test_bad_boxes_are_errors_naming_them(kw, err, match):
    src, out = np.zeros(16 * 128, np.uint8), np.zeros(256, np.uint32)
    with pytest.raises(err, match=match):
        interp.run(_copy_kernel(**kw), dict(src=src, out=out), grid=1)


def test_the_tensor_map_is_derived_not_passed():
    src, out = np.zeros(16 * 128, np.uint8), np.zeros(256, np.uint32)
    with pytest.raises(ValueError, match="derived by the launcher"):
        interp.run(_copy_kernel(), dict(src=src, out=out, src_tmap=np.zeros(128, np.uint8)),
                   grid=1)


@pytest.mark.parametrize("kw, match", [
    (dict(row_bytes=100, box_rows=8), "row_bytes 100"),
    (dict(row_bytes=128, box_rows=300), "box_rows 300"),
    (dict(row_bytes=128, box_rows=8, swizzle=64), "swizzle 64"),
    (dict(row_bytes=256, box_rows=8, swizzle=128), "256-byte box rows exceed"),
    (dict(row_bytes=512, box_rows=8, swizzle=128, box_row_bytes=256), "256-byte box rows"),
    (dict(row_bytes=512, box_rows=8, box_row_bytes=520), "box_row_bytes 520"),
    (dict(row_bytes=512, box_rows=8, box_row_bytes=72), "box_row_bytes 72"),
])
def test_bad_tensor_maps_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        TensorMap(of="src", **kw)


def test_dsl_checks_the_tensor_map_argument():
    def body(k):
        buf = k.lds("buf", u8, 1024)
        bar = k.mbarrier("bar", 1)
        k.tma_load_rows(buf, "src", 0, bar)  # a plain pointer, not a TensorMap
    with pytest.raises(DSLError, match="'src' is not a TensorMap"):
        build_kernel("bad", body, abi=ABI(src=Ptr(u8)), target="interp", waves=1)


def test_sm90a_lowering_assembles():
    from monokernel.backend.nvptx import build_ptx
    ptx = build_ptx(tk.build("sm_90a", steps=3), "sm_90a")
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier") == 3
    assert ".extern .shared .align 1024" in ptx
    report = ptxas_report(ptx)
    if report is not None:
        assert "0 bytes spill stores" in report, report


def test_sm90a_lowering_of_a_column_window_passes_the_column():
    """The box's byte column is the copy's innermost coordinate ({col, row})."""
    import re
    from monokernel.backend.nvptx import build_ptx
    ptx = build_ptx(_copy_kernel(target="sm_90a", row_bytes=512, box_row_bytes=128, col=256),
                    "sm_90a")
    copy = re.search(r"cp\.async\.bulk\.tensor\.2d\S* \[[^]]+\], \[[^,]+, \{([^}]+)\}\]", ptx)
    assert copy, ptx
    col, row = (x.strip() for x in copy.group(1).split(","))
    assert col != row
    report = ptxas_report(ptx)
    if report is not None:
        assert "0 bytes spill stores" in report, report


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_amd_refuses_tensor_copies_by_name(chip):
    from monokernel.backend import amdgcn

    def body(k):
        k.tma_load_rows(k.lds("buf", u8, 1024), "src_tmap", 0, k.mbarrier("bar", 1))
    tm = TensorMap(of="src", row_bytes=128, box_rows=8, swizzle=128)
    kern = build_kernel("tma_only", body, abi=ABI(src=Ptr(u8), src_tmap=tm), target=chip,
                        waves=1)
    with pytest.raises(BackendError, match="tma_load_rows: bulk copies"):
        amdgcn.emit_llvm(kern, chip)
    with pytest.raises(ValueError, match="sm_90a's; not 'gfx950'"):
        tk.build("gfx950")
