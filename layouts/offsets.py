"""The offset-width proof (DESIGN.md section 5).

For every access the kernel forms, two bounds are proven:

(1) Addressing. AMD buffer ops address through a buffer resource (a 64-bit base and a size)
    plus a 32-bit byte offset. The kernel re-bases the resource per row or tile (a 64-bit
    pointer add), so the offset only has to span what one row/tile touches, not the tensor.
    The largest BYTE offset from the (re-based) resource base must be <= INT32_MAX
    (inclusive); then the access may use buffer ops ("buffer32"), else it must use 64-bit
    global addressing ("global64"). This is a choice, not an error.

(2) Index width. Every index the kernel computes in int32 (the re-base offset row*stride in
    elements, the index inside the row/tile, and, if the kernel forms one, the flat element
    offset row*stride + index) must stay <= INT32_MAX. This is an error: a ValueError naming
    the access and the value, because a wrapped index reads or writes the wrong place.

The AITER seed (ROCm/aiter PR 4563 and its fix) is this bug class: the buffer-op gate was on
the tensor's bytes (off past 2 GiB) while what had to fit was the element offset the kernel
forms after re-basing per row and per KV tile, a limit 4x looser for fp32 logits; the wrong
gate turned a valid shape (fp32 logits 8192 x 262144 = 8 GiB, largest element offset exactly
INT32_MAX) into a compile crash. Here the gate is the re-based byte offset (bound 1) and the
int32 indices are checked separately (bound 2); the tensor's size enters neither.

An access is described by `Access`:
    buffer        the region or tensor the buffer resource is built on (a name, for messages)
    elem_bytes    element size in bytes
    index_range   (lo, hi): element indices used after re-basing, inclusive, >= 0
    rebase_step   elements the base advances per row/tile (0: no re-basing)
    rebase_count  number of rows/tiles: r in [0, rebase_count)
    base_offset   bytes from the resource base to re-based element 0 that stay in the 32-bit
                  offset (e.g. a region's offset when the resource is the whole arena)
    int32_rebase  r * rebase_step is computed in int32 (element units) before the 64-bit add
    int32_index   the index inside the row/tile is computed in int32
    int32_flat    the kernel also forms r * rebase_step + index in int32
    buffer_elems  optional: the buffer's size in elements; an access past it is an error

The largest byte offset is that of the first byte of the last element, base_offset +
hi * elem_bytes (for a vector access hi is its last element, which is conservative: the
hardware offset is that of the vector's first element).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

INT32_MAX = 2**31 - 1


def _int(name: str, what: str, v, lo: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"access {name!r}: {what} = {v!r} must be an int >= {lo}")
    return v


@dataclass(frozen=True)
class Access:
    name: str
    buffer: str
    elem_bytes: int
    index_range: tuple
    rebase_step: int = 0
    rebase_count: int = 1
    base_offset: int = 0
    int32_rebase: bool = True
    int32_index: bool = True
    int32_flat: bool = False
    buffer_elems: int | None = None

    def __post_init__(self):
        n = self.name
        _int(n, "elem_bytes", self.elem_bytes, 1)
        try:
            lo, hi = self.index_range
        except (TypeError, ValueError):
            raise ValueError(f"access {n!r}: index_range {self.index_range!r} is not (lo, hi)") from None
        _int(n, "index_range lo", lo)
        _int(n, "index_range hi", hi)
        if lo > hi:
            raise ValueError(f"access {n!r}: index_range ({lo}, {hi}) is empty")
        object.__setattr__(self, "index_range", (lo, hi))
        _int(n, "rebase_step", self.rebase_step)
        _int(n, "rebase_count", self.rebase_count, 1)
        _int(n, "base_offset", self.base_offset)
        if self.buffer_elems is not None:
            _int(n, "buffer_elems", self.buffer_elems, 1)

    def to_json(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["index_range"] = list(self.index_range)
        return d

    @property
    def max_rebase(self) -> int:
        """Largest re-base offset in elements: (rebase_count - 1) * rebase_step."""
        return (self.rebase_count - 1) * self.rebase_step

    @property
    def max_flat_index(self) -> int:
        """Largest element offset from the un-re-based buffer start."""
        return self.max_rebase + self.index_range[1]


@dataclass(frozen=True)
class OffsetProof:
    """What was proven for one access."""
    name: str
    addressing: str  # "buffer32" | "global64"
    max_byte_offset: int  # from the re-based resource base
    max_index: int  # the largest index computed in int32 (0 if none is)

    def to_json(self) -> dict:
        return {"name": self.name, "addressing": self.addressing,
                "max_byte_offset": self.max_byte_offset, "max_index": self.max_index}


def prove(access: Access) -> OffsetProof:
    """Prove bounds (1) and (2) for `access`; ValueError naming it if an int32 index overflows
    or it runs past `buffer_elems`."""
    a = access
    lo, hi = a.index_range
    if a.buffer_elems is not None and a.max_flat_index >= a.buffer_elems:
        raise ValueError(f"access {a.name!r}: element {a.max_flat_index} is past the end of "
                         f"{a.buffer!r} ({a.buffer_elems} elements)")
    int32_values = []
    if a.int32_rebase:
        int32_values.append(("re-base offset (rebase_count-1)*rebase_step", a.max_rebase))
    if a.int32_index:
        int32_values.append(("index after re-basing", hi))
    if a.int32_flat:
        int32_values.append(("flat element offset", a.max_flat_index))
    for what, v in int32_values:
        if v > INT32_MAX:
            raise ValueError(f"access {a.name!r} on {a.buffer!r}: the int32 {what} reaches {v}, "
                             f"over INT32_MAX = {INT32_MAX}; compute it in 64 bits")
    max_byte = a.base_offset + hi * a.elem_bytes
    addressing = "buffer32" if max_byte <= INT32_MAX else "global64"
    return OffsetProof(a.name, addressing, max_byte, max((v for _, v in int32_values), default=0))


def prove_all(accesses: Iterable[Access]) -> dict[str, OffsetProof]:
    """`prove` every access; names must be unique."""
    out: dict[str, OffsetProof] = {}
    for a in accesses:
        if a.name in out:
            raise ValueError(f"duplicate access name {a.name!r}")
        out[a.name] = prove(a)
    return out


def region_access(arena, region: str, index_range, *, name: str | None = None,
                  resource: str = "arena", rebase_step: int = 0, rebase_count: int = 1,
                  **kw) -> Access:
    """An access to a region of `arena` (elements: 8-byte pairs, or the bulk/plain dtype).

    resource "arena": the buffer resource is the whole arena, so the region's data offset
    stays in the 32-bit offset; "region": the resource is based at the region's data.
    """
    from .regions import PAIR_BYTES, TaggedPairs
    p = arena[region]
    r = p.region
    elem = PAIR_BYTES if isinstance(r, TaggedPairs) else r.dtype.bytes
    elems = r.elements if isinstance(r, TaggedPairs) else _prod(r.shape)
    if resource == "arena":
        base = p.data_offset
    elif resource == "region":
        base = 0
    else:
        raise ValueError(f"resource {resource!r} must be 'arena' or 'region'")
    return Access(name or region, region, elem, tuple(index_range), rebase_step, rebase_count,
                  base, buffer_elems=elems, **kw)


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
