"""Scalar types of the IR.

Every value in a kernel has a `DType` (the element) and a `VType` (element x vector width x
uniformity). Both fp8 formats are first-class because the same bytes mean different numbers
on gfx950/Hopper (OCP e4m3fn, bias 7, max 448) and gfx942 (e4m3fnuz, bias 8, max 240).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    bits: int
    kind: str  # "int", "uint", "float", "bool", "ptr"
    # numpy dtype used to hold values in the interpreter (fp8/bf16 are held as raw bits)
    storage: str

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_ptr(self) -> bool:
        return self.kind == "ptr"

    @property
    def np(self) -> np.dtype:
        return _NP[self.storage]

    def __repr__(self) -> str:
        return self.name


_NP = {s: np.dtype(s) for s in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                 "uint32", "uint64", "float16", "float32", "float64")}

i1 = DType("i1", 1, "bool", "bool")
i8 = DType("i8", 8, "int", "int8")
i16 = DType("i16", 16, "int", "int16")
i32 = DType("i32", 32, "int", "int32")
i64 = DType("i64", 64, "int", "int64")
u8 = DType("u8", 8, "uint", "uint8")
u16 = DType("u16", 16, "uint", "uint16")
u32 = DType("u32", 32, "uint", "uint32")
u64 = DType("u64", 64, "uint", "uint64")
f16 = DType("f16", 16, "float", "float16")
bf16 = DType("bf16", 16, "float", "uint16")  # raw bits; numerics.py converts
f32 = DType("f32", 32, "float", "float32")
f64 = DType("f64", 64, "float", "float64")
fp8e4m3fn = DType("fp8e4m3fn", 8, "float", "uint8")  # OCP E4M3: gfx950, Hopper
fp8e4m3fnuz = DType("fp8e4m3fnuz", 8, "float", "uint8")  # E4M3 FNUZ: gfx942
# Pointers: 64-bit addresses into global memory or byte offsets into the CTA's LDS.
ptr_global = DType("ptr_global", 64, "ptr", "uint64")
ptr_lds = DType("ptr_lds", 32, "ptr", "uint32")

ALL_DTYPES = {t.name: t for t in (i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64,
                                  fp8e4m3fn, fp8e4m3fnuz, ptr_global, ptr_lds)}
FP8_TYPES = (fp8e4m3fn, fp8e4m3fnuz)
# Held as raw bits in the interpreter: arithmetic on them goes through a cast to f32 first.
STORAGE_ONLY = (bf16, fp8e4m3fn, fp8e4m3fnuz)


def dtype(name_or_type) -> DType:
    if isinstance(name_or_type, DType):
        return name_or_type
    try:
        return ALL_DTYPES[name_or_type]
    except KeyError:
        raise ValueError(f"unknown dtype {name_or_type!r}; known: {sorted(ALL_DTYPES)}") from None


def int_of_width(bits: int, signed: bool = False) -> DType:
    table = {8: (u8, i8), 16: (u16, i16), 32: (u32, i32), 64: (u64, i64)}
    if bits not in table:
        raise ValueError(f"no integer type of {bits} bits")
    return table[bits][1 if signed else 0]


@dataclass(frozen=True)
class VType:
    """A value's type: `n` elements of `dtype` per lane (n > 1: a register vector), and whether
    it is uniform (one value per wave, held in scalar registers on AMD) or per-lane."""
    dtype: DType
    n: int = 1
    uniform: bool = False

    @property
    def bytes(self) -> int:
        return self.dtype.bytes * self.n

    def with_(self, **kw) -> "VType":
        d = dict(dtype=self.dtype, n=self.n, uniform=self.uniform)
        d.update(kw)
        return VType(**d)

    def __repr__(self) -> str:
        vec = f"x{self.n}" if self.n > 1 else ""
        return f"{'u:' if self.uniform else ''}{self.dtype.name}{vec}"
