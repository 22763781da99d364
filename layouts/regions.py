"""Region primitives of the scratch arena (DESIGN.md sections 4 and 5).

Three kinds of region; each knows its byte size (`nbytes`) and the alignment its accesses
need (`align`). The arena (`arena.py`) places every region on its own 128-byte lines.

`TaggedPairs(name, count, value_dtype)` -- the mailbox of 32-bit values.
    Element i is one 8-byte word at byte 8*i: the value's 32 bits in the low half, the tag of
    the launch that wrote it in the high half (little-endian: value at +0, tag at +4). It is
    written and read as ONE aligned scalar 64-bit access (an i64 store/load, not a
    two-element vector, which PTX treats as two accesses; never 16 bytes), relaxed, device
    scope (system scope for peers). A consumer polls the word itself until its tag is the
    current launch's: the value arrives with the tag in the same single-copy-atomic access,
    so a pair needs no fence. Zeroed scratch reads as tag 0 = never written.

`BulkBuffer(name, dtype, shape, publishers)` -- bulk data behind a release counter.
    Layout inside the region: the counter, one 64-bit word at +0, alone on its 128-byte
    line; the data at +128 (`DATA_OFFSET`), row-major, on lines of its own.
    Counter word: low 32 bits = how many publishers have published for the tag in the high
    32 bits. Zeroed = (tag 0, count 0): never published. A launch tagged t is complete when
    the word equals `complete_word(t)` = (t << 32) | publishers. Because the tag is in the
    word, a new launch never needs the counter reset.
    Protocol:
      writer (each of the `publishers` CTAs, after storing its share of the data):
        1. release fence, device scope (system scope for peers);
        2. update the counter atomically:
           - publishers == 1: atomic store of (t << 32) | 1;
           - otherwise a compare-and-swap loop applying `counter_after_publish(old, t)`:
             old tag == t -> old + 1, else (t << 32) | 1 (the first publisher of the launch
             replaces the previous launch's word). The previous launch has finished before
             this one starts (kernel boundary), so every word seen is either a previous
             launch's or this launch's, and after all publishers it equals complete_word(t).
      reader: poll the counter with an acquire load (device scope) until it equals
        complete_word(t) (bounded poll: on timeout write the error word and exit), then read
        the data with plain loads: the acquire pairs with each writer's release.

`PlainBuffer(name, dtype, shape)` -- data with no protocol (written and read within one
    CTA, or ordered by something else, e.g. a launch boundary).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monokernel import types as T

from .tags import TAG_MAX

LINE = 128  # bytes: the L2 line of CDNA3/CDNA4 and of Hopper; see arena.py
PAIR_BYTES = 8
DATA_OFFSET = LINE  # BulkBuffer: where the data starts inside the region
COUNTER_BYTES = 8


def as_dtype(x) -> T.DType:
    """A monokernel DType from a DType, its name, or a numpy dtype of the same storage."""
    if isinstance(x, T.DType):
        return x
    if isinstance(x, str) and x in T.ALL_DTYPES:
        return T.ALL_DTYPES[x]
    try:
        npd = np.dtype(x)
    except TypeError:
        raise ValueError(f"unknown dtype {x!r}; known: {sorted(T.ALL_DTYPES)}") from None
    table = {np.dtype(np.int8): T.i8, np.dtype(np.int16): T.i16, np.dtype(np.int32): T.i32,
             np.dtype(np.int64): T.i64, np.dtype(np.uint8): T.u8, np.dtype(np.uint16): T.u16,
             np.dtype(np.uint32): T.u32, np.dtype(np.uint64): T.u64, np.dtype(np.float16): T.f16,
             np.dtype(np.float32): T.f32, np.dtype(np.float64): T.f64, np.dtype(np.bool_): T.i1}
    if npd in table:
        return table[npd]
    raise ValueError(f"dtype {x!r} has no monokernel equivalent")


def _shape(name: str, shape) -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    try:
        shape = tuple(shape)
    except TypeError:
        raise ValueError(f"region {name!r}: shape {shape!r} is not a tuple of ints") from None
    if not shape or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1
                        for s in shape):
        raise ValueError(f"region {name!r}: shape {shape!r} must be a non-empty tuple of ints >= 1")
    return tuple(int(s) for s in shape)


def _name(name) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"region name {name!r} must be a non-empty string")
    return name


class Region:
    """Base of the three region kinds: `name`, `kind`, `nbytes`, `align`."""
    kind = "region"
    name: str

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    @property
    def align(self) -> int:
        raise NotImplementedError

    def to_json(self) -> dict:
        raise NotImplementedError

    @staticmethod
    def from_json(d: dict) -> "Region":
        kind = d["kind"]
        if kind == "pairs":
            return TaggedPairs(d["name"], tuple(d["shape"]), d["value_dtype"])
        if kind == "bulk":
            return BulkBuffer(d["name"], d["dtype"], tuple(d["shape"]), int(d["publishers"]))
        if kind == "plain":
            return PlainBuffer(d["name"], d["dtype"], tuple(d["shape"]))
        raise ValueError(f"unknown region kind {kind!r} in {d!r}")


@dataclass(frozen=True)
class TaggedPairs(Region):
    """`count` (value, tag) pairs of a 32-bit `value_dtype`; `count` may be a shape tuple."""
    name: str
    count: int | tuple
    value_dtype: T.DType | str = T.f32
    kind = "pairs"

    def __post_init__(self):
        _name(self.name)
        object.__setattr__(self, "count", _shape(self.name, self.count))
        dt = as_dtype(self.value_dtype)
        if dt.bits != 32 or dt.is_ptr:
            raise ValueError(f"region {self.name!r}: a tagged pair carries a 32-bit value, "
                             f"not {dt.name}")
        object.__setattr__(self, "value_dtype", dt)

    @property
    def shape(self) -> tuple:
        return self.count

    @property
    def elements(self) -> int:
        return math.prod(self.count)

    @property
    def nbytes(self) -> int:
        return self.elements * PAIR_BYTES

    @property
    def align(self) -> int:
        return PAIR_BYTES  # one aligned 64-bit access per pair

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "shape": list(self.count),
                "value_dtype": self.value_dtype.name, "nbytes": self.nbytes, "align": self.align}


@dataclass(frozen=True)
class BulkBuffer(Region):
    """Data of `dtype` and `shape`, published by `publishers` CTAs behind a release counter."""
    name: str
    dtype: T.DType | str
    shape: tuple
    publishers: int = 1
    kind = "bulk"

    def __post_init__(self):
        _name(self.name)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if self.dtype.is_ptr:
            raise ValueError(f"region {self.name!r}: pointers are not stored in the arena")
        object.__setattr__(self, "shape", _shape(self.name, self.shape))
        p = self.publishers
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 1 <= p < 2**32:
            raise ValueError(f"region {self.name!r}: publishers = {p!r} must be an int in 1 .. 2**32-1")
        object.__setattr__(self, "publishers", int(p))

    @property
    def data_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.bytes

    @property
    def counter_offset(self) -> int:
        return 0

    @property
    def data_offset(self) -> int:
        return DATA_OFFSET

    @property
    def nbytes(self) -> int:
        return DATA_OFFSET + self.data_bytes

    @property
    def align(self) -> int:
        return LINE  # the counter owns its line; the data starts on the next one

    def complete_word(self, tag: int) -> int:
        """The counter's value once every publisher of the launch tagged `tag` has published."""
        return counter_word(tag, self.publishers)

    def counter_after_publish(self, old: int, tag: int) -> int:
        """What one publisher's atomic update turns counter word `old` into (the CAS loop's
        new value; with one publisher it is always (tag << 32) | 1)."""
        return counter_after_publish(old, tag)

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "dtype": self.dtype.name,
                "shape": list(self.shape), "publishers": self.publishers, "nbytes": self.nbytes,
                "align": self.align, "counter_offset": self.counter_offset,
                "data_offset": self.data_offset,
                "counter": "u64: low 32 bits = publishers done, high 32 bits = tag"}


@dataclass(frozen=True)
class PlainBuffer(Region):
    """Data of `dtype` and `shape` with no publication protocol."""
    name: str
    dtype: T.DType | str
    shape: tuple
    kind = "plain"

    def __post_init__(self):
        _name(self.name)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if self.dtype.is_ptr:
            raise ValueError(f"region {self.name!r}: pointers are not stored in the arena")
        object.__setattr__(self, "shape", _shape(self.name, self.shape))

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.bytes

    @property
    def align(self) -> int:
        return 16  # the widest vector access (128 bits)

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "dtype": self.dtype.name,
                "shape": list(self.shape), "nbytes": self.nbytes, "align": self.align}


def counter_word(tag: int, count: int) -> int:
    """A bulk counter word: (tag << 32) | count."""
    if not 0 <= tag <= TAG_MAX:
        raise ValueError(f"tag {tag!r} must fit in 32 bits")
    if not 0 <= count < 2**32:
        raise ValueError(f"count {count!r} must fit in 32 bits")
    return (tag << 32) | count


def counter_after_publish(old: int, tag: int) -> int:
    """One publisher's update of a counter word for the launch tagged `tag` (tag >= 1)."""
    if not 1 <= tag <= TAG_MAX:
        raise ValueError(f"tag {tag!r} must be in 1 .. {TAG_MAX}")
    if (old >> 32) == tag:
        if (old & 0xFFFFFFFF) == 0xFFFFFFFF:
            raise ValueError(f"counter word {old:#x} would overflow its count")
        return old + 1
    return (tag << 32) | 1
