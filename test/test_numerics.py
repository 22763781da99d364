"""monokernel.numerics against torch (CPU) as the independent reference, plus hand cases."""
import numpy as np
import pytest
import torch

from monokernel import numerics as N
from monokernel import types as T

TORCH_FP8 = {"fp8e4m3fn": torch.float8_e4m3fn, "fp8e4m3fnuz": torch.float8_e4m3fnuz}
ALL_BYTES = np.arange(256, dtype=np.uint8)


def torch_fp8_decode(bits: np.ndarray, fmt: str) -> np.ndarray:
    return torch.from_numpy(bits.copy()).view(TORCH_FP8[fmt]).float().numpy()


def torch_fp8_encode(x: np.ndarray, fmt: str) -> np.ndarray:
    return torch.from_numpy(x.astype(np.float32)).to(TORCH_FP8[fmt]).view(torch.uint8).numpy()


def torch_bf16_encode(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy() \
        .view(np.uint16)


def random_f32(rng, n, lo_exp, hi_exp):
    """Random float32 of both signs with random mantissa bits and exponents in [lo, hi]."""
    mant = rng.integers(0, 1 << 23, n, dtype=np.uint32)
    exp = rng.integers(lo_exp + 127, hi_exp + 127 + 1, n).astype(np.uint32)
    sign = rng.integers(0, 2, n).astype(np.uint32)
    return ((sign << 31) | (exp << 23) | mant).view(np.float32)


# ---------------------------------------------------------------------------------------------
# fp8 decode / encode
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["fp8e4m3fn", "fp8e4m3fnuz"])
def test_fp8_decode_all_patterns(fmt):
    ours = N.fp8_bits_to_f32(ALL_BYTES, fmt)
    ref = torch_fp8_decode(ALL_BYTES, fmt)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    fin = ~np.isnan(ref)
    np.testing.assert_array_equal(ours[fin].view(np.uint32), ref[fin].view(np.uint32))  # signed 0
    nan_codes = set(np.flatnonzero(np.isnan(ours)).tolist())
    assert nan_codes == ({0x7F, 0xFF} if fmt == "fp8e4m3fn" else {0x80})
    assert np.nanmax(ours) == N.FP8_MAX[fmt] and np.nanmin(ours) == -N.FP8_MAX[fmt]


def fp8_test_inputs(fmt, rng):
    fmax = N.FP8_MAX[fmt]
    vals = N.fp8_bits_to_f32(ALL_BYTES, fmt)
    pos = np.unique(vals[~np.isnan(vals) & (vals >= 0)]).astype(np.float64)
    mids = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)  # exact ties (exact in f32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf))])
    parts = [
        vals[~np.isnan(vals)],                       # every representable value
        mids, -mids, near, -near,                    # ties and just-off ties
        random_f32(rng, 4000, -6, 8),                # normal range
        random_f32(rng, 2000, -14, -6),              # subnormal / tiny
        random_f32(rng, 300, -126, -15),             # far below: round to +-0
        random_f32(rng, 1000, 8, 127),               # huge: saturate
        rng.uniform(-fmax * 1.1, fmax * 1.1, 2000).astype(np.float32),
        np.array([0.0, -0.0, fmax, -fmax, fmax * 1.03, -fmax * 1.03, 1e-45, -1e-45],
                 np.float32),
    ]
    return np.concatenate([p.astype(np.float32) for p in parts])


@pytest.mark.parametrize("fmt", ["fp8e4m3fn", "fp8e4m3fnuz"])
def test_fp8_encode_matches_torch(fmt):
    rng = np.random.default_rng(1234)
    x = fp8_test_inputs(fmt, rng)
    fmax = np.float32(N.FP8_MAX[fmt])
    ours = N.f32_to_fp8_bits(x, fmt)
    assert ours.dtype == np.uint8
    ref = torch_fp8_encode(np.clip(x, -fmax, fmax), fmt)  # torch does not saturate
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, [(float(x[i]), int(ours[i]), int(ref[i])) for i in bad[:10]]
    # ties really are ties, and go to the even code
    vals = N.fp8_bits_to_f32(ALL_BYTES, fmt)
    pos = np.unique(vals[~np.isnan(vals) & (vals >= 0)]).astype(np.float64)
    mids = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)
    assert np.all(N.f32_to_fp8_bits(mids, fmt) % 2 == 0)


@pytest.mark.parametrize("fmt", ["fp8e4m3fn", "fp8e4m3fnuz"])
def test_fp8_saturation_nan_and_zero(fmt):
    fmax = N.FP8_MAX[fmt]
    x = np.array([np.inf, -np.inf, 1e30, -1e30, fmax * 2, np.nan, -np.nan], np.float32)
    got = N.fp8_bits_to_f32(N.f32_to_fp8_bits(x, fmt), fmt)
    np.testing.assert_array_equal(got[:5], [fmax, -fmax, fmax, -fmax, fmax])
    nan_code = 0x7F if fmt == "fp8e4m3fn" else 0x80
    np.testing.assert_array_equal(N.f32_to_fp8_bits(x[5:], fmt), [nan_code, nan_code])
    zeros = N.f32_to_fp8_bits(np.array([0.0, -0.0, -1e-20], np.float32), fmt)
    np.testing.assert_array_equal(zeros, [0, 0x80, 0x80] if fmt == "fp8e4m3fn" else [0, 0, 0])
    # non-saturating mode overflows to NaN
    assert N.f32_to_fp8_bits(np.float32(1e4), fmt, saturate=False) == nan_code
    # round-trip of every finite code
    codes = ALL_BYTES[~np.isnan(N.fp8_bits_to_f32(ALL_BYTES, fmt))]
    np.testing.assert_array_equal(N.f32_to_fp8_bits(N.fp8_bits_to_f32(codes, fmt), fmt), codes)


def test_fp8_direct_from_f64_no_double_rounding():
    # 1 + 1/16 is the tie between fp8 1.0 and 1.125; a tiny excess (lost in f32) must round up.
    x = np.array([1.0 + 2.0 ** -4 + 2.0 ** -40], np.float64)
    assert np.float32(x[0]) == np.float32(1.0625)  # f32 would make it an exact tie -> 1.0
    for fmt in ("fp8e4m3fn", "fp8e4m3fnuz"):
        assert N.fp8_bits_to_f32(N.f32_to_fp8_bits(x, fmt), fmt)[0] == 1.125
        assert N.fp8_bits_to_f32(N.convert(x, T.f64, T.dtype(fmt)), fmt)[0] == 1.125


def test_fnuz_from_fn_bits_halving_law():
    fn = N.fp8_bits_to_f32(ALL_BYTES, "fp8e4m3fn")
    nz = N.fnuz_from_fn_bits(ALL_BYTES)
    assert nz.dtype == np.uint8
    fz = N.fp8_bits_to_f32(nz, "fp8e4m3fnuz")
    fin = ~np.isnan(fn)
    np.testing.assert_array_equal(fz[fin], fn[fin] / 2)
    assert np.all(np.isnan(fz[~fin]))
    assert nz[0x80] == 0x00 and nz[0x7F] == 0x80 and nz[0xFF] == 0x80
    others = np.setdiff1d(ALL_BYTES, [0x80, 0x7F, 0xFF])
    np.testing.assert_array_equal(nz[others], others)  # same bit pattern
    # against torch's fnuz decode as well
    np.testing.assert_array_equal(torch_fp8_decode(nz, "fp8e4m3fnuz")[fin], fn[fin] / 2)


# ---------------------------------------------------------------------------------------------
# bf16
# ---------------------------------------------------------------------------------------------

def test_bf16_encode_matches_torch():
    rng = np.random.default_rng(99)
    ties = (rng.integers(0, 1 << 16, 2000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)
    near_ties = np.concatenate([(ties.view(np.uint32) + 1).view(np.float32),
                                (ties.view(np.uint32) - 1).view(np.float32)])
    big = np.float32(np.finfo(np.float32).max)
    x = np.concatenate([
        random_f32(rng, 20000, -126, 127), ties, near_ties,
        rng.integers(0, 1 << 23, 500, dtype=np.uint32).view(np.float32),  # f32 subnormals
        np.array([0.0, -0.0, np.inf, -np.inf, big, -big, 3.3895314e38, 1.0, -1.0], np.float32),
    ])
    x = x[np.isfinite(x) | np.isinf(x)]  # drop NaNs the random bits may contain
    ours = N.f32_to_bf16_bits(x)
    assert ours.dtype == np.uint16
    ref = torch_bf16_encode(x)
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, [(float(x[i]), hex(ours[i]), hex(ref[i])) for i in bad[:10]]
    # NaN: a quiet NaN (torch's payload differs; only NaN-ness is the contract)
    nans = np.array([np.nan, -np.nan], np.float32)
    nb = N.f32_to_bf16_bits(nans)
    assert np.all(np.isnan(N.bf16_bits_to_f32(nb))) and np.all(nb & 0x40)
    assert np.all(np.isnan(torch.from_numpy(nans).to(torch.bfloat16).float().numpy()))
    # inf stays inf, overflow past bf16 max rounds to inf like torch
    np.testing.assert_array_equal(N.f32_to_bf16_bits(np.array([np.inf, -np.inf, big], np.float32)),
                                  [0x7F80, 0xFF80, 0x7F80])


def test_bf16_decode():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = N.bf16_bits_to_f32(bits)
    ref = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(ours.view(np.uint32), ref.view(np.uint32))
    # round-trip of every non-NaN pattern
    keep = ~np.isnan(ours)
    np.testing.assert_array_equal(N.f32_to_bf16_bits(ours[keep]), bits[keep])


def test_f64_to_bf16_no_double_rounding():
    # Just above the tie between 1.0 and 1 + 2**-7: direct rounding goes up; via f32 the excess
    # is lost (an exact tie), and ties-to-even would give 1.0.
    x = np.array([1.0 + 2.0 ** -8 + 2.0 ** -30, -(1.0 + 2.0 ** -8 + 2.0 ** -30)], np.float64)
    via_f32 = N.f32_to_bf16_bits(x.astype(np.float32))
    np.testing.assert_array_equal(via_f32, [0x3F80, 0xBF80])
    np.testing.assert_array_equal(N.convert(x, T.f64, T.bf16), [0x3F81, 0xBF81])
    np.testing.assert_array_equal(N.f32_to_bf16_bits(x), [0x3F81, 0xBF81])


# ---------------------------------------------------------------------------------------------
# convert()
# ---------------------------------------------------------------------------------------------

def test_f32_to_int_saturation_and_nan():
    x = np.array([3e9, -3e9, np.nan, np.inf, -np.inf, -1.7, 2.9, -0.0, 2147483520.0,
                  -2147483648.0], np.float32)
    got = N.convert(x, T.f32, T.i32)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [2**31 - 1, -2**31, 0, 2**31 - 1, -2**31, -1, 2, 0,
                                        2147483520, -2**31])
    np.testing.assert_array_equal(
        N.convert(np.array([-1.5, 300.0, 255.9, np.nan, -np.inf], np.float32), T.f32, T.u8),
        [0, 255, 255, 0, 0])
    np.testing.assert_array_equal(
        N.convert(np.array([1e19, 2.0 ** 63, -2.0 ** 63, -1e300, 2.0 ** 62], np.float64),
                  T.f64, T.i64),
        [2**63 - 1, 2**63 - 1, -2**63, -2**63, 2**62])
    u = N.convert(np.array([2e19, 2.0 ** 63, -1.0, 1.5e19], np.float32), T.f32, T.u64)
    assert u.dtype == np.uint64
    assert u.tolist() == [2**64 - 1, 2**63, 0, int(np.float32(1.5e19))]
    # from storage-only types: bf16 and fp8 go through their exact value
    np.testing.assert_array_equal(N.convert(np.array([0x4049, 0xC049], np.uint16), T.bf16, T.i16),
                                  [3, -3])  # +-3.140625
    np.testing.assert_array_equal(N.convert(np.array([0x7E, 0x7F], np.uint8), T.fp8e4m3fn, T.i32),
                                  [448, 0])  # NaN -> 0


def test_int_to_int_wrap_and_extend():
    np.testing.assert_array_equal(
        N.convert(np.array([256, -1, 300, 255, -129], np.int32), T.i32, T.u8), [0, 255, 44, 255, 127])
    np.testing.assert_array_equal(N.convert(np.array([-1, 127], np.int8), T.i8, T.u32),
                                  [0xFFFFFFFF, 127])
    np.testing.assert_array_equal(N.convert(np.array([255, 128], np.uint8), T.u8, T.i32), [255, 128])
    np.testing.assert_array_equal(N.convert(np.array([0xFFFFFFFF], np.uint32), T.u32, T.i64),
                                  [0xFFFFFFFF])
    np.testing.assert_array_equal(N.convert(np.array([-2], np.int64), T.i64, T.u64), [2**64 - 2])
    np.testing.assert_array_equal(N.convert(np.array([0x12345678], np.int32), T.i32, T.i16),
                                  [0x5678])


def test_int_to_float_rounding():
    i = np.array([2**24 + 1, 2**24 + 3, 2**62 + 2**38 + 1, -2**63, 2**63 - 1, -(2**24 + 1)], np.int64)
    got = N.convert(i, T.i64, T.f32)
    assert got.dtype == np.float32
    # 2**62 + 2**38 + 1: via float64 it becomes an exact f32 tie and would round down to 2**62
    assert float(np.float32(np.float64(2**62 + 2**38 + 1))) == 2.0 ** 62
    assert got.tolist() == [2.0**24, 2.0**24 + 4, 2.0**62 + 2**39, -2.0**63, 2.0**63, -2.0**24]
    u = np.array([0xFFFFFFFF, 2**31 + 2**7, 2**31 + 2**7 + 1, 2**31 + 3 * 2**7, 0], np.uint32)
    assert N.convert(u, T.u32, T.f32).tolist() == [2.0**32, 2.0**31, 2.0**31 + 2**8,
                                                   2.0**31 + 2**9, 0.0]
    # u64 -> bf16 and i64 -> f64 beyond 2**53, no double rounding
    assert N.convert(np.array([2**63 + 2**55 + 1], np.uint64), T.u64, T.bf16).tolist() == [0x5F01]
    assert N.convert(np.array([2**53 + 1, 2**53 + 3], np.int64), T.i64, T.f64).tolist() == \
        [2.0**53, 2.0**53 + 4]
    # saturating int -> fp8, rounding int -> f16 with overflow to inf
    np.testing.assert_array_equal(N.convert(np.array([1000, -1000, 17, 19], np.int32), T.i32,
                                            T.fp8e4m3fn), [0x7E, 0xFE, 0x58, 0x5A])
    np.testing.assert_array_equal(N.convert(np.array([2049, 2051, 70000], np.int32), T.i32, T.f16),
                                  np.array([2048, 2052, np.inf], np.float16))


def test_i1_conversions():
    b = np.array([True, False])
    np.testing.assert_array_equal(N.convert(b, T.i1, T.i32), [1, 0])
    assert N.convert(b, T.i1, T.i32).dtype == np.int32
    np.testing.assert_array_equal(N.convert(b, T.i1, T.f32), [1.0, 0.0])
    np.testing.assert_array_equal(N.convert(b, T.i1, T.bf16), [0x3F80, 0])
    np.testing.assert_array_equal(N.convert(b, T.i1, T.fp8e4m3fnuz), [0x40, 0])
    got = N.convert(np.array([0, 2, -1, 256], np.int32), T.i32, T.i1)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [False, True, True, True])  # != 0, not truncation
    np.testing.assert_array_equal(
        N.convert(np.array([0.0, -0.0, 0.5, np.nan, -np.inf], np.float32), T.f32, T.i1),
        [False, False, True, False, True])


def test_float_to_float_matches_numpy_and_torch():
    rng = np.random.default_rng(7)
    x64 = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 8, 5000),
                          rng.standard_normal(500) * 1e-6, [65519.99, 65520.0, 1e300, -1e-300]])
    # f64 -> f16 / f32: numpy's casts round directly from double
    with np.errstate(over="ignore"):
        x16, x32 = x64.astype(np.float16), x64.astype(np.float32)
    np.testing.assert_array_equal(N.convert(x64, T.f64, T.f16).view(np.uint16),
                                  x16.view(np.uint16))
    np.testing.assert_array_equal(N.convert(x64, T.f64, T.f32).view(np.uint32),
                                  x32.view(np.uint32))
    # bf16 <-> f16 and fp8 between formats go through the exact value
    b = N.convert(x32, T.f32, T.bf16)
    ref = torch.from_numpy(b.view(np.int16).copy()).view(torch.bfloat16).to(torch.float16)
    np.testing.assert_array_equal(N.convert(b, T.bf16, T.f16).view(np.uint16),
                                  ref.numpy().view(np.uint16))
    fn = N.convert(x32, T.f32, T.fp8e4m3fn)
    np.testing.assert_array_equal(N.fp8_bits_to_f32(N.convert(fn, T.fp8e4m3fn, T.fp8e4m3fnuz),
                                                    "fp8e4m3fnuz"),
                                  N.fp8_bits_to_f32(N.f32_to_fp8_bits(
                                      N.fp8_bits_to_f32(fn, "fp8e4m3fn"), "fp8e4m3fnuz"),
                                      "fp8e4m3fnuz"))
    assert N.convert(np.array([0x7E], np.uint8), T.fp8e4m3fn, T.fp8e4m3fnuz).tolist() == [0x7F]


def test_helpers_and_errors():
    x = np.array([1.5, -2.25, 1000.0, np.nan], np.float32)
    for dt in (T.bf16, T.fp8e4m3fn, T.fp8e4m3fnuz, T.f16, T.f32):
        s = N.from_f32(x, dt)
        assert s.dtype == dt.np
        back = N.to_f32(s, dt)
        assert back.dtype == np.float32
        np.testing.assert_array_equal(back[:2], x[:2])
        assert np.isnan(back[3])
        np.testing.assert_array_equal(N.to_f64(s, dt), back.astype(np.float64))
    assert N.to_f32(N.from_f32(x[2:3], T.fp8e4m3fnuz), T.fp8e4m3fnuz)[0] == 240.0
    assert N.to_f64(np.array([2**63 - 1], np.int64), T.i64)[0] == 2.0**63
    with pytest.raises(TypeError):
        N.convert(np.array([1.0], np.float32), T.bf16, T.f32)  # floats are not bf16 bits
    with pytest.raises(TypeError):
        N.convert(np.array([1], np.uint64), T.ptr_global, T.u64)
    with pytest.raises(ValueError):
        N.f32_to_fp8_bits(np.array([1.0]), "fp8e5m2")
