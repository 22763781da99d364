"""The DSL helpers the index stages share (stages/index.py): lane values (`_lane`, `_tid`,
`_scan`), `wave_rows`, rope angles (`_rope_freqs`, `lane_rope_freqs`, `_sincos`,
`rope_angles`), `rotate` (rope, Hadamard), `quantize`, `pack_words`, `ordered_digit`,
`wait_flags` (the ix_pdone pairs), and the stage-body wrappers (`stage_body`, `reloaded`,
`local_io`).

Registers (a persistent kernel holds every stage): each stage reads its pointers, the arena
and the tag again at its start (DSL reload_arg, `local_io`), derives lane values from an
opaque zero of the job index (`_lane`), and keeps per-row facts in LDS or VGPRs, so LLVM does
not hoist them out of the job loop into scalar registers held across all stages; the
front's stages get the same reload in kind `index` (`reloaded`). Zero spills on gfx950 and
gfx942 at 2, 4 and 8 rows (test/test_index.py).
"""
from __future__ import annotations

import math

import numpy as np

from layouts.scores import FIRST_DIGIT_SHIFT, REFINED_SHIFT
from monokernel.types import bf16, f32, i32, u32, u64

from .index_plan import HD, SCALE_FLOOR, IndexPlan
from .select import NORMAL_KEY_LO, sign_flip  # the scores' order: the selection's key mapping

# a bf16 is the high half of an f32: a packed pair's (relu_bf16x2) low value is the f32
# `pair << BF16_SHIFT`, its high value the f32 `pair & BF16_HIGH`
BF16_SHIFT = bf16.bits
BF16_HIGH = (1 << u32.bits) - (1 << bf16.bits)


# ----------------------------------------------------------------------------- DSL helpers

_CUR_LANE: list = [None, None]


def _lane(k):
    """This lane's index, as the current stage body made it (local_io): lane_id plus an
    opaque zero from the job index, so lane-derived values (predicates, offsets) are computed
    per job instead of hoisted out of the persistent job loop into registers held across
    every stage."""
    if _CUR_LANE[0] is k:
        return _CUR_LANE[1]
    return k.lane_id()


def _tid(k):
    return k.wave_id() * k.L + _lane(k)


def _has_bit(k, mask, i):
    """Whether bit i (an i32) of a ballot's wave-uniform mask is set (a uniform i1)."""
    return ((mask >> k.cast(i, mask.dtype)) & 1).ne(0)


def _rope_freqs(cfg):
    """round(inv_freq_i / 2pi * 2^64) for the 32 rope frequencies (revolutions a position):
    stages.front's exact fixed-point angles."""
    out = []
    for i in range(32):
        inv = cfg.rope_theta ** (-(2.0 * i) / 64)
        out.append(int(round(math.ldexp(inv / (2.0 * math.pi), 64))) % (1 << 64))
    return out


def _sincos(k, pos, freq):
    from .front import _sincos as f
    return f(k, pos, freq)


def _scan(k, x, n):
    """Inclusive prefix sum over lanes 0..n-1 (lane order), per-lane i32; lanes >= n may
    hold anything. Range tests are arithmetic (no lane predicate held in registers)."""
    lane = _lane(k)
    off = 1
    while off < n:
        src = lane - off
        inr = (src >> 31) + 1  # 1 if lane >= off else 0
        x = x + k.shuffle(x, k.max(src, 0)) * inr
        off *= 2
    return x


def ordered_digit(k, score, shift=FIRST_DIGIT_SHIFT):
    """layouts.scores.ordered_key(score) >> shift (integer operations on the bits; shift 26:
    the first digit, REFINED_SHIFT: the refined one)."""
    u = k.bitcast(score, u32)
    mag = u & 0x7FFFFFFF
    key = k.select((u >> 31).eq(1), ~u, u | 0x80000000)
    key = k.select(mag.eq(0), 0x80000000, key)
    bad = (mag > 0x7F800000) | u.eq(0xFF800000)
    return k.select(bad, 0, key) >> shift


def ordered_digit_canonical(k, score):
    """ordered_digit(score) for a score that is not -0.0 (its producer made zeros +0.0, e.g.
    by adding +0.0 in an FMA), in 5 integer operations instead of 10: the key's flip (all
    bits of a negative, the sign of a positive) is one xor with (sign mask | 2^31); the
    specials' own rule survives where it differs: -inf and negative NaNs already map to
    digit 0 through the flip, +inf to 63 as ordered_key does, and a positive NaN (which the
    flip would put at 63) is sent to 0."""
    digit = sign_flip(k, k.bitcast(score, u32)) >> FIRST_DIGIT_SHIFT
    return k.select(score.ne(score), k.const(0, u32), digit)


def refined_digit_canonical(k, score):
    """ordered_digit(score, REFINED_SHIFT) for a score that is not -0.0: the flip of
    ordered_digit_canonical, then 0 for a NaN and for the flips below 2**23 (-inf's and the
    negative NaNs': at 10 bits the flip alone would put -inf in digit 1)."""
    flip = sign_flip(k, k.bitcast(score, u32))
    bad = score.ne(score) | (flip < NORMAL_KEY_LO)
    return k.select(bad, k.const(0, u32), flip >> REFINED_SHIFT)


def stage_body(fn):
    """A stage body with local_io's mailbox and lane (reset when the body is emitted)."""
    import functools

    @functools.wraps(fn)
    def wrapped(self, k, job, io):
        try:
            return fn(self, k, job, local_io(k, io, job, getattr(self, "flat_mailbox", False)))
        finally:
            _CUR_LANE[0] = _CUR_LANE[1] = None
    return wrapped


def reloaded(stage):
    """A copy of another module's stage whose body gets local_io's mailbox (the arena, tag
    and pointers read again at the job's start), so composing it into a long persistent
    kernel does not keep its region bases in scalar registers across every stage."""
    cls = type(stage)

    def body(self, k, job, io):
        return cls.body(self, k, job, local_io(k, io))
    sub = type(f"Reloaded{cls.__name__}", (cls,), {"body": body, "__module__": cls.__module__})
    out = object.__new__(sub)
    out.__dict__.update(stage.__dict__)
    return out


def local_io(k, io, job=None, flat=False):
    """The stage's mailbox and arguments with every pointer (and the tag) read again from
    the kernel's argument memory at the stage's start (DSL reload_arg): a persistent kernel
    otherwise keeps every stage's pointers, and the region bases LLVM hoists out of the job
    loop, in scalar registers across all stages (SGPR spills). `flat`: the mailbox forms
    every region access through the arena pointer (layouts.protocol), one 64-bit base
    instead of one per region (the projection stages touch five regions)."""
    import copy
    from types import SimpleNamespace
    from layouts.protocol import Mailbox
    env = copy.copy(io.env)
    env.arena = k.reload_arg("arena")
    env.tag = k.reload_arg("tag")
    env.args = SimpleNamespace(**{n: k.reload_arg(n) for n in vars(io.env.args)})
    if job is not None:
        _CUR_LANE[0], _CUR_LANE[1] = k, k.lane_id() + k.bitcast(k.bitcast(job, u32) >> 31, i32)
    return Mailbox(env, io.arena, getattr(io, "scope", "device"), flat=flat)


def wave_rows(k, rows: int):
    """[(row, live)]: the rows this wave owns (row r to wave r % W), unrolled (a Python list,
    not a loop) so that what a stage loads for them before its wait stays in registers after
    it; a dead entry's row is clamped to a real one (its loads stay in bounds; `live` masks
    its stores)."""
    out = []
    for i in range(-(-rows // k.W)):
        r = k.wave_id() + i * k.W
        out.append((k.min(r, rows - 1), r < rows))
    return out


def lane_rope_freqs(k, p: IndexPlan, ne: int, freq):
    """The rope frequency (u64, stages.front's fixed point) of each of the lane's elements
    x[lane * ne + t], loaded from the 32-entry table `freq` (an input)."""
    lane = _lane(k)
    out = []
    for t in range(ne):
        e = lane * ne + t
        fi = (e >> 1) & 31 if p.config.index_rope_interleaved else e & 31
        out.append(k.load(freq, fi, u64))
    return out


def rope_angles(k, pos, freqs):
    """[(sin, cos)] of the lane's elements at position `pos` (lane_rope_freqs' `freqs`), for
    `rotate`: inputs only, so a stage forms them before its wait."""
    return [_sincos(k, pos, f) for f in freqs]


def rotate(k, p: IndexPlan, xs, angles):
    """rope on dims [0, 64) at `angles` (rope_angles) then (cfg.index_hadamard) the 128-point
    Hadamard / sqrt(128), on the lane's elements xs[t] = x[lane * ne + t]."""
    ne = len(xs)
    lane = _lane(k)
    cfg = p.config
    out = []
    for t in range(ne):
        e = lane * ne + t
        x = xs[t]
        if cfg.index_rope_interleaved:
            partner = xs[t ^ 1]
            first = (e & 1).eq(0)
        else:
            partner = k.lane_swap(x, 32 // ne)
            first = (e & 32).eq(0)
        sn, cs = angles[t]
        ps = partner * sn
        y = k.fma(x, cs, k.select(first, -ps, ps))
        out.append(k.select(e < 64, y, x))
    if cfg.index_hadamard:
        d = 1
        while d < HD:
            if d < ne:
                out = [(out[t ^ d] - out[t]) if t & d else (out[t] + out[t ^ d]) for t in range(ne)]
            else:
                m = d // ne
                hi = (lane & m).ne(0)
                nxt = []
                for t in range(ne):
                    px = k.lane_swap(out[t], m)
                    nxt.append(k.select(hi, px - out[t], out[t] + px))
                out = nxt
            d *= 2
        c = float(np.float32(HD ** -0.5))
        out = [x * c for x in out]
    return out


def quantize(k, p: IndexPlan, ys):
    """(fp8 elements, scale): s = the smallest power of two with s * fp8_max >= max(amax,
    1e-4) over the whole 128-vector (the wave), x8 = fp8(y / s) (exact division)."""
    am = k.abs(ys[0])
    for y in ys[1:]:
        am = k.max(am, k.abs(y))
    am = k.max(k.wave_max(am), SCALE_FLOOR)
    fmax = p.fp8_max
    est = am * (1.0 / fmax)
    sc = k.bitcast(k.bitcast(est, u32) & 0x7F800000, f32)
    for _ in range(2):
        sc = k.select(sc * fmax < am, sc * 2.0, sc)
    inv = 1.0 / sc
    return [k.cast(y * inv, p.fp8) for y in ys], sc


def pack_words(k, q8):
    """The lane's fp8 elements as the 128-vector's u32 words: (word, word index, is a word
    lane). ne = 2 (wave64): even lanes hold word lane/2; ne = 4 (warp32): every lane."""
    lane = _lane(k)
    if len(q8) == 4:
        return k.bitcast(k.vec(*q8), u32), lane, lane >= 0
    if len(q8) != 2:
        raise ValueError(f"index: {len(q8)} elements a lane")
    lo = k.cast(k.bitcast(k.vec(*q8), "u16"), u32)
    other = k.lane_swap(lo, 1)
    return lo | (other << 16), lane >> 1, (lane & 1).eq(0)


def wait_flags(k, io, lo, n: int, name: str = "ix_pdone", *, each_wave: bool = False):
    """Wait for pairs [lo, lo + n) of `name` (lo uniform i32 or int), then a device acquire:
    the jobs' plain data is visible. The CTA's threads poll their shares in parallel, then a
    CTA barrier (every wave's polls have succeeded, or the CTA failed); `each_wave`: every
    wave polls all n itself, lanes in parallel, and no barrier (a job that needs a few
    pairs, e.g. the `heads` q-head pairs, where a barrier would order its waves for
    nothing)."""
    width, me = (k.L, _lane(k)) if each_wave else (k.W * k.L, _tid(k))
    for it in range(-(-n // width)):
        i = it * width + me
        io.wait(name, lo + k.min(i, n - 1), mask=i < n if n % width else None)
    if not each_wave:
        io.env.cta_ok()
    k.fence("acquire", "device")


def publish_done(k, io, name: str, index):
    """A job's end: every wave's plain stores, the CTA's release, then the job's pair `index`
    of `name` (one pair a job, no counter its peers contend for: a 32-publisher bulk counter's
    load + compare-and-swap chain cost the ix_q jobs ~3.4 us each under the projections'
    memory traffic on the H200, bench/NOTES.md v8)."""
    k.fence("release", "cta")
    ok = io.env.cta_ok()  # a barrier when the CTA has several waves
    with k.if_(ok & k.wave_id().eq(0)):
        k.fence("release", "device")
        io.publish(name, index, k.cast(index, u32), mask=_lane(k).eq(0))
