"""Global memory of the interpreter, in three models.

`Memory` is sequentially consistent: every store is seen by every later load.

`RelaxedMemory` is the model that makes a missing fence fail (DESIGN.md section 6). A plain
store by CTA c first sits in c's private overlay (c sees it; nobody else does). It becomes
globally visible when c releases (a release fence, or an atomic/store with release order, at
device or system scope) or at a random later point. A CTA that reads with a plain load sees a
byte written by another CTA only if that byte became visible before the reader's last acquire
(an acquire fence, or an atomic/load/poll with acquire order) or a random later refresh;
otherwise it sees the byte's previous value. Atomic accesses (tagged pairs, counters) are
single coherent accesses: they read and write the newest value and are seen by everyone at
once, whole.

`CausalMemory` (the interpreter's acquire_only mode) is RelaxedMemory with acquire made
exact: an acquire shows only the releases its CTA has observed through atomic loads (vector
clocks, release and acquire cumulative), never at random.

Addresses: buffer i lives at (i + 1) << ADDR_SHIFT, so a pointer is a plain u64 and every
access is bounds-checked against the buffer it starts in.
"""
from __future__ import annotations

import numpy as np

from .ir import access_alignment

ADDR_SHIFT = 40
OFFSET_MASK = (1 << ADDR_SHIFT) - 1


class MemoryFault(Exception):
    """An access outside every buffer, misaligned, or straddling two buffers."""


class Memory:
    def __init__(self):
        self.buffers: list[np.ndarray] = []  # uint8, one per buffer
        self.names: list[str] = []
        self.writes = 0  # progress counter: any change of memory contents

    def add(self, name: str, data: np.ndarray) -> int:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1).copy()
        self.buffers.append(raw)
        self.names.append(name)
        return (len(self.buffers)) << ADDR_SHIFT

    def view(self, base: int) -> np.ndarray:
        return self.buffers[(base >> ADDR_SHIFT) - 1]

    def locate(self, addrs: np.ndarray, nbytes: int, what: str):
        """Resolve per-lane byte addresses to (buffer index, byte offsets [lanes, nbytes])."""
        addrs = addrs.astype(np.uint64)
        bufs = (addrs >> np.uint64(ADDR_SHIFT)).astype(np.int64) - 1
        offs = (addrs & np.uint64(OFFSET_MASK)).astype(np.int64)
        if len(bufs) == 0:
            return 0, offs[:, None]
        b = int(bufs[0])
        if not (bufs == b).all() or not 0 <= b < len(self.buffers):
            bad = [hex(int(a)) for a in addrs[:4]]
            raise MemoryFault(f"{what}: address(es) {bad} outside the kernel's buffers")
        size = self.buffers[b].size
        if offs.min() < 0 or offs.max() + nbytes > size:
            worst = int(offs.max())
            raise MemoryFault(f"{what}: byte offset {worst} (+{nbytes}) outside buffer "
                              f"{self.names[b]!r} of {size} bytes")
        align = access_alignment(nbytes)
        if (offs % align).any():
            raise MemoryFault(f"{what}: misaligned {nbytes}-byte access at offset "
                              f"{int(offs[offs % align != 0][0])} of {self.names[b]!r}")
        return b, offs[:, None] + np.arange(nbytes)

    # the two access kinds every model provides --------------------------------------------
    def plain_load(self, cta: int, b: int, idx: np.ndarray) -> np.ndarray:
        return self.buffers[b][idx]

    def plain_store(self, cta: int, b: int, idx: np.ndarray, data: np.ndarray):
        self.buffers[b][idx] = data
        self.writes += 1

    def atomic_load(self, b: int, idx: np.ndarray, cta: int | None = None) -> np.ndarray:
        """An atomic load's bytes (the newest; `cta`: the loading CTA, for a model that tracks
        what each CTA has observed, CausalMemory)."""
        return self.buffers[b][idx]

    def atomic_store(self, cta: int, b: int, idx: np.ndarray, data: np.ndarray,
                     rmw: bool = False):
        """`rmw`: the store of a read-modify-write (CausalMemory joins views there)."""
        self.buffers[b][idx] = data
        self.writes += 1

    def release(self, cta: int):
        pass

    def acquire(self, cta: int):
        pass

    def random_step(self, rng):
        pass

    def settle(self) -> bool:
        """Make everything visible (the 'eventually' of a relaxed model). True if that changed
        anything a reader could see."""
        return False


class RelaxedMemory(Memory):
    # a step's chance that a random CTA's stores become visible (flush), and that a random
    # CTA sees everything visible as if it had acquired (refresh: 0 in the interpreter's
    # acquire_only mode)
    FLUSH_PROB = 0.02
    REFRESH_PROB = 0.02

    def __init__(self, num_ctas: int, flush_prob: float = FLUSH_PROB,
                 refresh_prob: float = REFRESH_PROB, settle_acquires: bool = True):
        super().__init__()
        self.num_ctas = num_ctas
        self.flush_prob = flush_prob
        self.refresh_prob = refresh_prob
        # settle() (every wave stalled) also acquires for every CTA; False (acquire_only): it
        # only makes the stores visible, and a reader still needs its own acquire (polls
        # read atomically, so they make progress either way)
        self.settle_acquires = settle_acquires
        self.clock = 1
        self.acq_time = [0] * num_ctas
        self.prev: list[np.ndarray | None] = []
        self.stamp: list[np.ndarray | None] = []
        self.writer: list[np.ndarray | None] = []
        # overlay[cta][buffer] = (data, valid) for stores not yet visible to others
        self.overlay: list[dict[int, tuple[np.ndarray, np.ndarray]]] = [dict() for _ in range(num_ctas)]

    def add(self, name, data):
        base = super().add(name, data)
        self.prev.append(None)
        self.stamp.append(None)
        self.writer.append(None)
        return base

    def _history(self, b):
        if self.stamp[b] is None:
            n = self.buffers[b].size
            self.prev[b] = self.buffers[b].copy()
            self.stamp[b] = np.zeros(n, np.int64)
            self.writer[b] = np.full(n, -1, np.int32)

    def _seen(self, cta, b, idx) -> np.ndarray:
        """Which bytes idx of buffer b (each with a stamp) CTA `cta` sees at their newest: its
        own, and those made visible before its last acquire."""
        return (self.stamp[b][idx] <= self.acq_time[cta]) | (self.writer[b][idx] == cta)

    def plain_load(self, cta, b, idx):
        cur = self.buffers[b]
        if self.stamp[b] is None:
            out = cur[idx]
        else:
            out = np.where(self._seen(cta, b, idx), cur[idx], self.prev[b][idx])
        ov = self.overlay[cta].get(b)
        if ov is not None:
            data, valid = ov
            out = np.where(valid[idx], data[idx], out)
        return out

    def plain_store(self, cta, b, idx, data):
        ov = self.overlay[cta].get(b)
        if ov is None:
            n = self.buffers[b].size
            ov = self.overlay[cta][b] = (np.zeros(n, np.uint8), np.zeros(n, bool))
        ov[0][idx] = data
        ov[1][idx] = True

    def _flush(self, cta):
        for b, (data, valid) in self.overlay[cta].items():
            if not valid.any():
                continue
            self._history(b)
            where = np.nonzero(valid)[0]
            self.clock += 1
            self.prev[b][where] = self.buffers[b][where]
            self.buffers[b][where] = data[where]
            self.stamp[b][where] = self.clock
            self.writer[b][where] = cta
            valid[:] = False
            self.writes += 1

    def atomic_store(self, cta, b, idx, data, rmw=False):
        ov = self.overlay[cta].get(b)
        if ov is not None and ov[1][idx].any():
            self._flush(cta)  # a CTA's own earlier plain store to these bytes is older
        self.buffers[b][idx] = data
        if self.stamp[b] is not None:
            self.prev[b][idx] = data
            self.stamp[b][idx] = 0
        self.writes += 1

    def release(self, cta):
        self._flush(cta)

    def acquire(self, cta):
        self.acq_time[cta] = self.clock

    def random_step(self, rng):
        if rng.random() < self.flush_prob:
            self._flush(int(rng.integers(self.num_ctas)))
        if rng.random() < self.refresh_prob:
            self.acquire(int(rng.integers(self.num_ctas)))

    def settle(self):
        before = self.writes
        for c in range(self.num_ctas):
            self._flush(c)
        if not self.settle_acquires:
            return self.writes != before
        stale = any(t < self.clock for t in self.acq_time)
        for c in range(self.num_ctas):
            self.acquire(c)
        return self.writes != before or stale


class CausalMemory(RelaxedMemory):
    """The interpreter's acquire_only model: RelaxedMemory without random refreshes, a stall's
    settle only making stores visible, and an acquire making visible only the releases its
    CTA has observed (vector clocks). A CTA's release (flush) stamps its stores and advances
    its own entry of its view; an atomic store (a tagged pair, a counter word) carries the
    writer's view, and a read-modify-write joins it with the location's (a release sequence:
    the last publisher's count carries every publisher's data); an atomic load records the
    loaded bytes' views as observed by its CTA; an acquire joins what the CTA has observed into
    its view. A plain load sees another CTA's stored byte iff the release that stamped it is in
    the reader's view. So a consumer's acquire covers exactly what its polls saw published
    (cumulatively: what the publisher had itself acquired), as PTX's and HSA's release /
    acquire do; RelaxedMemory's acquire makes every earlier release visible, which hid a
    missing acquire behind another wait's (bench/NOTES.md v59)."""

    def __init__(self, num_ctas: int):
        super().__init__(num_ctas, refresh_prob=0.0, settle_acquires=False)
        self.view = np.zeros((num_ctas, num_ctas), np.int64)  # [reader, writer]: last stamp seen
        self.observed = np.zeros((num_ctas, num_ctas), np.int64)
        self.flag_views: list[np.ndarray] = [np.zeros(num_ctas, np.int64)]  # 0: no view
        self.flag_ref: list[np.ndarray | None] = []  # per buffer: each byte's flag_views index

    def add(self, name, data):
        base = super().add(name, data)
        self.flag_ref.append(None)
        return base

    def _flush(self, cta):
        super()._flush(cta)
        self.view[cta, cta] = self.clock  # its own stores: every stamp so far

    def _seen(self, cta, b, idx) -> np.ndarray:
        """Its own bytes, and those whose writer's release is in its view."""
        w = self.writer[b][idx]
        return (w == cta) | (self.stamp[b][idx] <= self.view[cta][np.maximum(w, 0)])

    def _views_at(self, b, idx) -> np.ndarray:
        """The join of the views the atomic stores to bytes idx of buffer b carried."""
        ref = self.flag_ref[b]
        if ref is None:
            return self.flag_views[0]
        refs = np.unique(ref[idx])
        return np.max(np.stack([self.flag_views[int(i)] for i in refs]), axis=0)

    def atomic_load(self, b, idx, cta=None):
        if cta is not None:
            np.maximum(self.observed[cta], self._views_at(b, idx), out=self.observed[cta])
        return self.buffers[b][idx]

    def atomic_store(self, cta, b, idx, data, rmw=False):
        super().atomic_store(cta, b, idx, data)
        v = self.view[cta].copy()
        if rmw:
            np.maximum(v, self._views_at(b, idx), out=v)
        if self.flag_ref[b] is None:
            self.flag_ref[b] = np.zeros(self.buffers[b].size, np.int32)
        self.flag_ref[b][idx] = len(self.flag_views)
        self.flag_views.append(v)

    def acquire(self, cta):
        super().acquire(cta)
        np.maximum(self.view[cta], self.observed[cta], out=self.view[cta])
