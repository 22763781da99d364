"""Lane-level building blocks of the selection's stages: wave scans and picks, the
threshold search on suffix sums, the order-preserving key mapping, prefixes, a job's slice
facts (_Slice) and its state words (_State)."""
from __future__ import annotations

import contextlib

from layouts.protocol import Mailbox
from monokernel.types import f32, i32, i64, u32

from .config import LOAD_KEYS, NEXTRA, SCAN_UNROLL, SelectConfig, X_DONE, X_NEED


# ----------------------------------------------------------------------------- DSL helpers

def _flat(io):
    """The mailbox with accesses through the arena pointer (layouts.protocol: flat): the
    selection touches a dozen regions, whose constant pointers would otherwise be hoisted
    out of the job loop into SGPR pairs and spill."""
    return io if getattr(io, "flat", False) else Mailbox(io.env, io.arena, io.scope, flat=True)


def _barrier(k):
    if k.W > 1:
        k.barrier()


def _scan_step(k, unroll: int = SCAN_UNROLL) -> int:
    """Keys an iteration of a pass over the scores reads: `unroll` rounds of 4 a thread."""
    return 4 * k.W * k.L * unroll


@contextlib.contextmanager
def _wave0(k):
    if k.W > 1:
        with k.if_(k.wave_id().eq(0)):
            yield
    else:
        yield


def _u(k, x):
    return x if x.dtype == u32 else k.bitcast(x, u32)


def _i(k, x):
    return x if x.dtype == i32 else k.bitcast(x, i32)


def _scan(k, x):
    """Inclusive prefix sum over the lanes (lane order), per-lane i32: a butterfly, each
    step adding the partner half-block's total where the lane's bit says it lies below (an
    integer 0/1 factor, not a lane mask: masks live in SGPR pairs on AMD and get hoisted)."""
    lane = k.lane_id()
    incl = tot = x
    m, b = 1, 0
    while m < k.L:
        y = k.lane_swap(tot, m)
        bit = (lane >> b) & 1
        incl = incl + y * bit
        tot = tot + y
        m, b = m * 2, b + 1
    return incl


def _last(k, x):
    """The value of the wave's last lane, uniform."""
    return k.readfirstlane(k.shuffle(x, k.L - 1))


def _pick(k, x, lane_is):
    return k.wave_sum(k.select(lane_is, x, 0))


def _suffix_sums(k, hist, B, put):
    """One wave: put(b, cum[b] = sum of LDS hist[b..B-1], mask) for every bin b, top bin
    first, L bins a step (put may write hist itself: a step reads its bins before it writes
    them, and later steps read only lower bins)."""
    carry = k.uniform_var(0, i32)
    for ch in range((B + k.L - 1) // k.L):
        b = (B - 1) - (ch * k.L + k.lane_id())
        m = b >= 0
        bb = k.max(b, 0)
        g = _i(k, k.load(hist, bb, u32, mask=m))
        incl = _scan(k, g)
        put(bb, _u(k, carry.get() + incl), m)
        carry.set(carry.get() + _last(k, incl))


def _cta_suffix_sums(k, hist, B, put, totals):
    """All waves: put(b, cum[b] = sum of LDS hist[b..B-1], mask) for every bin, in parallel:
    thread t owns P = ceil(B / T) consecutive bins from the top (bins B-1-tP ..), its sum's
    exclusive prefix over the threads is a lane scan plus the lower waves' totals (LDS
    `totals` [W], one CTA barrier), then its bins top first. The one-wave `_suffix_sums`
    walks B / L steps in series (16 lane scans at 512 bins: ~0.8 us on the H200). put may
    write hist (a thread's bins are its own, read before the barrier)."""
    T = k.W * k.L
    P = -(-B // T)
    t = k.thread_id()
    got = []
    own = k.const(0, i32)
    for j in range(P):
        b = (B - 1) - (t * P + j)
        m = b >= 0
        bb = k.max(b, 0)
        g = _i(k, k.load(hist, bb, u32, mask=m))
        g = k.select(m, g, 0)
        got.append((bb, g, m))
        own = own + g
    incl = _scan(k, own)
    run = incl - own
    if k.W > 1:
        k.store(totals, k.wave_id(), _last(k, incl), mask=k.lane_id().eq(0))
        k.barrier()
        for w2 in range(k.W - 1):
            run = run + k.select(k.wave_id() > w2, k.load(totals, w2, i32), 0)
    for bb, g, m in got:
        run = run + g
        put(bb, _u(k, run), m)


def _cta_threshold(k, cum, B, need, out):
    """All threads, on suffix sums cum[0..B-1] (LDS, non-increasing): the one bin b with
    cum[b] >= need > cum[b + 1] (0 past the top) writes (b, cum[b], cum[b + 1]) to LDS
    `out` [3]; none does when cum[0] < need (the caller presets out[0] = -1: take all).
    `_threshold`'s answer from `_read_threshold` after a CTA barrier."""
    T = k.W * k.L
    t = k.thread_id()
    for j in range(-(-B // T)):
        b = t + j * T
        m = b < B
        c = _i(k, k.load(cum, k.min(b, B - 1), u32))
        up = b + 1 < B
        nxt = k.select(up, _i(k, k.load(cum, k.min(b + 1, B - 1), u32)), 0)
        hit = m & (c >= need) & (nxt < need)
        k.store(out, 0, b, mask=hit)
        k.store(out, 1, c, mask=hit)
        k.store(out, 2, nxt, mask=hit)


def _read_threshold(k, cum, B, out):
    """(takeall, b, has_hi, gb, ga) as `_threshold` returns them, from `_cta_threshold`'s
    words (uniform loads)."""
    b0 = k.load(out, 0, i32)
    takeall = b0 < 0
    b = k.max(b0, 0)
    has_hi = (b + 1) < B
    gb = k.select(takeall, _i(k, k.load(cum, 0, u32)), k.load(out, 1, i32))
    ga = k.select(takeall, k.select(has_hi, _i(k, k.load(cum, min(1, B - 1), u32)), 0),
                  k.load(out, 2, i32))
    return takeall, b, has_hi, gb, ga


def _threshold(k, cum, B, need):
    """One wave, on the suffix sums cum[0..B-1] (LDS, #(digit >= b)) of the candidates:
    (takeall, b, has_hi, gb, ga): the threshold bin b, the last with cum[b] >= need
    (takeall: none is, fewer candidates than needed: take them all, b = 0), whether a bin
    lies above it, gb = cum[b] and ga = cum[b + 1] (0 past the top)."""
    L = k.L
    cnt = k.uniform_var(0, i32)
    for ch in range((B + L - 1) // L):
        b = ch * L + k.lane_id()
        m = b < B
        g = _i(k, k.load(cum, k.min(b, B - 1), u32, mask=m))
        cnt.set(cnt.get() + k.wave_sum(k.select(m & (g >= need), k.const(1, i32), 0)))
    n_ge = cnt.get()
    takeall = n_ge.eq(0)
    b = k.max(n_ge - 1, 0)
    has_hi = (b + 1) < B
    gb = _i(k, k.load(cum, b, u32))
    ga = k.select(has_hi, _i(k, k.load(cum, k.min(b + 1, B - 1), u32)), 0)
    return takeall, b, has_hi, gb, ga


def ordered_keys(k, bits, want_nan=False):
    """layouts.scores.ordered_key on u32 bit patterns (any vector width), integer operations
    only: (key, is_nan or None). k0 = bits ^ (sign ? ~0 : 0x80000000); then -0.0 -> +0.0's
    key, and -inf / NaN (k0 < 2**23: -inf and negative NaNs; k0 > 0xFF800000 or 0: positive
    NaNs) -> 0."""
    k0, twice, key = _flipped(k, bits)
    bad = (k0 >> 23).eq(0) | ((0 - k0) >> 23).eq(0)
    key = k.select(bad, 0, key)
    return key, (twice > 0xFF000000 if want_nan else None)


def sign_flip(k, bits):
    """bits ^ (sign ? ~0 : 0x80000000): a float's bits (u32) as an unsigned key in the floats'
    order, -0.0 one below +0.0 (ordered_keys gives them one key), NaNs at the ends."""
    sign = k.bitcast(k.bitcast(bits, i32) >> 31, u32)
    return bits ^ (sign | 0x80000000)


def _flipped(k, bits):
    """(k0, twice, key): the sign flip k0 (sign_flip), twice = bits << 1 (0 for +-0.0),
    key = k0 with -0.0 given +0.0's key."""
    k0 = sign_flip(k, bits)
    twice = bits << 1  # drops the sign: 0 for +-0.0
    return k0, twice, k.select(twice.eq(0), 0x80000000, k0)


# the ordered keys of the selectable scores other than -0.0: -FLT_MAX .. +inf
NORMAL_KEY_LO, NORMAL_KEY_HI = 0x00800000, 0xFF800000
F32_QNAN_BITS, F32_NEG_INF_BITS = 0x7FC00000, 0xFF800000


def keys_and_specials(k, bits):
    """(key, special): key = ordered_keys' key for every score that is not -inf or NaN (the
    sign flip, -0.0 -> +0.0's key), special = the score is one of those (ordered key 0).
    ordered_keys = select(special, 0, key): its `bad` test (k0 < 2**23 or k0 > 0xFF800000)
    is `key - 2**23 > 0xFF000000` in unsigned arithmetic, key being k0 but for -0.0, which
    is not bad."""
    key = _flipped(k, bits)[2]
    return key, (key - NORMAL_KEY_LO) > (NORMAL_KEY_HI - NORMAL_KEY_LO)


def score_floor(k, key_lo):
    """The least selectable score whose ordered key is >= key_lo (uniform u32 >= 1), as f32:
    score >= it <=> ordered key >= key_lo for every score (keys below NORMAL_KEY_LO are
    -inf's and the NaNs', mapped to 0; -0.0 has +0.0's key and compares equal to it; NaN
    compares false). Past +inf's key nothing is selectable: NaN, which no score reaches."""
    tk = k.max(key_lo, NORMAL_KEY_LO)
    bits = k.select(tk < 0x80000000, ~tk, tk ^ 0x80000000)  # sign_flip's inverse
    return k.bitcast(k.select(tk > NORMAL_KEY_HI, k.const(F32_QNAN_BITS, u32), bits), f32)


def _lane_masks(k, raws, tests):
    """One mask per test (a function of a 4-vector of f32 scores, giving i1s) over a lane's
    4-vectors of raw scores (4 or 8: a 16- or 32-bit mask): bit 4j + e for vector j's entry
    e, i.e. the lane's keys in position order."""
    masks = [k.const(0, u32) for _ in tests]
    for j, raw in enumerate(raws):
        f = k.bitcast(raw, f32)
        for t, test in enumerate(tests):
            bits = k.cast(test(f), u32)
            for e in range(LOAD_KEYS):
                masks[t] = masks[t] | (k.extract(bits, e) << (LOAD_KEYS * j + e))
    return masks


def _lane_prefix(k, own, bits: int):
    """(exclusive prefix over the wave's lanes, the wave's total) of a lane's count `own` <
    2**bits: a ballot a count bit, independent steps (not a chain of lane swaps)."""
    excl, tot = k.const(0, i32), k.const(0, i32)
    for b in range(bits):
        bit = ((own >> b) & 1).ne(0)
        excl = excl + (k.prefix_count(bit) << b)
        tot = tot + (_i(k, k.cast(k.popc(k.ballot(bit)), u32)) << b)
    return excl, tot


def _lane_any(k, raws, test):
    """Whether any of a lane's keys (4-vectors of raw scores, as `_lane_masks`) passes `test`,
    valid or not: one OR of the compares, where a mask costs a select and an add a key (the
    lean scan's rare-branch flag, SelectPass.lean_any_special; what the branch counts it
    masks itself)."""
    out = None
    for raw in raws:
        bits = test(k.bitcast(raw, f32))
        for e in range(LOAD_KEYS):
            b = k.extract(bits, e)
            out = b if out is None else out | b
    return out


def _pick16(k, raws, it, jj):
    """Key jj (per lane, 0 .. 4 len(raws) - 1) of a lane's 4-key vectors (4 or 8), by a tree
    of selects on jj's bits (no LDS; `it` unused: the registers are the iteration's)."""
    def bit(b):
        return ((jj >> b) & 1).ne(0)

    def tree(vs, b):  # vs: 2**(b - 1) candidates, chosen by bits b - 1 .. LOAD_KEYS' bits
        if len(vs) == 1:
            return vs[0]
        half = len(vs) // 2
        return k.select(bit(b - 1), tree(vs[half:], b - 1), tree(vs[:half], b - 1))
    v = tree(list(raws), (len(raws) * LOAD_KEYS).bit_length() - 1)
    e = [k.extract(v, i) for i in range(4)]
    return k.select(bit(1), k.select(bit(0), e[3], e[2]), k.select(bit(0), e[1], e[0]))


def _pos(k, p, e):
    """Position of a 4-key group's entry e: p + e (p the first of 4 consecutive positions,
    a pass over the scores) or p[e] (a vector, entries of a list)."""
    return k.extract(p, e) if p.n == 4 else p + e


def _prefix(k, key, d):
    """The first d bits of key (d uniform i32 in 0..32; 0 for d == 0), as two shifts of at
    most 16 so that no shift reaches the width (and no select is needed)."""
    sh = 32 - d
    s1 = k.min(sh, 16)
    return (key >> k.cast(s1, u32)) >> k.cast(sh - s1, u32)


def _prefix_floor(k, Q, d):
    """The least key whose first d bits are Q (d uniform i32 in 0..32, Q < 2**d): Q << (32 -
    d) as two shifts of at most 16, as _prefix (0 for d == 0)."""
    sh = 32 - d
    s1 = k.min(sh, 16)
    return (Q << k.cast(s1, u32)) << k.cast(sh - s1, u32)


class _Slice:
    """Uniform facts of job (row, slice) every stage computes first: the row's key count and
    slices used (whether this job has keys); `bounds()` (inside the active branch) its range,
    exactly ScoresLayout.slices."""

    def __init__(self, k, io, cfg: SelectConfig, job):
        self.k, self.cfg = k, cfg
        S = cfg.max_slices
        self.r = job / S
        self.s = job - self.r * S
        n_raw = k.load(getattr(io.args, cfg.names.n_keys), self.r, i32)
        if cfg.positions:
            n_raw = n_raw + 1
        self.n_raw = n_raw
        n = k.min(k.max(n_raw, 0), cfg.capacity)
        self.n = n
        self.nseg = (n + (cfg.segment - 1)) / cfg.segment
        self.sc = k.max(k.min(self.nseg, S), 1)
        self.active = self.s < self.sc
        self.early = None  # sel_h1's first score loads, when issued before its wait
        self.lean_early = None  # ... those of the lean scan (SelectPass.lean_early_loads)
        self.gmax_early = None  # sel_h1's group maxima (SelectPass.group_maxima_early)

    def bounds(self):
        k, seg, sc, nseg = self.k, self.cfg.segment, self.sc, self.nseg

        def bound(i):
            num = i * nseg
            q = num / sc
            rem = num - q * sc
            up = (rem * 2 > sc) | ((rem * 2).eq(sc) & (q & 1).eq(1))
            return (q + k.cast(up, i32)) * seg
        self.lo = bound(self.s)
        self.hi = k.min(bound(self.s + 1), self.n)

    def list_base(self):
        """Where this slice's candidate list starts in a list region [rows, S, longest
        slice] (entries)."""
        return (self.r * self.cfg.max_slices + self.s) * self.cfg.max_slice_keys()

    def list_base_bytes(self):
        """list_base in bytes (i64): u32 keys and i32 positions, 4-byte entries both."""
        return self.k.cast(self.list_base(), i64) * u32.bytes


def _list_entry(k, cfg, sl, off, length, i, nv):
    """Where entry i (per lane, a multiple of LOAD_KEYS) of a row's lists laid end to end in
    slice order, each padded to whole 4-key groups, lies: (s, j, lim, at): its slice (a
    binary search of the LDS directory `off` [S + 1]: the last slice starting at or before
    i; empty lists start where the next one does, so it is never one of them), its index j
    in s's list, clamped into the list's room (an unmasked load there stays inside it), lim
    = s's list length (0 past nv: entry e is valid where j + e < lim) and `at`, its entry in
    the list region [rows, S, longest slice]."""
    S = cfg.max_slices
    lk = cfg.max_slice_keys()
    s = k.const(0, i32)
    start = k.const(0, i32)
    step = 1 << max(0, (S - 1).bit_length() - 1) if S > 1 else 0
    while step:
        cand = s + step
        at = k.load(off, k.min(cand, S - 1), i32)
        inside = (cand < sl.sc) & (at <= i)
        s = k.select(inside, cand, s)
        start = k.select(inside, at, start)
        step //= 2
    lim = k.select(i < nv, k.load(length, s, i32), 0)
    j = k.min(i - start, lk - LOAD_KEYS)
    return s, j, lim, (sl.r * S + s) * lk + j


def _region_loader(io, name, base):
    """load(i, mask): 4 entries of region `name` from entry base + i."""
    return lambda i, mask: io.load(name, base + i, 4, mask=mask)


class _State:
    """The 12 state words (uniform u32): from three 4-word vectors, each word extracted when
    first asked for, and a vector rebuilt only where a word was set (fewer ops where a stage
    needs or changes only a few)."""

    def __init__(self, k, words=None, vecs=None):
        self.k = k
        self._v = list(vecs) if vecs is not None else None
        self._w = dict(enumerate(words)) if words is not None else {}
        self._dirty = set(range(NEXTRA)) if words is not None else set()

    @staticmethod
    def load(k, ptr, idx0):
        """From LDS or from a message (ptr uniform; idx0 the first state word)."""
        return _State(k, vecs=[k.load(ptr, idx0 + 4 * j, u32, 4) for j in range(NEXTRA // 4)])

    def copy(self):
        c = _State(self.k, vecs=self._v)
        c._w, c._dirty = dict(self._w), set(self._dirty)
        return c

    def vecs(self):
        out = []
        for j in range(NEXTRA // 4):
            idx = range(4 * j, 4 * j + 4)
            if self._v is not None and not self._dirty.intersection(idx):
                out.append(self._v[j])
            else:
                out.append(self.k.vec(*[self[i] for i in idx]))
        return out

    def store_lds(self, ptr):
        for j, v in enumerate(self.vecs()):
            self.k.store(ptr, 4 * j, v)

    def __getitem__(self, i):
        if i not in self._w:
            self._w[i] = self.k.extract(self._v[i // 4], i % 4)
        return self._w[i]

    def __setitem__(self, i, value):
        self._w[i] = value
        self._dirty.add(i)

    def i(self, j):
        return _i(self.k, self[j])

    @property
    def done(self):
        return self[X_DONE].ne(0)


def initial_state(k, cfg):
    z = k.const(0, u32)
    w = [z] * NEXTRA
    w[X_NEED] = k.const(cfg.topk, u32)
    return _State(k, w)

