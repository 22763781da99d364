"""The scratch arena: one zero-initialised device allocation holding every region.

`Arena.from_regions(regions)` places the regions in the order given (stages declare them
in a fixed order, so the layout is deterministic: the same regions give the same offsets,
byte for byte, on the host and in the kernel). Every region starts on a 128-byte line and
its end is padded to the next line, so:

- a tagged pair is 8-byte aligned (the region starts on a line, elements are 8 bytes), so
  each pair is one aligned 64-bit access;
- a bulk buffer's counter owns a line and its data starts on the next one;
- two unrelated regions never share a cache line. 128 bytes is the L2 line on CDNA3/CDNA4
  and on Hopper. Consumers spin on mailbox and counter lines; if another CTA wrote a
  different region in the same line, every such store would pull the line away from the
  pollers (false sharing), and on AMD, where device-scope release/acquire write back and
  invalidate caches by line, unrelated traffic in a polled line costs coherence work on
  every poll. One line per region keeps each polled line touched only by its own protocol.

The arena's own base must be aligned to at least 128 bytes (device allocators give 256).
The scratch is zeroed once at allocation and never reset (tags, see tags.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .regions import LINE, BulkBuffer, Region

BASE_ALIGN = LINE


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


@dataclass(frozen=True)
class Placement:
    """A region and where it lives: `offset` (bytes from the arena base) and `span` (bytes
    reserved, a whole number of lines)."""
    region: Region
    offset: int
    span: int

    @property
    def name(self) -> str:
        return self.region.name

    @property
    def nbytes(self) -> int:
        return self.region.nbytes

    @property
    def end(self) -> int:
        return self.offset + self.span

    @property
    def data_offset(self) -> int:
        """Byte offset (from the arena base) of the region's elements."""
        if isinstance(self.region, BulkBuffer):
            return self.offset + self.region.data_offset
        return self.offset

    @property
    def counter_offset(self) -> int | None:
        """Byte offset of a bulk buffer's counter word (None for other regions)."""
        if isinstance(self.region, BulkBuffer):
            return self.offset + self.region.counter_offset
        return None

    def to_json(self) -> dict:
        d = dict(self.region.to_json())
        d["offset"] = self.offset
        d["span"] = self.span
        d["data_offset"] = self.data_offset
        if self.counter_offset is not None:
            d["counter_offset"] = self.counter_offset
        return d


class Arena:
    """Offsets, sizes and alignment of every region; lookup by name."""

    def __init__(self, placements: Iterable[Placement], total_bytes: int, line: int = LINE):
        self.placements: tuple[Placement, ...] = tuple(placements)
        self.total_bytes = total_bytes
        self.line = line
        self._by_name = {p.name: p for p in self.placements}

    @staticmethod
    def from_regions(regions: Iterable[Region], line: int = LINE) -> "Arena":
        """Place `regions` in order, each on its own `line`-byte lines. A duplicate name is a
        ValueError naming it."""
        if line < LINE or line & (line - 1):
            raise ValueError(f"line = {line} must be a power of two >= {LINE}")
        placements, seen, off = [], set(), 0
        for r in regions:
            if not isinstance(r, Region):
                raise ValueError(f"{r!r} is not a region")
            if r.name in seen:
                raise ValueError(f"duplicate region name {r.name!r}")
            seen.add(r.name)
            a = max(line, r.align)
            off = _round_up(off, a)
            span = _round_up(r.nbytes, line)
            placements.append(Placement(r, off, span))
            off += span
        return Arena(placements, off, line)

    # -- lookup ----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Placement:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no region {name!r} in the arena; regions: {list(self._by_name)}") from None

    def __contains__(self, name) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.placements)

    def __len__(self):
        return len(self.placements)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.placements]

    def offset(self, name: str) -> int:
        return self[name].offset

    def region(self, name: str) -> Region:
        return self[name].region

    def zeros(self) -> np.ndarray:
        """A host image of the freshly zeroed arena."""
        return np.zeros(self.total_bytes, dtype=np.uint8)

    # -- manifests -------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"line": self.line, "base_align": BASE_ALIGN, "total_bytes": self.total_bytes,
                "regions": [p.to_json() for p in self.placements]}

    @staticmethod
    def from_json(d) -> "Arena":
        """Rebuild from a manifest; the offsets are recomputed and must match the stored ones."""
        if isinstance(d, (str, bytes)):
            d = json.loads(d)
        a = Arena.from_regions([Region.from_json(r) for r in d["regions"]], int(d.get("line", LINE)))
        for p, r in zip(a.placements, d["regions"]):
            if p.offset != r["offset"]:
                raise ValueError(f"manifest places region {p.name!r} at {r['offset']}, "
                                 f"recomputed {p.offset}")
        if a.total_bytes != d["total_bytes"]:
            raise ValueError(f"manifest total {d['total_bytes']} != recomputed {a.total_bytes}")
        return a

    def __eq__(self, other) -> bool:
        if not isinstance(other, Arena):
            return NotImplemented
        return self.to_json() == other.to_json()

    def __str__(self) -> str:
        w = max([len(p.name) for p in self.placements] + [6])
        lines = [f"Arena: {len(self.placements)} regions, {self.total_bytes} bytes, {self.line}-byte lines",
                 f"{'region':<{w}} {'kind':<6} {'offset':>12} {'nbytes':>12} {'span':>12}"]
        for p in self.placements:
            lines.append(f"{p.name:<{w}} {p.region.kind:<6} {p.offset:>12} {p.nbytes:>12} {p.span:>12}")
        return "\n".join(lines)
