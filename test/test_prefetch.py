"""The DSL's `prefetch_l2` op: a hint that never changes a value, checked by the interpreter
for the faults the hardware would take (a range outside one buffer, a misaligned address),
lowered to one `cp.async.bulk.prefetch.L2.global` per lane on sm_90a (a line prefetch,
`line=True`: one `prefetch.global.L2`) and dropped on AMD."""
from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ptxas_report

from monokernel import interp
from monokernel.dsl import ABI, DSLError, Ptr, build_kernel
from monokernel.ir import BULK_ALIGN, L2_LINE_BYTES, MAX_PREFETCH_BYTES
from monokernel.memory import MemoryFault
from monokernel.types import u32

WORDS = 1024  # the source buffer: 4 KB
PIECE = 64  # bytes a lane prefetches


def _copy(prefetch, piece=PIECE, offset=0, masked=False, line=False):
    """out[i] = src[i] * 3 for every word, each lane first prefetching its own `piece` bytes
    at byte `offset + lane * piece` (masked: only lanes whose piece lies inside src)."""
    def body(k):
        a = k.args
        lane = k.thread_id()
        if prefetch:
            start = lane * piece + offset
            mask = (start + piece <= WORDS * 4) if masked else None
            k.prefetch_l2(a.src, start, piece, mask=mask, line=line)
        for w0 in range(0, WORDS, k.W * k.L):
            i = lane + w0
            k.store(a.out, i, k.load(a.src, i, u32) * 3, mask=i < WORDS)
    return body


def _kernel(target, prefetch=True, **kw):
    return build_kernel("pf", _copy(prefetch, **kw), abi=ABI(src=Ptr(u32), out=Ptr(u32)),
                        target=target, waves=2)


def _run(kernel):
    src = (np.arange(WORDS, dtype=np.uint32) * 2654435761).astype(np.uint32)
    out = np.full(WORDS, 0xDEADBEEF, np.uint32)  # poisoned: an unwritten word shows
    interp.run(kernel, dict(src=src, out=out), grid=1)
    return src, out


@pytest.mark.parametrize("target", ["interp", "sm_90a"])
def test_values_are_untouched(target):
    src, out = _run(_kernel(target, masked=True))
    assert np.array_equal(out, src * np.uint32(3))


@pytest.mark.parametrize("kw, what", [
    (dict(offset=WORDS * 4 - PIECE + 16), "outside"),  # the last lanes' pieces run past src
    (dict(offset=8, masked=True), "misaligned"),  # 8 bytes off the 16-byte grain
])
def test_interpreter_faults_like_the_hardware(kw, what):
    with pytest.raises(MemoryFault, match=what):
        _run(_kernel("interp", **kw))


def test_masked_lanes_issue_nothing():
    """Lanes whose piece would run past src are masked off: no fault, same values."""
    src, out = _run(_kernel("interp", offset=WORDS * 4 - 2 * PIECE, masked=True))
    assert np.array_equal(out, src * np.uint32(3))


@pytest.mark.parametrize("nbytes", [0, 8, 24, MAX_PREFETCH_BYTES + BULK_ALIGN, 64.0])
def test_dsl_rejects_bad_sizes(nbytes):
    with pytest.raises(DSLError, match="nbytes"):
        _kernel("interp", piece=nbytes)


def test_dsl_rejects_lds():
    def body(k):
        k.prefetch_l2(k.lds("x", u32, 64), 0, 64)
    with pytest.raises(DSLError, match="LDS"):
        build_kernel("pf", body, abi=ABI(src=Ptr(u32), out=Ptr(u32)), target="interp")


def test_ptx_has_one_bulk_prefetch_a_lane_and_assembles():
    from monokernel.backend import nvptx
    ptx = nvptx.build_ptx(_kernel("sm_90a", masked=True))
    found = re.findall(r"cp\.async\.bulk\.prefetch\.L2\.global \[%rd\d+\], %r\d+;", ptx)
    assert len(found) == 1, ptx
    assert nvptx.build_ptx(_kernel("sm_90a", prefetch=False)).count("prefetch") == 0
    if ptxas_report(ptx) is None:
        pytest.skip("no ptxas here: the PTX text was checked, not assembled")


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_amd_drops_the_hint(chip):
    """No AMD instruction fills the L2 without a register destination: the code object of
    the kernel with the prefetch is the one without it, byte for byte."""
    pytest.importorskip("elftools")  # the code object reader (not on the GPU machine)
    from monokernel.build import build
    with_hint = build(_kernel(chip, masked=True)).data
    without = build(_kernel(chip, prefetch=False)).data
    assert with_hint == without


def test_line_prefetch_keeps_values_and_lowers_to_one_instruction():
    """line=True: the same values; sm_90a asks the load unit for the line (one
    `prefetch.global.L2` a lane, no bulk prefetch), and ptxas takes it."""
    from monokernel.backend import nvptx
    src, out = _run(_kernel("interp", masked=True, line=True))
    assert np.array_equal(out, src * np.uint32(3))
    ptx = nvptx.build_ptx(_kernel("sm_90a", masked=True, line=True))
    assert len(re.findall(r"prefetch\.global\.L2 \[%rd\d+\];", ptx)) == 1, ptx
    assert "cp.async.bulk.prefetch" not in ptx
    if ptxas_report(ptx) is None:
        pytest.skip("no ptxas here: the PTX text was checked, not assembled")


def test_line_prefetch_faults_on_a_range_across_lines():
    """A lane's 64 bytes at offset 96 + 64 * lane: lane 0's run past its 128-byte line."""
    with pytest.raises(MemoryFault, match="cross"):
        _run(_kernel("interp", offset=96, masked=True, line=True))


def test_line_prefetch_size_is_at_most_a_line():
    with pytest.raises(DSLError, match="nbytes"):
        _kernel("interp", piece=L2_LINE_BYTES + BULK_ALIGN, line=True)
