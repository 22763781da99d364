"""Host-side decoding (and, for tests and host set-up, encoding) of arena regions.

The arena's bytes come as a numpy uint8 array or a torch uint8 tensor (any device: it is
copied to the host). All targets are little-endian. Decoded arrays are copies, so a later
change to the arena does not change them. Values keep the interpreter's storage dtype
(`DType.storage`: bf16 and fp8 as raw bits).

    decode(arena, buf, name) ->
        TaggedPairs -> PairsData(values, tags)        values: value dtype, tags: uint32
        BulkBuffer  -> BulkData(data, tag, count)     the counter's tag and publisher count
        PlainBuffer -> numpy array of the region's dtype and shape
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arena import Arena
from .regions import BulkBuffer, PlainBuffer, TaggedPairs, counter_word
from .tags import TAG_MAX


@dataclass
class PairsData:
    values: np.ndarray  # the value dtype's storage, the region's shape
    tags: np.ndarray  # uint32, the region's shape; 0 = never written

    @property
    def written(self) -> np.ndarray:
        return self.tags != 0

    def all_tagged(self, tag: int) -> bool:
        return bool(np.all(self.tags == tag))


@dataclass
class BulkData:
    data: np.ndarray
    counter_tag: int
    counter_count: int

    @property
    def counter_word(self) -> int:
        return counter_word(self.counter_tag, self.counter_count)

    def complete(self, tag: int, publishers: int) -> bool:
        return self.counter_tag == tag and self.counter_count == publishers


def as_bytes(buf) -> np.ndarray:
    """The arena image as a 1-D numpy uint8 array (a view for numpy input, a host copy for a
    torch tensor)."""
    if hasattr(buf, "detach") and hasattr(buf, "cpu"):  # torch tensor, without importing torch
        if str(buf.dtype) != "torch.uint8":
            raise ValueError(f"arena tensor has dtype {buf.dtype}, expected torch.uint8")
        buf = buf.detach().cpu().contiguous().numpy()
    if not isinstance(buf, np.ndarray):
        raise ValueError(f"arena bytes must be a numpy or torch uint8 array, not {type(buf).__name__}")
    if buf.dtype != np.uint8:
        raise ValueError(f"arena array has dtype {buf.dtype}, expected uint8")
    return buf.reshape(-1)


def _span(arena: Arena, b: np.ndarray, name: str) -> tuple:
    p = arena[name]
    if b.size < arena.total_bytes:
        raise ValueError(f"arena image has {b.size} bytes, the layout needs {arena.total_bytes}")
    return p, p.region


def _view(b: np.ndarray, off: int, nbytes: int, dtype: np.dtype, shape) -> np.ndarray:
    return b[off:off + nbytes].view(dtype).reshape(shape)


def decode(arena: Arena, buf, name: str):
    """Decode region `name` from the arena image `buf`."""
    b = as_bytes(buf)
    p, r = _span(arena, b, name)
    if isinstance(r, TaggedPairs):
        words = _view(b, p.data_offset, r.nbytes, np.dtype("<u8"), r.shape)
        vals = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(r.value_dtype.np)
        tags = (words >> np.uint64(32)).astype(np.uint32)
        return PairsData(vals.copy(), tags.copy())
    if isinstance(r, BulkBuffer):
        w = int(_view(b, p.counter_offset, 8, np.dtype("<u8"), ())[()])
        data = _view(b, p.data_offset, r.data_bytes, r.dtype.np, r.shape).copy()
        return BulkData(data, w >> 32, w & 0xFFFFFFFF)
    if isinstance(r, PlainBuffer):
        return _view(b, p.data_offset, r.nbytes, r.dtype.np, r.shape).copy()
    raise ValueError(f"region {name!r} has unknown kind {type(r).__name__}")


def decode_all(arena: Arena, buf) -> dict:
    """Every region, by name."""
    b = as_bytes(buf)
    return {p.name: decode(arena, b, p.name) for p in arena}


# -- host-side writers (tests, host set-up, the interpreter's initial images) ------------------

def _writable(buf) -> np.ndarray:
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8:
        raise ValueError("host writers take the arena image as a numpy uint8 array")
    return buf.reshape(-1)


def write_pairs(arena: Arena, buf: np.ndarray, name: str, values, tag) -> None:
    """Store `values` (the region's value dtype) with `tag` (scalar or array) as 64-bit pairs."""
    b = _writable(buf)
    p, r = _span(arena, b, name)
    if not isinstance(r, TaggedPairs):
        raise ValueError(f"region {name!r} is {r.kind}, not pairs")
    v = np.asarray(values, dtype=r.value_dtype.np).reshape(r.shape)
    t = np.broadcast_to(np.asarray(tag, dtype=np.int64), r.shape)
    if np.any(t < 0) or np.any(t > TAG_MAX):
        raise ValueError(f"region {name!r}: tags must be in 0 .. {TAG_MAX}")
    words = (t.astype(np.uint64) << np.uint64(32)) | v.view(np.uint32).astype(np.uint64)
    _view(b, p.data_offset, r.nbytes, np.dtype("<u8"), r.shape)[...] = words


def write_bulk(arena: Arena, buf: np.ndarray, name: str, data, tag: int, count: int | None = None) -> None:
    """Store the data and a counter word (tag, count); count defaults to every publisher."""
    b = _writable(buf)
    p, r = _span(arena, b, name)
    if not isinstance(r, BulkBuffer):
        raise ValueError(f"region {name!r} is {r.kind}, not bulk")
    _view(b, p.data_offset, r.data_bytes, r.dtype.np, r.shape)[...] = np.asarray(data, r.dtype.np).reshape(r.shape)
    w = counter_word(tag, r.publishers if count is None else count)
    _view(b, p.counter_offset, 8, np.dtype("<u8"), ())[...] = np.uint64(w)


def write_plain(arena: Arena, buf: np.ndarray, name: str, data) -> None:
    b = _writable(buf)
    p, r = _span(arena, b, name)
    if not isinstance(r, PlainBuffer):
        raise ValueError(f"region {name!r} is {r.kind}, not plain")
    _view(b, p.data_offset, r.nbytes, r.dtype.np, r.shape)[...] = np.asarray(data, r.dtype.np).reshape(r.shape)
