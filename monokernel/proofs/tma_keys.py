"""Proof kernel: pages of indexer keys copied by TMA (128B-swizzled) into a ring of LDS slots
and scored by SS wgmma straight from there: D[t] = keys(page t) @ Q for a few steps.

Why: the scoring's key loads into registers cannot hide their latency (bench/NOTES.md v20:
ptxas waits for every load of the loop at its top), DeepGEMM's paged MQA logits keeps keys in
shared memory filled by TMA with an mbarrier a slot. fp8 wgmma reads K-major operands only,
and a page's row-major keys (64 x 128 bytes) are a K-major layout only 128B-swizzled, which a
TMA tensor copy does as it copies (`KernelBuilder.tma_load_rows`) and the 1-D bulk copy
cannot. This kernel is the pieces of that path on their own: the tensor map derived by the
launcher (`ir.TensorMap`: the cache as rows of 128 bytes, a page = PAGE_ROWS rows, its keys
the first KEYS of them), the swizzled placement (`atoms.base.swizzled`), the swizzled A
descriptor (`wgmma_e4m3(64, a_smem=True, a_sw128=True)`, chunk c at start address + 32 c),
a two-slot ring with an mbarrier phase per use, the slot refilled after a CTA barrier once
its chain retired. The interpreter runs it in CI; on the H200 it proves the placement and
the descriptor against the hardware (test_proofs_gpu).

One CTA, one warpgroup (4 warps); the queries (B, N = COLS columns) staged once.
"""
from __future__ import annotations

import numpy as np

from .. import numerics
from ..atoms import wgmma_e4m3
from ..atoms.base import SW128_ATOM_BYTES
from ..dsl import build_kernel
from ..ir import ABI, MBARRIER_BYTES, TMA_SWIZZLE_128B, Ptr, TensorMap
from ..types import f32, fp8e4m3fn, i32, u8, u64

KEYS = 64  # a page's keys: the wgmma's M
KEY_BYTES = 128  # one key (an indexer head dim of fp8)
SCALE_BYTES = KEYS * 4  # the page's fp32 key scales after its keys
PAGE_BYTES = KEYS * KEY_BYTES + SCALE_BYTES  # 8448: the index cache's page
PAGE_ROWS = PAGE_BYTES // KEY_BYTES  # 66 rows of 128 bytes: keys, then two rows of scales
COLS = 64  # B's columns (a row pair x 32 heads in the scoring)
CHUNK = 32  # K bytes a wgmma (k32 e4m3)
CHUNKS = KEY_BYTES // CHUNK
SLOTS = 2  # the key ring
SLOT_BYTES = KEYS * KEY_BYTES
ATOM = wgmma_e4m3(COLS, a_smem=True, a_sw128=True)


def abi():
    return ABI(cache=Ptr(u8, readonly=True),
               cache_tmap=TensorMap(of="cache", row_bytes=KEY_BYTES, box_rows=KEYS,
                                    swizzle=TMA_SWIZZLE_128B),
               q=Ptr(u8, readonly=True), pages=Ptr(i32, readonly=True), d=Ptr(f32))


def body(k, *, steps):
    a = k.args
    tid = k.wave_id() * k.L + k.lane_id()
    T = k.W * k.L
    b_bytes = int(ATOM.b_smem.table().max()) + 1  # one chunk's B [32, COLS]
    qs = k.lds("q_smem", u8, CHUNKS * b_bytes)
    ring = k.lds("key_slots", u8, SLOTS * SLOT_BYTES, align=SW128_ATOM_BYTES)
    bars = k.mbarrier("key_bars", SLOTS)
    bar = [k.ptr_add(bars, s * MBARRIER_BYTES) for s in range(SLOTS)]
    slot = [k.ptr_add(ring, s * SLOT_BYTES) for s in range(SLOTS)]
    first = k.wave_id().eq(0)

    def issue(t, s):
        with k.if_(first):
            k.mbar_arrive_tx(bar[s], SLOT_BYTES)
            k.tma_load_rows(slot[s], "cache_tmap", k.load(a.pages, t, i32) * PAGE_ROWS, bar[s])

    with k.if_(first):
        for s in range(SLOTS):
            k.mbar_init(bar[s], 1)
    k.barrier()
    for s in range(min(SLOTS, steps)):
        issue(s, s)
    # B: the queries (q [COLS, KEY_BYTES] row-major) at each chunk's K-major places
    for e0 in range(0, CHUNKS * CHUNK * COLS, T):
        e = k.const(e0, i32) + tid
        c, rem = e / (CHUNK * COLS), e % (CHUNK * COLS)
        kk, n = rem / COLS, rem % COLS
        k.store(qs, c * b_bytes + _layout_eval(k, ATOM.b_smem.layout, [kk, n]),
                k.load(a.q, n * KEY_BYTES + c * CHUNK + kk, u8))
    with k.async_proxy_lds():
        k.barrier()
    a0 = k.lds_offset("key_slots")
    q0 = k.lds_offset("q_smem")
    for t in range(steps):
        s = t % SLOTS
        k.mbar_wait(bar[s], (t // SLOTS) & 1)
        k.wgmma_fence()
        acc = k.vec(*[k.const(0.0, f32)] * ATOM.c_slots)
        for c in range(CHUNKS):
            da = k.const(ATOM.a_smem_descriptor(a0 + s * SLOT_BYTES + c * CHUNK), u64)
            db = k.const(ATOM.smem_descriptor(q0 + c * b_bytes), u64)
            acc = k.wgmma(ATOM, da, db, acc)
        k.wgmma_commit()
        k.wgmma_wait(0)
        for i in range(ATOM.c_slots):
            m, n = _c_place(k, tid, i)
            k.store(a.d, (t * KEYS + m) * COLS + n, acc[i])
        if t + SLOTS < steps:
            k.barrier()  # every warp's chain on slot s has retired: it may be refilled
            issue(t + SLOTS, s)


def _layout_eval(k, lay, coords):
    """A Layout's offset at runtime coordinates (each mode's shape/stride, mixed radix)."""
    total = k.const(0, i32)
    for x, shape, stride in zip(coords, lay.shape, lay.stride):
        shapes = shape if isinstance(shape, tuple) else (shape,)
        strides = stride if isinstance(stride, tuple) else (stride,)
        rest = x
        for sh, st in zip(shapes, strides):
            total = total + (rest % sh) * st
            rest = rest / sh
    return total


def _c_place(k, tid, i):
    """(row, col) of accumulator slot i of thread tid (the atom's C map)."""
    rows, cols = ATOM.c_rows(), ATOM.c_cols()  # [thread, slot]
    lay_r = _thread_table(k, rows[:, i], tid)
    lay_c = _thread_table(k, cols[:, i], tid)
    return lay_r, lay_c


def _thread_table(k, col, tid):
    """col[tid] from the closed form the C map has: warp w, group g, quad t
    (rows 16 w + g (+8), cols 2 t (+1) + 8 j): fitted on the host, checked there."""
    w, g, t4 = tid >> 5, (tid >> 2) & 7, tid & 3
    tt = np.arange(128)
    fw, fg, ft = tt >> 5, (tt >> 2) & 7, tt & 3
    # col = base + cw * w + cg * g + ct * t: solve from the table and check it
    base = int(col[0])
    cw = int(col[32] - col[0])
    cg = int(col[4] - col[0])
    ct = int(col[1] - col[0])
    if not np.array_equal(base + cw * fw + cg * fg + ct * ft, col):
        raise ValueError(f"{ATOM.name}: the C map is not affine in (warp, group, quad)")
    return k.const(base, i32) + w * cw + g * cg + t4 * ct


def build(target, *, steps=3):
    if target != "sm_90a" and target != "interp":
        raise ValueError(f"tma_keys: TMA and wgmma are sm_90a's; not {target!r}")
    return build_kernel("tma_keys", body, abi=abi(), target=target, waves=4, wave_size=32,
                        steps=steps)


def make_inputs(rng, *, steps=3, pages=5):
    """A cache of `pages` pages of random e4m3 keys (scales arbitrary bytes), queries, and
    the page each step loads (shuffled: one page twice, so a slot is refilled with a page
    it held before only by chance of the order)."""
    keys = numerics.convert(rng.standard_normal((pages, KEYS, KEY_BYTES)) * 2, "f64", fp8e4m3fn)
    cache = rng.integers(0, 256, (pages, PAGE_BYTES), dtype=np.uint8)
    cache[:, :KEYS * KEY_BYTES] = keys.view(np.uint8).reshape(pages, -1)
    q = numerics.convert(rng.standard_normal((COLS, KEY_BYTES)), "f64", fp8e4m3fn)
    order = rng.permutation(pages)[:steps] if steps <= pages else rng.integers(0, pages, steps)
    return dict(cache=cache.reshape(-1), q=q.view(np.uint8).reshape(-1),
                pages=order.astype(np.int32),
                d=np.full(steps * KEYS * COLS, np.nan, np.float32))


def reference(inp, *, steps=3):
    pages = inp["cache"].reshape(-1, PAGE_BYTES)[:, :KEYS * KEY_BYTES]
    keys = numerics.to_f64(pages.reshape(-1).view(fp8e4m3fn.np), fp8e4m3fn).reshape(
        -1, KEYS, KEY_BYTES)
    q = numerics.to_f64(inp["q"].view(fp8e4m3fn.np), fp8e4m3fn).reshape(COLS, KEY_BYTES)
    return dict(d=np.stack([keys[p] @ q.T for p in inp["pages"][:steps]]))


def tolerance():
    """Exact products; the sums of 128 in f32 (the hardware's order, ~14 significant bits
    on the H200's wgmma e4m3: atoms' notes): relative to the sum of |products|."""
    return KEY_BYTES * 2.0 ** -13


def check(inp, ref, *, steps=3) -> float:
    """Worst |got - ref| / (sum of |products| + 1): NaN (an unwritten element) fails."""
    got = inp["d"].astype(np.float64).reshape(steps, KEYS, COLS)
    if not np.isfinite(got).all():
        return float("inf")
    return float(np.max(np.abs(got - ref["d"]) / (np.abs(ref["d"]) + 1.0)))
