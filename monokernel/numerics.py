"""The IR's numeric conversions: the single definition of what `cast` does.

The numpy interpreter calls these functions; the AMDGCN and NVPTX backends must produce the
same bits (for NaN results they must produce *a* NaN: NaN sign/payload is not part of the
contract, although the bits chosen here are documented below). This module imports only numpy.

Values are held in each dtype's `storage` numpy dtype (types.py): bf16 as raw uint16 bits,
fp8e4m3fn / fp8e4m3fnuz as raw uint8 bits, i1 as numpy bool, everything else natively.

Rules of `convert(values, src, dst)` (the IR's `cast`)
-------------------------------------------------------
* same dtype: a copy.
* int -> int (i8..i64, u8..u64): the source is sign-extended (signed source) or zero-extended
  (unsigned source) to infinite width, then truncated to the destination width (two's
  complement wrap). E.g. i32 300 -> u8 44, i32 -1 -> u8 255, i8 -1 -> u32 0xFFFFFFFF.
* i1 -> int: false/true -> 0/1.   int -> i1: `v != 0`.
* i1 -> float: 0.0 / 1.0.         float -> i1: `x != 0` with NaN -> false (LLVM `fcmp one`;
  consistent with the "NaN -> 0" rule below; note -0.0 -> false).
* float -> int: round toward zero, then SATURATE to the destination range; NaN -> 0
  (LLVM `fptosi.sat` / `fptoui.sat`; PTX `cvt.rzi.sat`-like). +-inf saturate to max / min.
  For unsigned destinations every negative input (including -inf) gives 0.
* int -> float, float -> float: round to nearest, ties to even, performed ONCE from the exact
  source value (no double rounding):
    - every float source is first widened to float64, which is exact for all float dtypes;
    - an integer source is rounded in integer arithmetic to the destination's precision
      (p = mantissa bits + 1), which is then exact in float64 (this matters for i64/u64 -> f32,
      bf16, f16, and even -> f64 for |v| > 2**53);
    - the float64 value is rounded directly to the destination format (exponent range and
      subnormals included). f64 -> bf16 never goes through f32.
  Overflow: f16 / bf16 / f32 / f64 destinations give +-inf (IEEE); fp8 destinations SATURATE
  to the largest finite value (+-448 for e4m3fn, +-240 for e4m3fnuz) -- both for finite
  out-of-range inputs and for +-inf ("satfinite", like PTX `cvt.rn.satfinite.e4m3x2.f32`; the
  AMD backends clamp before converting). NaN -> NaN (fp8e4m3fn: 0x7F, fp8e4m3fnuz: 0x80,
  bf16: input's sign with the quiet bit set, (bits32 | 0x400000) >> 16).
  Signed zero: -0.0 stays -0.0 except in fp8e4m3fnuz, which has no negative zero (-0.0 and
  negative values that round to zero -> 0x00).
* pointers: not convertible with `cast` (TypeError); use bitcast / integer ops.

fp8 formats
-----------
fp8e4m3fn (OCP E4M3; gfx950, Hopper): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no inf;
  S.1111.111 (0x7F / 0xFF) is NaN; max finite 448 (0x7E); min subnormal 2**-9; has -0 (0x80).
fp8e4m3fnuz (gfx942): bias 8, no inf, no negative zero; 0x80 is the only NaN; max finite 240
  (0x7F); min subnormal 2**-10.

`fnuz_from_fn_bits` reinterprets OCP e4m3fn bytes as fnuz bytes keeping the bit pattern (the
gfx942 load-time conversion). Because only the bias differs (7 vs 8), for every finite byte b:
    fp8_bits_to_f32(fnuz_from_fn_bits(b), "fp8e4m3fnuz") == fp8_bits_to_f32(b, "fp8e4m3fn") / 2
(exactly, subnormals included), so callers double the corresponding scales.
"""
from __future__ import annotations

import numpy as np

from .types import DType, f32, dtype as _dtype

__all__ = [
    "f32_to_bf16_bits", "bf16_bits_to_f32",
    "f32_to_fp8_bits", "fp8_bits_to_f32", "fnuz_from_fn_bits",
    "FP8_MAX", "FP8_NAN",
    "convert", "to_f32", "from_f32", "to_f64",
]

FP8_FORMATS = ("fp8e4m3fn", "fp8e4m3fnuz")
FP8_MAX = {"fp8e4m3fn": 448.0, "fp8e4m3fnuz": 240.0}
FP8_NAN = {"fp8e4m3fn": 0x7F, "fp8e4m3fnuz": 0x80}


# ---------------------------------------------------------------------------------------------
# Format descriptions for the generic float64 -> small-float rounding.
# (mantissa bits, minimum normal exponent, largest finite value, saturate on overflow)
# ---------------------------------------------------------------------------------------------
_FMT = {
    "f16": (10, -14, 65504.0, False),
    "bf16": (7, -126, float(np.ldexp(255.0, 120)), False),  # (2 - 2**-7) * 2**127
    "f32": (23, -126, float(np.finfo(np.float32).max), False),
    "fp8e4m3fn": (3, -6, 448.0, True),
    "fp8e4m3fnuz": (3, -7, 240.0, True),
}


def _check_fp8(fmt) -> str:
    name = fmt.name if isinstance(fmt, DType) else fmt
    if name not in FP8_FORMATS:
        raise ValueError(f"unknown fp8 format {fmt!r}; expected one of {FP8_FORMATS}")
    return name


def _round_f64(x: np.ndarray, fmt: str, saturate: bool | None = None) -> np.ndarray:
    """Round float64 values once, to nearest-even, to the format `fmt` (with its exponent range
    and subnormals). Returns float64 values that are exactly representable in `fmt` (or +-inf
    / NaN). Overflow gives +-inf, or +-max finite when saturating (also for +-inf inputs)."""
    mbits, emin, fmax, sat_default = _FMT[fmt]
    sat = sat_default if saturate is None else saturate
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        finite = np.isfinite(x)
        xf = np.where(finite, x, 0.0)
        _, e = np.frexp(xf)  # xf = m * 2**e, 0.5 <= |m| < 1  ->  floor(log2|xf|) = e - 1
        q = np.ldexp(1.0, np.maximum(e - 1, emin) - mbits)  # spacing of fmt values around xf
        r = np.rint(xf / q) * q  # exact scaling by a power of two; rint is ties-to-even
        r = np.where(finite, r, x)  # +-inf, NaN pass through
        over = np.abs(r) > fmax  # NaN compares false
        if sat:
            r = np.where(over, np.copysign(fmax, r), r)
        else:
            r = np.where(over, np.copysign(np.inf, r), r)
    return r


# ---------------------------------------------------------------------------------------------
# bf16
# ---------------------------------------------------------------------------------------------

def f32_to_bf16_bits(x) -> np.ndarray:
    """Real values -> bf16 bits (uint16). Round to nearest even, directly from the exact input
    value (float64 inputs are NOT rounded to f32 first). Overflow and +-inf -> +-inf; NaN ->
    quiet NaN keeping the sign: (f32bits | 0x400000) >> 16 (for a float64 NaN, of its f32 cast)."""
    x = np.asarray(x)
    if x.dtype.kind not in "f":
        x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        r = _round_f64(x.astype(np.float64), "bf16")
        out = (r.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
        nan = np.isnan(x)
        if nan.any():
            nb = x.astype(np.float32).view(np.uint32) | np.uint32(0x00400000)
            out = np.where(nan, (nb >> np.uint32(16)).astype(np.uint16), out)
    return out.astype(np.uint16)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bf16 bits (uint16) -> float32 values (exact)."""
    b = np.asarray(bits).astype(np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ---------------------------------------------------------------------------------------------
# fp8
# ---------------------------------------------------------------------------------------------

def _fp8_table(fmt: str) -> np.ndarray:
    bias = 7 if fmt == "fp8e4m3fn" else 8
    c = np.arange(256, dtype=np.int64)
    s = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = (c & 7).astype(np.float64)
    mag = np.where(e == 0, np.ldexp(m / 8.0, 1 - bias), np.ldexp(1.0 + m / 8.0, e - bias))
    v = s * mag
    if fmt == "fp8e4m3fn":
        v[(c & 0x7F) == 0x7F] = np.nan
    else:
        v[0x80] = np.nan
    return v.astype(np.float32)


_FP8_DECODE = {f: _fp8_table(f) for f in FP8_FORMATS}
# Non-negative finite magnitudes in code order (they are increasing): code == index.
_FP8_POS = {f: _FP8_DECODE[f][: (0x7F if f == "fp8e4m3fn" else 0x80)].astype(np.float64)
            for f in FP8_FORMATS}


def f32_to_fp8_bits(x, fmt, *, saturate: bool = True) -> np.ndarray:
    """Real values -> fp8 bits (uint8) of `fmt` ("fp8e4m3fn" or "fp8e4m3fnuz", or the DType).

    Round to nearest even, once, from the exact input value (float64 inputs are not rounded to
    f32 first); subnormals exact. With `saturate=True` (the IR's semantics, "satfinite") finite
    out-of-range values AND +-inf give +-max finite (448 / 240); with `saturate=False` they give
    NaN (torch's behaviour for overflow). NaN -> 0x7F (e4m3fn) / 0x80 (e4m3fnuz).
    e4m3fn keeps -0.0 (0x80); e4m3fnuz maps -0.0 and negatives rounding to 0 to 0x00."""
    fmt = _check_fp8(fmt)
    x = np.asarray(x)
    if x.dtype.kind not in "f":
        x = x.astype(np.float64)
    x = x.astype(np.float64)
    r = _round_f64(x, fmt, saturate=saturate)
    with np.errstate(all="ignore"):
        a = np.abs(r)
        bad = ~np.isfinite(a)  # NaN input, or overflow when not saturating
        a = np.where(bad, 0.0, a)
        code = np.searchsorted(_FP8_POS[fmt], a).astype(np.uint8)  # exact match: a is in table
        neg = np.signbit(r)
        if fmt == "fp8e4m3fnuz":
            neg &= code != 0
        code = np.where(neg, code | np.uint8(0x80), code)
        code = np.where(bad, np.uint8(FP8_NAN[fmt]), code)
    return np.asarray(code, dtype=np.uint8)


def fp8_bits_to_f32(bits, fmt) -> np.ndarray:
    """fp8 bits (uint8) of `fmt` -> float32 values (exact; NaN codes -> NaN)."""
    fmt = _check_fp8(fmt)
    b = np.asarray(bits).astype(np.uint8)
    return _FP8_DECODE[fmt][b]


def fnuz_from_fn_bits(bits) -> np.ndarray:
    """OCP e4m3fn bytes -> e4m3fnuz bytes with the same bit pattern (gfx942 load-time
    conversion): the value halves, value(fnuz(b)) == value(fn(b)) / 2 for every finite b, so
    callers double the scales. -0 (0x80) -> 0x00 (fnuz has no -0, 0x80 is its NaN);
    NaN (0x7F / 0xFF) -> 0x80 (fnuz NaN). All other bytes are unchanged."""
    b = np.asarray(bits).astype(np.uint8)
    out = np.where(b == 0x80, np.uint8(0x00), b)
    out = np.where((b & 0x7F) == 0x7F, np.uint8(0x80), out)
    return np.asarray(out, dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Generic cast
# ---------------------------------------------------------------------------------------------

def _precision(dst: DType) -> int:
    """Significant bits (mantissa + implicit 1) of a float dtype."""
    return {"f16": 11, "bf16": 8, "f32": 24, "f64": 53, "fp8e4m3fn": 4, "fp8e4m3fnuz": 4}[dst.name]


def _bit_length_u64(m: np.ndarray) -> np.ndarray:
    n = np.zeros(m.shape, dtype=np.int64)
    v = m.copy()
    for sh in (32, 16, 8, 4, 2, 1):
        big = v >= (np.uint64(1) << np.uint64(sh))
        n += np.where(big, sh, 0)
        v = np.where(big, v >> np.uint64(sh), v)
    return n + (v > 0)


def _int_to_f64_rounded(v: np.ndarray, p: int) -> np.ndarray:
    """Integer array -> float64, rounded to nearest-even to `p` significant bits in exact integer
    arithmetic (p <= 53, so the result is exact in float64)."""
    v = np.asarray(v)
    if v.dtype == np.bool_:
        return v.astype(np.float64)
    if v.dtype.kind == "u":
        neg = np.zeros(v.shape, dtype=bool)
        mag = v.astype(np.uint64)
    else:
        w = v.astype(np.int64)
        neg = w < 0
        # |w| in uint64 (two's complement negate; correct for INT64_MIN too)
        mag = np.where(neg, (~w.view(np.uint64)) + np.uint64(1), w.view(np.uint64))
    n = _bit_length_u64(mag)
    s = np.maximum(n - p, 0).astype(np.uint64)
    one = np.uint64(1)
    q = mag >> s
    rem = mag & ((one << s) - one)
    half = np.where(s > 0, one << (np.maximum(s, one) - one), np.uint64(0))
    up = (s > 0) & ((rem > half) | ((rem == half) & ((q & one) == one)))
    q = q + up.astype(np.uint64)  # <= 2**p <= 2**53: exact in float64
    r = np.ldexp(q.astype(np.float64), s.astype(np.int64))
    return np.where(neg, -r, r)


def _as_storage(values, dt: DType) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype != dt.np:
        if dt.name in ("bf16", "fp8e4m3fn", "fp8e4m3fnuz") and a.dtype.kind == "f":
            raise TypeError(f"{dt.name} values must be given as raw bits ({dt.storage}), "
                            f"got {a.dtype}; use from_f32 to encode")
        with np.errstate(all="ignore"):
            a = a.astype(dt.np)
    return a


def to_f64(values, dtype) -> np.ndarray:
    """Storage values of `dtype` -> float64 values. Exact for every float dtype and for integers
    up to 2**53 in magnitude; larger i64/u64 are rounded to nearest even."""
    dt = _dtype(dtype)
    a = _as_storage(values, dt)
    if dt.is_ptr:
        raise TypeError("pointers have no numeric value")
    if dt.name == "bf16":
        return bf16_bits_to_f32(a).astype(np.float64)
    if dt.name in FP8_FORMATS:
        return fp8_bits_to_f32(a, dt.name).astype(np.float64)
    if dt.is_float:
        return a.astype(np.float64)
    return _int_to_f64_rounded(a, 53)


def _f64_to_float(x: np.ndarray, dst: DType) -> np.ndarray:
    """float64 values -> storage of the float dtype `dst`, one rounding."""
    if dst.name == "f64":
        return x.astype(np.float64)
    if dst.name == "bf16":
        return f32_to_bf16_bits(x)
    if dst.name in FP8_FORMATS:
        return f32_to_fp8_bits(x, dst.name)
    with np.errstate(all="ignore"):
        return _round_f64(x, dst.name).astype(dst.np)  # exact after rounding


def _float_to_int(x: np.ndarray, dst: DType) -> np.ndarray:
    """float64 values -> integer dtype: truncate, saturate, NaN -> 0."""
    with np.errstate(all="ignore"):
        if dst.kind == "bool":
            return (x != 0) & ~np.isnan(x)
        nan = np.isnan(x)
        t = np.trunc(np.where(nan, 0.0, x))
        info = np.iinfo(dst.np)
        # Bounds as float64: lo = -2**(b-1) or 0 (exact), hi_excl = 2**(b-1) or 2**b (exact).
        lo = float(info.min)
        hi_excl = float(info.max) + 1.0 if dst.bits < 64 else float(2 ** (63 if dst.is_signed else 64))
        too_big = t >= hi_excl
        too_small = t < lo
        safe = np.where(too_big | too_small, 0.0, t)
        out = safe.astype(dst.np)
        out = np.where(too_big, info.max, out)
        out = np.where(too_small, info.min, out)
        return out.astype(dst.np)


def convert(values, src, dst) -> np.ndarray:
    """The IR's `cast`: `values` held in `src.storage` -> values held in `dst.storage`.
    See the module docstring for the rules."""
    src, dst = _dtype(src), _dtype(dst)
    if src.is_ptr or dst.is_ptr:
        raise TypeError(f"cast {src} -> {dst}: pointers are not value-convertible")
    a = _as_storage(values, src)
    if src == dst:
        return a.copy()
    with np.errstate(all="ignore"):
        if src.is_int:
            if dst.kind == "bool":
                return a != 0
            if dst.is_int:
                if src.kind == "bool":
                    return a.astype(dst.np)
                # numpy int astype: sign/zero-extends per source, truncates (wraps) per dest.
                return a.astype(dst.np)
            # int -> float: round to destination precision in integer arithmetic (exact f64)
            return _f64_to_float(_int_to_f64_rounded(a, _precision(dst)), dst)
        # float source: widen exactly to float64
        x = to_f64(a, src)
        if dst.is_int:
            return _float_to_int(x, dst)
        return _f64_to_float(x, dst)


def to_f32(values, dtype) -> np.ndarray:
    """Storage values of `dtype` -> float32 (the interpreter's arithmetic type for storage-only
    dtypes). Exact for bf16/fp8/f16; otherwise `convert(values, dtype, f32)`."""
    dt = _dtype(dtype)
    if dt.name == "bf16":
        return bf16_bits_to_f32(_as_storage(values, dt))
    if dt.name in FP8_FORMATS:
        return fp8_bits_to_f32(_as_storage(values, dt), dt.name)
    return convert(values, dt, f32)


def from_f32(values, dtype) -> np.ndarray:
    """float32 values -> storage of `dtype`, i.e. `convert(values, f32, dtype)` (bf16/fp8:
    round to nearest even; fp8 saturates)."""
    dt = _dtype(dtype)
    return convert(np.asarray(values, dtype=np.float32), f32, dt)
