"""NVIDIA sm_90a (H200) atoms: warp-level mma.sync and warpgroup-level wgmma.

Lane maps are the PTX ISA fragment tables (section 9.7.14.5 "Matrix Fragments for mma"
and 9.7.15.5.1 "Register Fragments and Shared Memory Matrix Layouts" for wgmma), written
as layouts: within a warp, groupID = lane >> 2 picks the row (A, C) or column (B), and
threadID_in_group = lane % 4 the K (A, B) or column (C) pair/quad. The wgmma warpgroup is
four warps stacked along M (warp w owns rows 16w..16w+15), so its 128 "lanes" are
32*warp + laneid.

wgmma reads B from shared memory through a 64-bit matrix descriptor; fp8 wgmma requires
B K-major. `kmajor_interleave` (base.py) is the PTX ISA's canonical no-swizzle K-major layout
((8,m),(T,2k)):((1T,SBO),(1,LBO)) in elements, T = 16 bytes / element size: 8 rows x 16
bytes form a contiguous 128-byte "core matrix"; the core matrix one step along K is LBO
bytes away, the one 8 rows further along N is SBO bytes away.

wgmma is asynchronous: issue `WGMMA_FENCE` before the first wgmma that reads registers
written since, `WGMMA_COMMIT` after a batch, and `wgmma_wait(n)` before reading D.
"""
from __future__ import annotations

from .. import types as T
from ..layout import Layout
from .base import (SW128_ATOM_BYTES, SWIZZLE_128B, MMAAtom, SmemOperand, decode_smem_descriptor,
                   kmajor_interleave, kmajor_sw128, smem_descriptor)

WGMMA_FENCE = "wgmma.fence.sync.aligned;"
WGMMA_COMMIT = "wgmma.commit_group.sync.aligned;"
WGMMA_N = (8, 16, 32, 64, 128, 256)  # the registered widths; wgmma_e4m3 takes any 8*i


def wgmma_wait(n: int = 0) -> str:
    return f"wgmma.wait_group.sync.aligned {n};"


def _mma_ptx(instr: str, nd: int, na: int, nb: int, nc: int) -> str:
    ops, i = [], 0
    for n in (nd, na, nb, nc):
        ops.append("{" + ", ".join(f"%{j}" for j in range(i, i + n)) + "}")
        i += n
    return f"{instr} {', '.join(ops)};"


# mma.m16n8k16 .bf16 (PTX ISA: Matrix Fragments for mma.m16n8k16 with floating point type)
#   A a_i: row g + 8*((i>>1)&1), col 2t + (i&1) + 8*(i>>2)   -> index row + 16*col
#   B b_i: row 2t + (i&1) + 8*(i>>1), col g                  -> index row + 16*col
#   C c_i: row g + 8*(i>>1), col 2t + (i&1)                  -> index row + 16*col
_C16x8 = Layout(((4, 8), (2, 2)), ((32, 1), (16, 8)))

MMA_M16N8K16_BF16 = MMAAtom(
    name="sm90_mma_m16n8k16_bf16", targets=("sm_90a",), m=16, n=8, k=16,
    a_dtype=T.bf16, b_dtype=T.bf16, acc_dtype=T.f32, group=32,
    a_layout=Layout(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128))),
    b_layout=Layout(((4, 8), (2, 2)), ((2, 16), (1, 8))),
    c_layout=_C16x8,
    intrinsic="llvm.nvvm.mma.m16n8k16.row.col.bf16", kind="llvm",
    signature=tuple((f"a{i}", "i32") for i in range(4)) + tuple((f"b{i}", "i32") for i in range(2))
    + tuple((f"c{i}", "float") for i in range(4)),
    result_type="{float, float, float, float}",
    notes="mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32; each i32 packs 2 bf16, low half first.")

_MMA_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"

# mma.m16n8k16 .f16: the bf16 form's fragments (PTX ISA: one table for .f16 and .bf16). The
# projection tiles' f16 path: e4m3 weights are exact in f16 and decode two to a register in
# one cvt.rn.f16x2.e4m3x2 (stages/mma_tile.py).
MMA_M16N8K16_F16 = MMAAtom(
    name="sm90_mma_m16n8k16_f16", targets=("sm_90a",), m=16, n=8, k=16,
    a_dtype=T.f16, b_dtype=T.f16, acc_dtype=T.f32, group=32,
    a_layout=MMA_M16N8K16_BF16.a_layout, b_layout=MMA_M16N8K16_BF16.b_layout,
    c_layout=_C16x8, intrinsic=_MMA_F16, kind="ptx",
    signature=(("d", "4 x f32 (=f)"), ("a", "4 x b32 (r)"), ("b", "2 x b32 (r)"), ("c", "4 x f32 (f)")),
    result_type="4 x f32", asm=_mma_ptx(_MMA_F16, 4, 4, 2, 4),
    notes="mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (inline PTX); each i32 packs 2 "
          "f16, low half first.")

# mma.m16n8k32 .e4m3 (PTX ISA: Matrix Fragments for mma.m16n8k32)
#   A a_i: row g + 8*((i>>2)&1), col 4t + (i&3) + 16*(i>>3)
#   B b_i: row 4t + (i&3) + 16*(i>>2), col g
_MMA_E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
MMA_M16N8K32_E4M3 = MMAAtom(
    name="sm90_mma_m16n8k32_e4m3", targets=("sm_90a",), m=16, n=8, k=32,
    a_dtype=T.fp8e4m3fn, b_dtype=T.fp8e4m3fn, acc_dtype=T.f32, group=32,
    a_layout=Layout(((4, 8), (4, 2, 2)), ((64, 1), (16, 8, 256))),
    b_layout=Layout(((4, 8), (4, 2)), ((4, 32), (1, 16))),
    c_layout=_C16x8,
    intrinsic=_MMA_E4M3, kind="ptx",
    signature=(("d", "4 x f32 (=f)"), ("a", "4 x b32 (r)"), ("b", "2 x b32 (r)"), ("c", "4 x f32 (f)")),
    result_type="4 x f32", asm=_mma_ptx(_MMA_E4M3, 4, 4, 2, 4),
    notes="sm_89 instruction; on Hopper it is not the fast FP8 path (wgmma is).")


# wgmma.mma_async m64nNk32 .e4m3, A in registers (PTX ISA Figures "WGMMA .m64nNk32 register
# fragment layout for matrix A / accumulator D"), per warp w of the warpgroup:
#   A a_i: row 16w + g + 8*((i>>2)&1), col 4t + (i&3) + 16*(i>>3)   -> index row + 64*col
#   D d_i: row 16w + g + 8*((i>>1)&1), col 2t + (i&1) + 8*(i>>2)    -> index row + 64*col
_WG_A = Layout(((4, 8, 4), (4, 2, 2)), ((256, 1, 16), (64, 8, 1024)))
# Default B placement for a 32 x N tile: each group of 8 N-rows is 256 contiguous bytes,
# its two K core matrices (k 0-15, 16-31) back to back.
WGMMA_B_LBO, WGMMA_B_SBO = 128, 256
# a 128B-swizzled K-major operand's LBO is unused (one instruction's K lies in one 128-byte
# row); CUTLASS encodes 1 (16 bytes)
SW128_LBO = 16


def wgmma_e4m3(n: int, lbo: int = WGMMA_B_LBO, sbo: int = WGMMA_B_SBO,
               a_smem: bool = False, a_sw128: bool = False) -> MMAAtom:
    """wgmma m64nNk32 f32 += e4m3 x e4m3, A from registers (or, `a_smem`, the SS form: A
    from shared memory too, K-major at the canonical no-swizzle layout with the same
    LBO/SBO; `a_sw128`: at the 128B-swizzled K-major layout, rows of 128 bytes as TMA's
    SWIZZLE_128B copies a page of keys), B (K-major) from shared memory at the canonical
    no-swizzle layout with the given LBO/SBO (bytes)."""
    if a_sw128 and not a_smem:
        raise ValueError("wgmma_e4m3: a_sw128 places A in shared memory (a_smem=True)")
    if n % 8 or not 8 <= n <= 256:  # PTX: .f32 accumulators allow N = 8*i, i = 1..32
        raise ValueError(f"wgmma m64nNk32 .f32 needs N a multiple of 8 in [8, 256], got {n}")
    instr = f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3"
    nd = n // 2
    d = "{" + ", ".join(f"%{j}" for j in range(nd)) + "}"
    na = 1 if a_smem else 4
    a = f"%{nd}" if a_smem else "{" + ", ".join(f"%{j}" for j in range(nd, nd + 4)) + "}"
    asm = ("{ .reg .pred p; setp.ne.b32 p, %" + str(nd + na + 1) + ", 0; "
           f"{instr} {d}, {a}, %{nd + na}, p, 1, 1; }}")
    # (k, n) -> byte offset: the canonical layout is stated over (n, k); swap the modes.
    nk = kmajor_interleave(n, 32, 1, lbo, sbo)
    b_kn = Layout((nk.shape[1], nk.shape[0]), (nk.stride[1], nk.stride[0]))
    return MMAAtom(
        name=f"sm90_wgmma_m64n{n}k32_e4m3" + ("_ss" if a_smem else "") +
        ("_sw128" if a_sw128 else ""), targets=("sm_90a",),
        m=64, n=n, k=32,
        a_dtype=T.fp8e4m3fn, b_dtype=T.fp8e4m3fn, acc_dtype=T.f32, group=128,
        a_layout=None if a_smem else _WG_A, b_layout=None,
        c_layout=Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512))),
        intrinsic=instr, kind="ptx",
        signature=(("d", f"{nd} x f32 (+f)"),
                   ("a_desc", "b64 (l)") if a_smem else ("a", "4 x b32 (r)"),
                   ("b_desc", "b64 (l)"),
                   ("scale_d", "b32 (r): 0 -> D = A*B, else D = A*B + D")),
        result_type=f"{nd} x f32", asm=asm,
        b_source="smem", b_smem=SmemOperand(b_kn, lbo, sbo, elem_bytes=1),
        a_smem=(SmemOperand(kmajor_sw128(64, 32, 1), SW128_LBO, SW128_ATOM_BYTES,
                            elem_bytes=1, swizzle=SWIZZLE_128B) if a_sw128 else
                SmemOperand(kmajor_interleave(64, 32, 1, lbo, sbo), lbo, sbo, elem_bytes=1))
        if a_smem else None,
        is_async=True,
        notes="imm-scale-a/b = 1; fp8 wgmma has no transpose: A and B must be K-major.")


# wgmma.mma_async m64nNk16 .bf16, A in registers (PTX ISA Figure "WGMMA .m64nNk16 register
# fragment layout for matrix A"), per warp w: a_i: row 16w + g + 8*((i>>1)&1), col 2t + (i&1)
# + 8*(i>>2): the accumulator's layout at N = 16, so a f32 accumulator's two 8-column blocks,
# converted to bf16 pairs in place, are the next wgmma's A without a lane move (FA3's P).
_WG_A16 = Layout(((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))
# B placement of a 16 x N bf16 tile: the two K core matrices (k 0-7, 8-15) of 8 N-rows back
# to back (LBO 128 bytes), the next 8 N-rows SBO on
WGMMA16_B_LBO, WGMMA16_B_SBO = 128, 256


def wgmma_bf16(n: int, lbo: int = WGMMA16_B_LBO, sbo: int = WGMMA16_B_SBO) -> MMAAtom:
    """wgmma m64nNk16 f32 += bf16 x bf16, A from registers, B (K-major, not transposed) from
    shared memory at the canonical no-swizzle layout with the given LBO/SBO (bytes)."""
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma m64nNk16 .f32 needs N a multiple of 8 in [8, 256], got {n}")
    instr = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16"
    nd = n // 2
    d = "{" + ", ".join(f"%{j}" for j in range(nd)) + "}"
    a = "{" + ", ".join(f"%{j}" for j in range(nd, nd + 4)) + "}"
    # register A: d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b (0: K-major)
    asm = ("{ .reg .pred p; setp.ne.b32 p, %" + str(nd + 5) + ", 0; "
           f"{instr} {d}, {a}, %{nd + 4}, p, 1, 1, 0; }}")
    nk = kmajor_interleave(n, 16, 2, lbo, sbo)
    b_kn = Layout((nk.shape[1], nk.shape[0]), (nk.stride[1], nk.stride[0]))
    return MMAAtom(
        name=f"sm90_wgmma_m64n{n}k16_bf16", targets=("sm_90a",), m=64, n=n, k=16,
        a_dtype=T.bf16, b_dtype=T.bf16, acc_dtype=T.f32, group=128,
        a_layout=_WG_A16, b_layout=None,
        c_layout=Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512))),
        intrinsic=instr, kind="ptx",
        signature=(("d", f"{nd} x f32 (+f)"), ("a", "4 x b32 (r)"), ("b_desc", "b64 (l)"),
                   ("scale_d", "b32 (r): 0 -> D = A*B, else D = A*B + D")),
        result_type=f"{nd} x f32", asm=asm,
        b_source="smem", b_smem=SmemOperand(b_kn, lbo, sbo, elem_bytes=2), is_async=True,
        notes="imm-scale-a/b = 1, B not transposed (K-major); each b32 of A packs 2 bf16, "
              "low half first.")


WGMMA_E4M3 = tuple(wgmma_e4m3(n) for n in WGMMA_N) + (wgmma_e4m3(64, a_smem=True),
                                                      wgmma_e4m3(64, a_smem=True, a_sw128=True))
WGMMA_BF16 = tuple(wgmma_bf16(n) for n in (8, 16))
ATOMS = (MMA_M16N8K16_BF16, MMA_M16N8K16_F16, MMA_M16N8K32_E4M3) + WGMMA_E4M3 + WGMMA_BF16

__all__ = ["ATOMS", "MMA_M16N8K16_BF16", "MMA_M16N8K16_F16", "MMA_M16N8K32_E4M3", "WGMMA_BF16", "WGMMA_COMMIT",
           "WGMMA_E4M3", "WGMMA_FENCE", "WGMMA_N", "decode_smem_descriptor", "kmajor_interleave",
           "smem_descriptor", "wgmma_bf16", "wgmma_e4m3", "wgmma_wait"]
