"""FP8 GEMV on Hopper's tensor cores, split along K over every warp of a persistent grid.

Why: `gemv_mma` gives each CTA one 16-row tile (164 tiles on 132 SMs: 32 SMs carry two) and
each warp one load round trip per unrolled group. Here the work is UNITS of (16-row tile, K
split of 2 blocks = 256 k), dealt round-robin to every warp of the grid (3936 units over
1056 warps: within 7% of even), and each warp issues the NEXT unit's loads before it
multiplies the current one, so a load round trip overlaps the previous unit's math.

Partial tiles are reduced deterministically: a warp stores each unit's 16 x 8 partial (plain
stores), releases once after its last unit, then bumps each of its units' tile counters (one
64-bit atomic each); the unit that brings the
counter to S is the tile's last, acquires, and sums ALL the tile's partials in split order
(0, 1, ..., S-1), so the bits do not depend on which unit came last. That unit is also the
last to touch the counter in this launch, so it stores 0 back: the next launch (stream
ordered after this one) starts from zero, and a CUDA graph can replay the launch unchanged.
(Mailboxes between launches use monotone tags instead, layouts/tags.py: there no single
writer knows it is last.)
"""
from __future__ import annotations

from ..atoms import atom
from ..dsl import build_kernel
from ..ir import ABI, Ptr, Scalar
from ..types import bf16, f32, fp8e4m3fn, i32, u64
from . import gemv, gemv_mma

ATOM = gemv_mma.ATOM
TILE_N, CHUNK, MAX_ROWS, BLOCK = gemv_mma.TILE_N, gemv_mma.CHUNK, gemv_mma.MAX_ROWS, gemv.BLOCK
UNIT_BLOCKS = 2  # 128-blocks of K per unit: 2 x 2 chunks x (2 weight + 2 x) loads in flight
SLOTS = 4  # the atom's accumulator slots per lane


def abi():
    return ABI(w=Ptr(fp8e4m3fn), ws=Ptr(f32), x=Ptr(bf16), y=Ptr(f32), partials=Ptr(f32),
               counters=Ptr(u64), ctas=Scalar(i32))


def splits_of(K):
    return K // (BLOCK * UNIT_BLOCKS)


def body(k, *, N, K, R):
    at = atom(ATOM)
    a = k.args
    blocks = K // BLOCK
    if K % (BLOCK * UNIT_BLOCKS) or N % TILE_N or R > MAX_ROWS:
        raise ValueError(f"gemv_split: N={N} must be a multiple of {TILE_N}, K={K} of "
                         f"{BLOCK * UNIT_BLOCKS}, rows {R} <= {MAX_ROWS}")
    S = splits_of(K)
    units = (N // TILE_N) * S
    lane = k.lane_id()
    r, q = lane >> 2, lane & 3
    xrow_ok = r < R
    workers = a.ctas * k.W
    first = k.cta_id() * k.W + k.wave_id()

    def issue(u):
        """The loads of unit u (uniform): returns the per-lane registers they land in."""
        tile = (u // S) * TILE_N
        k0 = (u % S) * (BLOCK * UNIT_BLOCKS)
        regs = []
        for c in range(UNIT_BLOCKS * BLOCK // CHUNK):
            kb = k0 + c * CHUNK + q * 16
            regs.append(k.load(a.w, (tile + r) * K + kb, fp8e4m3fn, 16, nontemporal=True))
            regs.append(k.load(a.w, (tile + r + 8) * K + kb, fp8e4m3fn, 16, nontemporal=True))
            for h in range(2):
                regs.append(k.load(a.x, r * K + kb + h * 8, bf16, 8, mask=xrow_ok))
        return regs

    with k.if_(first < units):
        cur = [k.lane_var(v) for v in issue(first)]
        for u in k.range(first, units, workers):
            regs = [v.get() for v in cur]
            nxt = u + workers
            with k.if_(nxt < units):  # the next unit's loads fly while this one multiplies
                for v, x in zip(cur, issue(nxt)):
                    v.set(x)
            tile = (u // S) * TILE_N
            split = u % S
            total = None
            for b in range(UNIT_BLOCKS):
                acc = k.vec(*[k.const(0.0, f32)] * SLOTS)
                for c in range(BLOCK // CHUNK):
                    i = (b * (BLOCK // CHUNK) + c) * 4
                    w_lo = k.cast(k.cast(regs[i], f32), bf16)
                    w_hi = k.cast(k.cast(regs[i + 1], f32), bf16)
                    xs = regs[i + 2:i + 4]
                    for j in range(4):
                        x_j = [xs[(4 * j + e) // 8][(4 * j + e) % 8] for e in range(4)]
                        p = 4 * j
                        A = k.vec(w_lo[p], w_lo[p + 1], w_hi[p], w_hi[p + 1],
                                  w_lo[p + 2], w_lo[p + 3], w_hi[p + 2], w_hi[p + 3])
                        acc = k.mma(at, A, k.vec(*x_j), acc)
                scale = k.load(a.ws, (tile // BLOCK) * blocks + split * UNIT_BLOCKS + b, f32)
                total = acc * scale if total is None else k.fma(acc, scale, total)
            k.store(a.partials, (u * k.L + lane) * SLOTS, total)
        # One release for all of this warp's partials, AFTER its last unit: a fence waits for
        # every earlier memory operation of the thread, the next unit's in-flight loads too,
        # so a fence per unit would serialise the load pipeline (measured: 3.1x floor).
        k.fence("release", "device")
        for u in k.range(first, units, workers):
            old = k.atomic("add", a.counters, u // S, k.const(1, u64), order="relaxed")
            with k.if_((old + 1).eq(S)):  # the tile's last unit sums all splits
                k.fence("acquire", "device")
                tile = (u // S) * TILE_N
                base = (u // S) * S
                s = k.load(a.partials, (base * k.L + lane) * SLOTS, f32, SLOTS)
                for sp in range(1, S):
                    s = s + k.load(a.partials, ((base + sp) * k.L + lane) * SLOTS, f32, SLOTS)
                for slot, (dm, dn) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
                    n = q * 2 + dn
                    k.store(a.y, n * N + tile + r + dm, s[slot], mask=n < R)
                k.store(a.counters, u // S, k.const(0, u64), order="relaxed")


def build(target, *, N, K, R, waves=8):
    return build_kernel("gemv_fp8_split", body, abi=abi(), target=target, waves=waves,
                        wave_size=32, N=N, K=K, R=R)


def scratch(N, K, L=32):
    """Zeroed once: the partial tiles and the tile counters (each launch leaves them 0)."""
    import numpy as np
    units = (N // TILE_N) * splits_of(K)
    return dict(partials=np.zeros(units * L * SLOTS, np.float32),
                counters=np.zeros(N // TILE_N, np.uint64))


make_inputs = gemv.make_inputs
reference = gemv.reference
REL_TOL = gemv.REL_TOL


def check(inp, ref, **_):
    return gemv.check(inp, ref)
