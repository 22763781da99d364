"""The DSL's `opaque` op (a value hidden from LLVM's optimizer: an empty asm tied to its input)
and the persistent loop's register economy it serves (monokernel.link: the table marks each
CTA's last entry, so no loop bound is held across the stage bodies)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from monokernel import interp
from monokernel.build import emit_llvm
from monokernel.dsl import ABI, DSLError, Ptr, Scalar, build_kernel
from monokernel.types import f32, f64, i32, u32, u64

BIG = 0x123456789  # a 64-bit constant no instruction takes inline


def _mix(k):
    """out[lane] = low words of several opaque values (uniform, per-lane, float, pointer)."""
    a = k.args
    x = k.opaque(BIG, u64)  # uniform 64-bit constant
    y = k.opaque(k.lane_id() * 3)  # per-lane i32
    f = k.opaque(k.const(1.5, f32))  # uniform float
    d = k.opaque(2.0, f64)
    p = k.opaque(a.out)  # a global pointer
    v = k.cast(x, u32) + k.bitcast(y, u32) + k.cast(f * 2.0, u32) + k.cast(d, u32)
    k.store(p, k.lane_id(), v)


def _kernel(target, fn=_mix, **abi):
    return build_kernel("opq", fn, abi=ABI(**(abi or dict(out=Ptr(u32)))), target=target)


@pytest.mark.parametrize("wave", [32, 64])
def test_interpreter_is_identity(wave):
    out = np.zeros(wave, np.uint32)
    interp.run(_kernel("interp" if wave == 64 else "sm_90a"), dict(out=out), grid=1)
    lane = np.arange(wave, dtype=np.uint64)
    want = (BIG + 3 * lane + 3 + 2) & 0xFFFFFFFF
    assert np.array_equal(out, want.astype(np.uint32))


def test_dsl_rejects_what_it_cannot_hide():
    def body(bad):
        def f(k):
            bad(k)
        return f
    for bad in (lambda k: k.opaque(5),  # a Python number without a dtype
                lambda k: k.opaque(k.lane_id() < 3),  # i1
                lambda k: k.opaque(k.vec(k.lane_id(), k.lane_id())),  # a vector
                lambda k: k.opaque(k.lds("x", u32, 4)),  # an LDS pointer
                lambda k: k.opaque(k.lane_id(), u64)):  # dtype disagrees
        with pytest.raises(DSLError):
            _kernel("interp", body(bad))


def test_verifier_checks_the_type():
    from monokernel.ir import Value
    from monokernel.types import VType
    from monokernel.verify import VerifyError, verify
    K = _kernel("interp")
    op = next(o for o in K.walk() if o.opcode == "opaque")
    op.results = (Value(VType(u32, 1, True)),)  # not the argument's type
    with pytest.raises(VerifyError, match="opaque"):
        verify(K)


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_amdgcn_lowers_to_an_empty_tied_asm(chip):
    """Uniform values through "=s,0" (after a readfirstlane LLVM folds where the value is
    scalar already), per-lane values through "=v,0"; the code object builds."""
    from monokernel.build import build
    ir = emit_llvm(_kernel(chip), chip)
    asm = [s for s in ir.splitlines() if "asm sideeffect" in s]
    assert any('"=s,0"(i64' in s for s in asm) and any('"=v,0"(i32' in s for s in asm)
    assert any('"=s,0"(float' in s for s in asm) and any('"=s,0"(double' in s for s in asm)
    assert len(asm) == 5
    assert build(_kernel(chip)).figures()["sgpr_spill"] == 0


def test_nvptx_lowers_to_an_empty_tied_asm():
    from monokernel.backend.toolchain import compile_ptx
    ir = emit_llvm(_kernel("sm_90a"), "sm_90a")
    asm = [s for s in ir.splitlines() if "asm sideeffect" in s]
    assert any('"=l,0"(i64' in s for s in asm) and any('"=r,0"(i32' in s for s in asm)
    assert any('"=f,0"(float' in s for s in asm) and any('"=d,0"(double' in s for s in asm)
    assert ".target sm_90a" in compile_ptx(ir, "sm_90a")


def _loop(k):
    """Two opaques of one 64-bit constant inside a runtime loop, used in 64-bit multiplies."""
    a = k.args
    for it in k.range(0, a.n, unroll=False):
        x = k.cast(k.lane_id() + it, u64)
        y = x * k.opaque(BIG, u64) + x * k.opaque(BIG, u64)
        k.store(a.out, it * k.L + k.lane_id(), y)


def test_opaque_stays_in_the_loop_and_is_not_merged():
    """In the loop body (between its label and its back branch) there are two asm sites:
    LLVM neither hoisted the op out of the loop nor merged the two; the interpreter computes
    the plain product."""
    from monokernel.backend.toolchain import compile_amdgcn_asm
    abi = dict(out=Ptr(u64), n=Scalar(i32))
    lines = compile_amdgcn_asm(emit_llvm(_kernel("gfx950", _loop, **abi), "gfx950"),
                               "gfx950").splitlines()
    labels = {m.group(1): i for i, s in enumerate(lines) if (m := re.match(r"^(\.LBB\d+_\d+):", s))}
    back = [(labels[m.group(1)], i) for i, s in enumerate(lines)
            if (m := re.match(r"\s*s_cbranch_\w+\s+(\.LBB\d+_\d+)", s))
            and labels.get(m.group(1), len(lines)) < i]
    assert len(back) == 1, back
    lo, hi = back[0]
    sites = [i for i, s in enumerate(lines) if ";;#ASMSTART" in s]
    assert len(sites) == 2 and all(lo < i < hi for i in sites), (sites, back)
    out = np.zeros(3 * 64, np.uint64)
    interp.run(_kernel("interp", _loop, **abi), dict(out=out, n=3), grid=1)
    x = np.arange(3 * 64, dtype=np.uint64) // 64 + np.arange(3 * 64, dtype=np.uint64) % 64
    assert np.array_equal(out, x * np.uint64(BIG) * np.uint64(2))


def test_acquire_expects_an_opaque_publisher_count():
    """layouts.protocol.acquire_bulk builds its expected (tag << 32 | publishers) word from
    an opaque count: no constant half for LLVM to hoist out of the job loop."""
    from layouts.arena import Arena
    from layouts.protocol import acquire_bulk
    from layouts.regions import BulkBuffer
    from monokernel.types import u8
    arena = Arena.from_regions([BulkBuffer("b", u32, (4,), publishers=8)])

    def body(k):
        acquire_bulk(k, k.args.arena, arena, "b", k.args.tag)
    K = build_kernel("acq", body, abi=ABI(arena=Ptr(u8), tag=Scalar(u32)), target="interp")
    ops = [o for o in K.walk() if o.opcode == "opaque"]
    assert len(ops) == 1 and ops[0].result.dtype == u64


def test_table_marks_each_ctas_last_entry():
    """Word 3 of an entry is 1 exactly on each CTA's last entry (the job loop's exit)."""
    from monokernel.link import ENTRY_WORDS, HEADER_WORDS
    from stages.synthetic import synthetic_launch
    L = synthetic_launch(grid=3)
    d = L.table.data
    G = int(d[1])
    starts = d[HEADER_WORDS:HEADER_WORDS + G + 1]
    base = (HEADER_WORDS + G + 1 + ENTRY_WORDS - 1) // ENTRY_WORDS * ENTRY_WORDS
    last = d[base + 3::ENTRY_WORDS][:int(d[3])]
    want = np.zeros(int(d[3]), np.int32)
    for c in range(G):
        if starts[c + 1] > starts[c]:
            want[starts[c + 1] - 1] = 1
    assert np.array_equal(last, want) and want.sum() >= 2
