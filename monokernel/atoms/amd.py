"""AMD MFMA atoms for gfx950 (MI355X, CDNA4) and gfx942 (MI300X, CDNA3).

All are 16x16 output tiles over a wave64. The lane maps share one shape: lane l works on
row (A) / column (B, C) l % 16, and lane group g = l // 16 (0..3) selects a quarter of K
(A, B) or a block of 4 rows (C, D: D[i][j] in lane 16*(i//4) + j, register i % 4).

Sources (tests check every map against them, test/test_atoms.py):
* v_mfma_f32_16x16x32_fp8_fp8 and v_mfma_f32_16x16x16_bf16: AMD's matrix instruction
  calculator (CDNA3 tables, test/data/amd_calculator_tables.json). CDNA4 runs the same
  fp8 opcode with the same map (docs/amd-emulator.md: the CDNA4 emulator matches it).
* v_mfma_f32_16x16x32_bf16 (CDNA4 only; the calculator has no CDNA4): 8 bf16 per lane,
  K [8g, 8g+8) -- the 16x16x32 fp8 pattern at 2 elements per VGPR (LLVM's intrinsic takes
  <8 x bfloat>; Triton's gfx950 tests use kWidth = 8 for the 16x16x32 16-bit MFMAs;
  tinygrad's CDNA4 emulator gives each lane group a contiguous quarter of K).
* v_mfma_*_16x16x128_f8f6f4 (CDNA4 only): for fp8, 32 bytes per lane in 8 VGPRs, VGPRs
  0-3 holding K [16g, 16g+16) and VGPRs 4-7 the same +64. This is the layout AMD's ROCm
  blog "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture" (section 5.4) gives
  for the 32x32x64 sibling (two 16-byte K chunks, 32 apart), with four lane groups instead
  of two; an AMD-copyright mxfp8 GEMV (FlyDSL, run with non-unit block scales) loads it
  that way ("the MFMA wants K [32*(g//2) + 16*(g%2), +16) and the same 64 on"). The
  calculator has no entry to confirm it; re-check on hardware before using real block
  scales. Without scales any K permutation applied alike to A and B gives the same
  product, so only scaled use can tell layouts apart: tinygrad's emulator models
  K [32g, 32g+32) per lane group instead, and agrees on every unscaled result.
"""
from __future__ import annotations

from .. import types as T
from ..layout import Layout
from .base import MMAAtom

_C16 = Layout(((16, 4), 4), ((16, 4), 1))  # D[i][j]: lane 16*(i//4)+j, slot i%4; index i + 16j
_MFMA_ARGS = (("cbsz", 0), ("abid", 0), ("blgp", 0))


def _k_quarters(k_per_lane: int):
    """A and B layouts when lane group g holds K [g*k_per_lane, (g+1)*k_per_lane) in order."""
    k = 4 * k_per_lane
    a = Layout(((16, 4), k_per_lane), ((1, 16 * k_per_lane), 16))      # i + 16*k
    b = Layout(((16, 4), k_per_lane), ((k, k_per_lane), 1))            # k + K*j
    return a, b


def _mfma(name, targets, k, ab, a, b, intrinsic, ab_type, notes=""):
    return MMAAtom(
        name=name, targets=targets, m=16, n=16, k=k, a_dtype=ab, b_dtype=ab, acc_dtype=T.f32,
        group=64, a_layout=a, b_layout=b, c_layout=_C16, intrinsic=intrinsic, kind="llvm",
        signature=(("a", ab_type), ("b", ab_type), ("c", "<4 x float>"),
                   ("cbsz", "i32"), ("abid", "i32"), ("blgp", "i32")),
        result_type="<4 x float>", fixed_args=_MFMA_ARGS, notes=notes)


_A8, _B8 = _k_quarters(8)
_A4, _B4 = _k_quarters(4)

GFX950_FP8_16x16x32 = _mfma(
    "gfx950_mfma_f32_16x16x32_fp8", ("gfx950",), 32, T.fp8e4m3fn, _A8, _B8,
    "llvm.amdgcn.mfma.f32.16x16x32.fp8.fp8", "i64",
    "v_mfma_f32_16x16x32_fp8_fp8 reading OCP e4m3fn; CDNA3's rate on CDNA4.")

GFX942_FP8_16x16x32 = _mfma(
    "gfx942_mfma_f32_16x16x32_fp8", ("gfx942",), 32, T.fp8e4m3fnuz, _A8, _B8,
    "llvm.amdgcn.mfma.f32.16x16x32.fp8.fp8", "i64",
    "Same instruction on CDNA3, which reads e4m3fnuz (bias 8, max 240).")

GFX950_BF16_16x16x32 = _mfma(
    "gfx950_mfma_f32_16x16x32_bf16", ("gfx950",), 32, T.bf16, _A8, _B8,
    "llvm.amdgcn.mfma.f32.16x16x32.bf16", "<8 x bfloat>",
    "v_mfma_f32_16x16x32_bf16, CDNA4 only.")

GFX942_BF16_16x16x16 = _mfma(
    "gfx942_mfma_f32_16x16x16_bf16", ("gfx942",), 16, T.bf16, _A4, _B4,
    "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", "<4 x i16>",
    "v_mfma_f32_16x16x16_bf16 (LLVM's '_1k' name for the 4-element form).")

# 16x16x128, fp8: lane l = 16g + i holds K [16g, 16g+16) in slots 0-15 (VGPRs 0-3) and
# K [64+16g, 64+16g+16) in slots 16-31 (VGPRs 4-7).
_A128 = Layout(((16, 4), (16, 2)), ((1, 16 * 16), (16, 16 * 64)))     # i + 16*k
_B128 = Layout(((16, 4), (16, 2)), ((128, 16), (1, 64)))              # k + 128*j

# E8M0 unit scale: byte 127 = 2**0, all four bytes set so any op_sel picks 1.0. A scale
# byte of 0 is 2**-127, not "no scaling" (FlyDSL fix #744 measured this on gfx950; AMD's
# ROCm blog uses 127 too), even though MLIR writes the unscaled op with constant 0 scales.
UNIT_SCALE_E8M0 = 0x7F7F7F7F

GFX950_FP8_16x16x128 = MMAAtom(
    name="gfx950_mfma_f32_16x16x128_f8f6f4", targets=("gfx950",), m=16, n=16, k=128,
    a_dtype=T.fp8e4m3fn, b_dtype=T.fp8e4m3fn, acc_dtype=T.f32, group=64,
    a_layout=_A128, b_layout=_B128, c_layout=_C16,
    intrinsic="llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4.v8i32.v8i32", kind="llvm",
    signature=(("a", "<8 x i32>"), ("b", "<8 x i32>"), ("c", "<4 x float>"),
               ("cbsz", "i32"), ("blgp", "i32"), ("opsel_a", "i32"), ("scale_a", "i32"),
               ("opsel_b", "i32"), ("scale_b", "i32")),
    result_type="<4 x float>",
    # cbsz/blgp = A/B format: 0 = fp8 e4m3, 1 = bf8 e5m2, 2 = fp6 e2m3, 3 = bf6 e3m2, 4 = fp4.
    fixed_args=(("cbsz", 0), ("blgp", 0), ("opsel_a", 0), ("scale_a", UNIT_SCALE_E8M0),
                ("opsel_b", 0), ("scale_b", UNIT_SCALE_E8M0)),
    notes="v_mfma_scale_f32_16x16x128_f8f6f4 with unit scales: CDNA4's double FP8 rate, "
          "K = 128 = one index head. LLVM has only the scaled intrinsic (overloaded on the "
          "A/B vector types: <8 x i32> for fp8); there is no unscaled "
          "llvm.amdgcn.mfma.f32.16x16x128.f8f6f4. The scale operands must be VGPRs (LLVM "
          "forces this: inline/SGPR scales hit a hardware defect).")

ATOMS = (GFX950_FP8_16x16x32, GFX950_FP8_16x16x128, GFX950_BF16_16x16x32,
         GFX942_FP8_16x16x32, GFX942_BF16_16x16x16)
