"""The mailbox protocol, kernel side: DSL helpers that form every arena access from the
`Arena` layout and take the launch's tag as a kernel value (regions.py states the protocol).

Free functions (`k` is the kernel builder, `arena_ptr` the arena argument, `arena` the
layout, `tag` a uniform u32 value):

    publish_pair(k, arena_ptr, arena, name, index, value, tag)     one relaxed 64-bit store
    poll_pair(k, arena_ptr, arena, name, index, tag, bound=)       -> (value, timed_out)
    poll_pairs_all(k, arena_ptr, arena, name, [(base, offset, mask)], tag)
                                                                    -> ([value], timed_out)
    store_data / load_data(k, arena_ptr, arena, name, index, ...)   bulk or plain data, plain
    release_bulk(k, arena_ptr, arena, name, tag)                    release fence + counter bump
    acquire_bulk(k, arena_ptr, arena, name, tag, bound=)            poll counter + acquire fence

Addresses: a region's base is `arena_ptr + placement offset` (a 64-bit add of a layout
constant); the element index inside the region is an int32, which the offset proof
(offsets.region_access with resource "arena") bounds. Nothing here names a byte offset a
stage would have to know.

`Mailbox(env, arena)` binds these to what the linker hands a stage body (monokernel.link
.JobEnv: the arena pointer, the tag, the poll bound and the error path): `io.publish`,
`io.wait` (a timed-out wait records the stage in the error word and masks the CTA's later
waits and publishes), `io.store` / `io.load`, `io.release` / `io.acquire`. A stage body
uses only those and its own buffers (`io.args`).

`release_bulk(..., fence=False)` and `acquire_bulk(..., fence=False)` drop the fence: the
broken variants a relaxed-visibility test must catch. Nothing else should use them.

`flat=True` (every function above; `Mailbox(..., flat=True)`) forms the same accesses through
the arena pointer itself, with the region's offset folded into the int32 element index,
instead of through a per-region pointer (arena + offset). Same addresses, same semantics; a
kernel that touches many regions then keeps one 64-bit base live instead of one per region
(LLVM hoists each region's constant pointer out of the job loop into a pair of SGPRs, which
spill once there are a dozen). The int32 index stays below INT32_MAX as long as the arena
does in elements of the access's size (checked when the access is formed).
"""
from __future__ import annotations

from monokernel.types import i1, i64, u32, u64

from monokernel.ir import DEFAULT_POLL_BOUND  # noqa: F401 (re-exported)

from .regions import PAIR_BYTES, BulkBuffer, PlainBuffer, TaggedPairs

VALUE_MASK = 0xFFFFFFFF


def _placement(arena, name, kinds, what):
    p = arena[name]
    if not isinstance(p.region, kinds):
        want = " or ".join(k.kind for k in kinds)
        raise ValueError(f"{what}: region {name!r} is {p.region.kind}, not {want}")
    return p


def region_base(k, arena_ptr, arena, name):
    """Uniform pointer to region `name`'s elements (pairs: the words; bulk/plain: the data)."""
    return k.ptr_add(arena_ptr, arena[name].data_offset)


def counter_base(k, arena_ptr, arena, name):
    """Uniform pointer to bulk region `name`'s counter word."""
    p = _placement(arena, name, (BulkBuffer,), "counter")
    return k.ptr_add(arena_ptr, p.counter_offset)


def _element(k, arena_ptr, arena, name, index, elem_bytes, flat, counter=False):
    """(pointer, index) of element `index` (of `elem_bytes`) of region `name`'s data (or, with
    `counter`, of its counter word): through the region's base, or `flat` through the arena
    pointer with the region's offset folded into the index."""
    if not flat:
        base = counter_base(k, arena_ptr, arena, name) if counter else \
            region_base(k, arena_ptr, arena, name)
        return base, index
    off = arena[name].counter_offset if counter else arena[name].data_offset
    if off % elem_bytes or arena.total_bytes // elem_bytes > 2**31 - 1:
        raise ValueError(f"region {name!r}: a flat index of {elem_bytes}-byte elements does "
                         f"not fit int32 in an arena of {arena.total_bytes} bytes")
    return arena_ptr, index + off // elem_bytes


def pack_pair(k, value, tag):
    """The u64 word of a tagged pair: value bits low, tag high."""
    bits = k.bitcast(value, u32) if value.dtype != u32 else value
    return k.cast(bits, u64) | (k.cast(tag, u64) << 32)


def publish_pair(k, arena_ptr, arena, name, index, value, tag, *, mask=None, scope="device",
                 flat=False):
    """Store (value, tag) as ONE aligned relaxed 64-bit store at element `index` of pairs
    region `name`. The consumer polls the word itself: no fence is needed."""
    p = _placement(arena, name, (TaggedPairs,), "publish")
    if value.dtype != p.region.value_dtype:
        raise ValueError(f"publish to {name!r}: value is {value.dtype}, the region holds "
                         f"{p.region.value_dtype}")
    ptr, index = _element(k, arena_ptr, arena, name, index, 8, flat)
    k.store(ptr, index, pack_pair(k, value, tag), order="relaxed", scope=scope, mask=mask)


def poll_pair(k, arena_ptr, arena, name, index, tag, *, bound=DEFAULT_POLL_BOUND, mask=None,
              scope="device", flat=False):
    """Poll element `index` of pairs region `name` until its tag is `tag` (on every active
    lane), at most `bound` times. Returns (value in the region's dtype, timed_out: uniform i1).
    A stale word (an older tag) or a fresh one (tag 0) never satisfies the poll."""
    p = _placement(arena, name, (TaggedPairs,), "poll")
    ptr, index = _element(k, arena_ptr, arena, name, index, 8, flat)
    word, timed_out = k.poll(ptr, index, tag, shift=32, bits=32, dt=u64, scope=scope,
                             bound=bound, mask=mask)
    bits = k.cast(word & VALUE_MASK, u32)
    dt = p.region.value_dtype
    return (bits if dt == u32 else k.bitcast(bits, dt)), timed_out


def poll_pairs_all(k, arena_ptr, arena, name, items, tag, *, bound=DEFAULT_POLL_BOUND,
                   scope="device", probe=False):
    """Poll several elements of pairs region `name` at once: `items` = [(base, offset,
    mask)], a lane's elements base + offset (base an i32 value, the same value object for
    elements that share it; offset a Python int; mask None: always). A round loads every
    element (relaxed, 64-bit), all before any is checked; rounds repeat until every active
    element of the wave carries `tag` in one round, or `bound` rounds have run. Returns
    ([value in the region's dtype], the last round's; timed_out: uniform i1). Why not one
    poll_pair an element: each poll waits for its own word, so n elements published
    together cost n round trips after they land; here one. Why whole rounds: a round is a
    load and a compare an element, where reloading only the stale ones costs a mask, a
    select and bit bookkeeping each. Why bases: one 64-bit pointer a base and the offsets
    as immediates (an i32 index an element made LLVM hold a 64-bit address each across the
    loop: ptxas spilled the front's post jobs). `probe`: the last element is first polled
    alone (the poll op, its own back-off), so a long wait loads one word a round."""
    p = _placement(arena, name, (TaggedPairs,), "poll")
    if not items:
        raise ValueError(f"poll of {name!r}: no elements")
    want = k.cast(tag, u32)
    bases = {}
    for base, _, _ in items:
        if id(base) not in bases:
            bases[id(base)] = k.ptr_add(arena_ptr, k.cast(base, i64) * PAIR_BYTES +
                                        arena[name].data_offset)
    where = [((bases[id(base)], offset), m) for base, offset, m in items]
    if probe:
        (ptr, index), m = where[-1]
        _, probe_out = k.poll(ptr, index, want, shift=32, bits=32, dt=u64, scope=scope,
                              bound=bound, mask=m)
    values = [k.lane_var(k.const(0, u32)) for _ in where]
    stale = k.lane_var(k.const(0, u32))

    def round_():
        words = [k.load(ptr, index, u64, order="relaxed", scope=scope, mask=m)
                 for (ptr, index), m in where]
        late = None
        for v, w, (_, m) in zip(values, words, where):
            v.set(k.cast(w & VALUE_MASK, u32))
            old = k.cast(w >> 32, u32).ne(want)
            old = old if m is None else old & m
            late = old if late is None else late | old
        stale.set(k.cast(late, u32))

    round_()
    rounds = k.uniform_var(1, u32, name="poll_rounds")
    given_up = k.uniform_var(0, u32, name="poll_given_up")
    any_stale = lambda: k.ballot(stale.get().ne(0)).ne(0)  # noqa: E731
    with k.while_(lambda: any_stale() & (rounds.get() < bound) & given_up.get().eq(0)):
        given_up.set(k.cast(k.poll_pause(), u32))
        round_()
        rounds.set(rounds.get() + 1)
    timed_out = any_stale() | probe_out if probe else any_stale()
    dt = p.region.value_dtype
    return [v.get() if dt == u32 else k.bitcast(v.get(), dt) for v in values], timed_out


def store_data(k, arena_ptr, arena, name, index, value, *, mask=None, flat=False):
    """Plain store of data elements of a bulk or plain region."""
    p = _placement(arena, name, (BulkBuffer, PlainBuffer), "store")
    if value.dtype != p.region.dtype:
        raise ValueError(f"store to {name!r}: value is {value.dtype}, the region holds {p.region.dtype}")
    ptr, index = _element(k, arena_ptr, arena, name, index, value.dtype.bytes, flat)
    k.store(ptr, index, value, mask=mask)


def load_data(k, arena_ptr, arena, name, index, n=1, *, mask=None, flat=False):
    """Plain load of `n` data elements of a bulk or plain region."""
    p = _placement(arena, name, (BulkBuffer, PlainBuffer), "load")
    ptr, index = _element(k, arena_ptr, arena, name, index, p.region.dtype.bytes, flat)
    return k.load(ptr, index, p.region.dtype, n, mask=mask)


def release_bulk(k, arena_ptr, arena, name, tag, *, fence=True, scope="device", flat=False):
    """One publisher's release of bulk region `name` (call once per publisher, after its data
    stores): a release fence, then the counter update: one publisher: an atomic store of
    (tag << 32) | 1; several: a compare-and-swap loop applying counter_after_publish (the
    first publisher of a launch replaces the previous launch's word, the others add one)."""
    p = _placement(arena, name, (BulkBuffer,), "release")
    cnt, c0 = _element(k, arena_ptr, arena, name, 0, 8, flat, counter=True)
    if fence:
        k.fence("release", scope)
    tag64 = k.cast(tag, u64)
    first = (tag64 << 32) | 1
    if p.region.publishers == 1:
        k.store(cnt, c0, first, order="relaxed", scope=scope)
        return
    cur = k.uniform_var(k.load(cnt, c0, u64, order="relaxed", scope=scope), name="cnt")
    done = k.uniform_var(0, u32, name="cas_done")
    with k.while_(lambda: done.get().eq(0)):
        c = cur.get()
        new = k.select((c >> 32).eq(tag64), c + 1, first)
        old = k.atomic("cas", cnt, c0, new, compare=c, order="relaxed", scope=scope)
        done.set(k.cast(old.eq(c), u32))
        cur.set(old)


def acquire_bulk(k, arena_ptr, arena, name, tag, *, bound=DEFAULT_POLL_BOUND, mask=None,
                 fence=True, scope="device", flat=False):
    """Poll bulk region `name`'s counter until it reads complete_word(tag) (every publisher
    of this launch has released), then an acquire fence. Returns timed_out (uniform i1)."""
    p = _placement(arena, name, (BulkBuffer,), "acquire")
    # the publisher count is opaque: a constant half of the 64-bit word would be hoisted out
    # of the persistent job loop and held (in an SGPR pair with the tag) across the kernel
    want = (k.cast(tag, u64) << 32) | k.opaque(p.region.publishers, u64)
    cnt, c0 = _element(k, arena_ptr, arena, name, 0, 8, flat, counter=True)
    _, timed_out = k.poll(cnt, c0, want, bits=64, dt=u64, scope=scope, bound=bound, mask=mask)
    if fence:
        k.fence("acquire", scope)
    return timed_out


class Mailbox:
    """The protocol bound to a linked job: what a stage body receives as `io`.

    `env` is the linker's JobEnv (k, job, tag, arena pointer, args, poll_bound, ok, fail,
    cta_ok); `arena` the layout. Waits are masked by the CTA's health: once a wait of the
    CTA timed out, later waits return at once and publishes/releases are skipped, so a
    failed job never publishes values under the current tag.
    """

    def __init__(self, env, arena, scope: str = "device", flat: bool = False):
        self.env = env
        self.k = env.k
        self.arena = arena
        self.scope = scope
        self.flat = flat  # accesses through the arena pointer (module doc)
        self.args = env.args
        self.job = env.job
        self.stage = env.stage

    # -- helpers -----------------------------------------------------------------------
    def _mask(self, mask):
        ok = self.env.ok
        if mask is None:
            return ok
        if mask.dtype != i1:
            raise ValueError(f"mask must be an i1 value, got {mask!r}")
        return mask & ok

    def region(self, name):
        return self.arena.region(name)

    @property
    def ok(self):
        """Uniform i1: no wait of this CTA has timed out (mask stores to output buffers with
        it, so a failed launch leaves them unwritten)."""
        return self.env.ok

    # -- tagged pairs ------------------------------------------------------------------
    def publish(self, name, index, value, *, mask=None):
        publish_pair(self.k, self.env.arena, self.arena, name, index, value, self.env.tag,
                     mask=self._mask(mask), scope=self.scope, flat=self.flat)

    def wait(self, name, index, *, mask=None):
        """The value of pairs element `index` once it carries this launch's tag."""
        v, timed_out = poll_pair(self.k, self.env.arena, self.arena, name, index, self.env.tag,
                                 bound=self.env.poll_bound, mask=self._mask(mask), scope=self.scope,
                                 flat=self.flat)
        self.env.fail(timed_out, f"pairs {name!r}")
        return v

    def wait_all(self, name, items, *, probe=False):
        """The values of pairs elements [(base, offset, mask)] (poll_pairs_all, `probe`
        its) once each carries this launch's tag, polled together: one round trip once they
        have landed."""
        values, timed_out = poll_pairs_all(
            self.k, self.env.arena, self.arena, name,
            [(b, o, self._mask(m)) for b, o, m in items], self.env.tag,
            bound=self.env.poll_bound, scope=self.scope, probe=probe)
        self.env.fail(timed_out, f"pairs {name!r}")
        return values

    # -- bulk and plain data -----------------------------------------------------------
    def store(self, name, index, value, *, mask=None):
        store_data(self.k, self.env.arena, self.arena, name, index, value, mask=self._mask(mask),
                   flat=self.flat)

    def load(self, name, index, n=1, *, mask=None):
        return load_data(self.k, self.env.arena, self.arena, name, index, n, mask=mask,
                         flat=self.flat)

    def prefetch_line(self, name, index, nbytes, *, mask=None):
        """A hint (prefetch_l2 line=True): the L2 line holding data elements index .. of
        region `name` (`nbytes` from there, within the line)."""
        p = _placement(self.arena, name, (BulkBuffer, PlainBuffer), "prefetch")
        ptr, index = _element(self.k, self.env.arena, self.arena, name, index,
                              p.region.dtype.bytes, self.flat)
        self.k.prefetch_l2(ptr, index * p.region.dtype.bytes, nbytes, mask=mask, line=True)

    def release(self, name, *, fence=True):
        """This job's release of bulk region `name`: once per job, after all its stores,
        from every wave (with several waves: a CTA barrier, then wave 0 releases)."""
        k = self.k
        ok = self.env.cta_ok()  # barriers included when the CTA has several waves
        if k.W > 1:
            ok = ok & k.wave_id().eq(0)
        with k.if_(ok):
            release_bulk(k, self.env.arena, self.arena, name, self.env.tag, fence=fence,
                         scope=self.scope, flat=self.flat)

    def acquire(self, name, *, fence=True, mask=None):
        """Wait until every publisher of bulk region `name` has released for this launch
        (`mask`: the lanes that poll; a wave with none returns at once)."""
        timed_out = acquire_bulk(self.k, self.env.arena, self.arena, name, self.env.tag,
                                 bound=self.env.poll_bound, mask=self._mask(mask), fence=fence,
                                 scope=self.scope, flat=self.flat)
        self.env.fail(timed_out, f"the counter of bulk {name!r}")


__all__ = ["Mailbox", "publish_pair", "poll_pair", "poll_pairs_all", "store_data", "load_data",
           "release_bulk", "acquire_bulk", "region_base", "counter_base", "pack_pair",
           "DEFAULT_POLL_BOUND"]
