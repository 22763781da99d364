"""The NVPTX backend (monokernel.backend.nvptx) on small DSL kernels: PTX for sm_90a with
the instructions each construct must lower to, and BackendErrors (raised before LLVM runs)
for what Hopper lacks. The kernels (`CASES`) are shared with test_cuda_run.py, which runs
them on an H200 and compares with the interpreter."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from monokernel import interp, numerics
from monokernel.atoms import amd as amd_atoms
from monokernel.atoms import nvidia as nv_atoms
from monokernel.backend import nvptx
from monokernel.backend.llvm_common import BackendError
from monokernel.dsl import ABI, Ptr, Scalar, build_kernel
from monokernel.ir import Kernel, LDSAlloc
from monokernel.targets import SM90A
from monokernel.types import (bf16, f32, fp8e4m3fn, fp8e4m3fnuz, i32, u8, u16, u32, u64)

SM = "sm_90a"


# ----------------------------------------------------------------------------- kernels

def _vscale(k, *, chunks):
    """out[i] = x[i] * s + 1 over a masked tail, one loop of `chunks` warps per CTA, plus a
    16-byte vector path (f32x4)."""
    a = k.args
    base = k.cta_id() * (chunks * k.L)
    for j in k.range(chunks):
        i = base + j * k.L + k.lane_id()
        m = i < a.n
        v = k.load(a.x, i, f32, mask=m)
        k.store(a.out, i, v * a.s + 1.0, mask=m)
    q = k.cta_id() * k.L + k.lane_id()
    v4 = k.load(a.x, q * 4, f32, 4)
    w = k.vec(*[k.extract(v4, 3 - t) * 2.0 for t in range(4)])
    k.store(a.out4, q * 4, w)


def _xlane(k):
    """Every cross-lane op on i32, f32 and u64 values; one column of `out` per result."""
    a = k.args
    lane = k.lane_id()
    v = k.load(a.src, lane, i32)
    f = k.cast(v, f32) * 0.25
    u = k.cast(v, u64) * k.const(0x100000001, u64)
    pred = (v & 1).eq(1)
    cols = [
        k.lane_swap(v, 1), k.lane_swap(v, 16), k.bitcast(k.lane_swap(f, 4), i32),
        k.shuffle(v, (lane * 7 + 3) & 31),
        k.bitcast(k.ballot(pred), i32), k.prefix_count(pred), k.readfirstlane(v),
        k.wave_reduce(v, "add"), k.wave_reduce(v, "max"), k.wave_reduce(v, "min"),
        k.wave_reduce(v, "or"), k.wave_reduce(v, "and"),
        k.bitcast(k.wave_reduce(f, "add"), i32), k.bitcast(k.wave_reduce(f, "max"), i32),
        k.bitcast(k.readfirstlane(f), i32),
        *[k.cast(x, i32) for x in k.match_any(v & 7)],  # (lanes alike, lowest of them)
    ]
    for c, x in enumerate(cols):
        k.store(a.out, c * k.L + lane, x)
    k.store(a.out64, lane, k.lane_swap(u, 8))
    k.store(a.out64, k.L + lane, k.shuffle(u, 31 - lane))
    k.store(a.out64, 2 * k.L + lane, k.wave_reduce(u, "add"))


XLANE_COLS = 17
MATCH_COLS = (15, 16)  # _xlane's match_any columns: group size, leader


def _atomics(k):
    """Atomics of every kind, order and scope. Contended counters only see commutative
    operations, so their final values are deterministic; old values are stored only where
    a lane owns its address."""
    a = k.args
    lane = k.lane_id()
    c = k.cta_id()
    gid = c * k.L + lane
    one = k.const(1, i32)
    k.atomic("add", a.cnt, 0, lane + 1)                                     # relaxed device
    k.atomic("max", a.cnt, 1, gid, order="acq_rel")
    k.atomic("min", a.cnt, 2, 0 - gid, order="release")
    k.atomic("or", a.cnt, 3, one << lane, order="acquire")
    k.atomic("and", a.cnt, 4, ~(one << (lane & 15)), order="seq_cst")
    k.atomic("add", a.cnt, 5, lane, scope="system")
    k.atomic("add", a.cnt, 6, k.const(1, i32))                              # uniform: once a wave
    k.atomic("add", a.cnt, 7, lane + 1, mask=lane < 5)                      # masked
    k.atomic("add", a.cnt, 8 + c, lane, scope="cta", order="acq_rel")       # this CTA's word
    k.atomic("max", a.ucnt, 0, k.cast(gid, u32) * 2654435761, scope="device")
    k.atomic("min", a.ucnt, 1, k.cast(gid, u32) + 7)
    k.atomic("add", a.fl, 0, k.cast(lane, f32) * 0.5, order="acq_rel")
    k.atomic("add", a.c64, 0, k.cast(gid, u64) << 33)
    k.atomic("max", a.c64, 1, k.cast(gid, u64) * 0x9E3779B97F4A7C15)
    # lane-owned words: the old values are defined
    o0 = k.atomic("exch", a.own, gid, gid * 3, order="acq_rel")
    o1 = k.atomic("cas", a.own, gid, gid * 5, compare=gid * 3)                # succeeds
    o2 = k.atomic("cas", a.own, gid, gid * 7, compare=gid, scope="system")    # fails but lane 0
    o3 = k.atomic("add", a.own, gid, one, order="seq_cst", scope="cta")
    k.store(a.olds, gid * 4, k.vec(o0, o1, o2, o3))
    # LDS atomics
    lds = k.lds("cnt", i32, 4)
    with k.if_(k.wave_id().eq(0)):
        k.store(lds, lane & 3, k.const(0, i32), mask=lane < 4)
    k.barrier()
    k.atomic("add", lds, lane & 3, lane, scope="cta")
    k.barrier()
    got = k.load(lds, lane & 3, i32)
    k.store(a.ldsout, c * k.L + lane, got)


ATOMIC_GRID = 8


def _handoff(k, *, rounds, bound):
    """A ring of tagged-pair hand-offs through every CTA of the grid, `rounds` times round:
    CTA c waits for (value, tag) from CTA c-1 (CTA 0 from the last CTA, one round earlier),
    publishes (value * 3 + c + 1, tag) as ONE relaxed device-scope 64-bit store. A poll that
    runs out of its bound records the CTA in `err`."""
    a = k.args
    c = k.cta_id()
    n = k.num_ctas()
    prev = k.select(c.eq(0), n - 1, c - 1)
    val = k.uniform_var(0, u32)
    for r in k.range(rounds):
        tag = k.cast(r, u32) + a.tag0
        first = c.eq(0) & r.eq(0)
        with k.if_else(first) as (seed, wait):
            with seed:
                val.set(k.const(7, u32))
            with wait:
                want = k.select(c.eq(0), tag - 1, tag)
                x, timed_out = k.poll(a.box, prev, want, shift=32, bits=32, bound=bound)
                with k.if_(timed_out):
                    k.atomic("or", a.err, 0, k.const(1, u32), scope="device")
                    k.store(a.who, c, k.cast(r, u32) + 1)
                val.set(k.cast(x, u32))
        new = val.get() * 3 + k.cast(c, u32) + 1
        pair = (k.cast(tag, u64) << 32) | k.cast(new, u64)
        k.store(a.box, c, pair, order="relaxed", scope="device")
        k.store(a.trace, r * n + c, new)
    # a poll that must time out: nothing ever writes `never`
    _, to = k.poll(a.never, 0, 1, bits=32, bound=64, dt=u32)
    k.store(a.timeouts, c, k.cast(to, u32))
    t0 = k.clock()
    t1 = k.clock()
    k.store(a.clockok, c, k.cast(t1 >= t0, u32))


def _casts(k, *, n):
    """fp8 e4m3fn both ways (all 256 codes; special and tie values), bf16 both ways,
    saturating float -> int, and a 4-wide fp8 vector cast (the paired cvt)."""
    a = k.args
    lane = k.lane_id()
    for j in k.range(256 // k.L):
        i = j * k.L + lane
        b = k.load(a.codes, i, fp8e4m3fn)
        k.store(a.decoded, i, k.cast(b, f32))
    for j in k.range(n // k.L):
        i = j * k.L + lane
        x = k.load(a.x, i, f32)
        k.store(a.fp8, i, k.cast(x, fp8e4m3fn))
        h = k.cast(x, bf16)
        k.store(a.bf, i, h)
        k.store(a.bfback, i, k.cast(h, f32))
        k.store(a.toint, i, k.cast(x, i32))
        k.store(a.tou8, i, k.cast(x, u8))
    for j in k.range(n // (4 * k.L)):
        i = j * k.L + lane
        x4 = k.load(a.x, i * 4, f32, 4)
        k.store(a.fp8v, i * 4, k.cast(x4, fp8e4m3fn))
        k.store(a.fp8vback, i * 4, k.cast(k.cast(x4, fp8e4m3fn), f32))


CAST_N = 512


def _lds_barrier(k, *, words):
    """Every thread writes LDS words, a barrier, every thread reads words another wave wrote."""
    a = k.args
    buf = k.lds("buf", i32, words)
    t = k.thread_id()
    T = k.W * k.L
    c = k.cta_id()
    for j in k.range(words // T):
        k.store(buf, j * T + t, t * 3 + j + c)
    k.barrier()
    for j in k.range(words // T):
        v = k.load(buf, (words - 1) - (j * T + t), i32)
        k.store(a.out, c * words + j * T + t, v)


def _mma(k, *, atom):
    a = k.args
    lane = k.lane_id()
    av = k.load(a.A, lane * atom.a_slots, atom.a_dtype, atom.a_slots)
    bv = k.load(a.B, lane * atom.b_slots, atom.b_dtype, atom.b_slots)
    cv = k.load(a.C, lane * atom.c_slots, f32, atom.c_slots)
    d = k.mma(atom, av, bv, cv)
    k.store(a.D, lane * atom.c_slots, d)


def _wgmma(k, *, atom):
    """B copied global -> LDS at the atom's layout, one warpgroup issues A(regs) x B(smem) + C."""
    a = k.args
    t = k.thread_id()
    img = k.lds("b", u32, atom.k * atom.n // 4)
    words = atom.k * atom.n // 4
    for j in k.range((words + 127) // 128):
        w = j * 128 + t
        x = k.load(a.Bimg, w, u32, mask=w < words)
        k.store(img, w, x, mask=w < words)
    with k.async_proxy_lds():  # B is read next by wgmma: the writers' proxy fence
        k.barrier()
    av = k.load(a.A, t * 16, fp8e4m3fn, 16)
    nd = atom.c_slots
    parts = [k.load(a.C, t * nd + 4 * q, f32, 4) for q in range(nd // 4)]
    cv = k.vec(*[k.extract(p, e) for p in parts for e in range(4)])
    desc = k.const(atom.smem_descriptor(0), u64)
    k.wgmma_fence()
    d = k.wgmma(atom, av, desc, cv)
    k.wgmma_commit()
    k.wgmma_wait(0)
    for q in range(nd // 4):
        k.store(a.D, t * nd + 4 * q, k.vec(*[k.extract(d, 4 * q + e) for e in range(4)]))


def _relu_pack(k):
    """out[i] = relu_bf16x2(x[2i], x[2i + 1]) for every lane of every CTA."""
    a = k.args
    i = k.cta_id() * k.L + k.lane_id()
    v = k.load(a.x, 2 * i, f32, 2)
    k.store(a.out, i, k.relu_bf16x2(k.extract(v, 0), k.extract(v, 1)))


def _relu_pack_args(rng, grid):
    """Special values first (signed zeros, NaN, infinities, ties to even at bf16's last
    bit, subnormals, the largest finite f32), then random values of every sign and scale."""
    special = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0,
                        1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -9, 3.0 + 2.0 ** -7,
                        1e-40, -1e-40, 3.4028235e38, 2.0 ** -126], np.float32)
    n = 2 * 32 * grid
    rest = (rng.standard_normal(n - special.size) *
            np.exp2(rng.integers(-30, 30, n - special.size))).astype(np.float32)
    return dict(x=np.concatenate([special, rest]), out=np.zeros(n // 2, np.uint32))


def _relu_pack_reference(args):
    """Independent of numerics: f32 bits rounded to their top 16 by adding 0x7FFF plus the
    kept part's lowest bit (nearest, ties to even), negatives to +0, NaN to 0x7FC0."""
    x = np.maximum(args["x"], np.float32(0.0))  # NaN stays NaN
    u = x.view(np.uint32).astype(np.uint64)
    b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32)
    b = np.where(np.isnan(x), np.uint32(0x7FC0), b).reshape(-1, 2)
    return dict(out=b[:, 0] | b[:, 1] << 16)


def _relu_pack_same(got, want):
    """Equal bits, any bf16 NaN for a NaN, either zero for a zero (the op's contract)."""
    def halves(u):
        return [(u >> s) & 0xFFFF for s in (0, 16)]
    for g, w in zip(halves(got), halves(want)):
        gn = ((g & 0x7F80) == 0x7F80) & ((g & 0x7F) != 0)
        wn = ((w & 0x7F80) == 0x7F80) & ((w & 0x7F) != 0)
        assert ((g == w) | (gn & wn) | (((g | w) & 0x7FFF) == 0)).all()


def _wgmma_relu_chain(k, *, atom, atom2):
    """The scoring's head sum on the tensor cores: an e4m3 wgmma (m64n16k32) into f32, relu
    of its accumulator packed to bf16 pairs IN PLACE as the A operand of a bf16 wgmma
    (m64n8k16, B2 from shared memory after B), whose D is stored."""
    a = k.args
    t = k.thread_id()
    words = (atom.k * atom.n + atom2.k * atom2.n * 2) // 4
    img = k.lds("b", u32, words)
    for j in k.range((words + 127) // 128):
        w = j * 128 + t
        k.store(img, w, k.load(a.Bimg, w, u32, mask=w < words), mask=w < words)
    with k.async_proxy_lds():
        k.barrier()
    av = k.load(a.A, t * 16, fp8e4m3fn, 16)
    zero = k.vec(*[k.const(0.0, f32)] * atom.c_slots)
    k.wgmma_fence()
    d = k.wgmma(atom, av, k.const(atom.smem_descriptor(0), u64), zero)
    k.wgmma_commit()
    k.wgmma_wait(0)
    a2 = k.bitcast(k.vec(*[k.relu_bf16x2(k.extract(d, 2 * i), k.extract(d, 2 * i + 1))
                           for i in range(atom.c_slots // 2)]), bf16, atom2.a_slots)
    zero2 = k.vec(*[k.const(0.0, f32)] * atom2.c_slots)
    k.wgmma_fence()
    d2 = k.wgmma(atom2, a2, k.const(atom2.smem_descriptor(atom.k * atom.n), u64), zero2)
    k.wgmma_commit()
    k.wgmma_wait(0)
    k.store(a.D, t * atom2.c_slots, d2)


def _wgmma_relu_chain_args(atom, atom2):
    def make(rng, grid):
        A = numerics.convert(rng.standard_normal((atom.m, atom.k)) * 2, "f64", fp8e4m3fn)
        B = numerics.convert(rng.standard_normal((atom.k, atom.n)) * 2, "f64", fp8e4m3fn)
        B2 = numerics.convert(rng.standard_normal((atom2.k, atom2.n)), "f64", bf16)
        img = np.concatenate([atom.b_to_smem(B), np.zeros(atom.k * atom.n - atom.b_to_smem(B).size,
                                                          np.uint8)]).view(np.uint32)
        img2 = atom2.b_to_smem(B2)
        img2 = np.concatenate([img2, np.zeros(atom2.k * atom2.n - img2.size, np.uint16)])
        return dict(A=atom.to_lanes("a", A), Bimg=np.concatenate([img, img2.view(np.uint32)]),
                    Bmat=B, B2mat=B2, D=np.zeros((128, atom2.c_slots), np.float32))
    return make


def _wgmma_relu_chain_reference(atom, atom2):
    """relu(A @ B) rounded to bf16 (from its f32 value), then @ B2, in float64."""
    def ref(args):
        A = atom.from_lanes("a", numerics.to_f64(args["A"], fp8e4m3fn))
        S = (A @ numerics.to_f64(args["Bmat"], fp8e4m3fn)).astype(np.float32)
        P = numerics.to_f64(numerics.f32_to_bf16_bits(np.maximum(S, 0.0)), bf16)
        return dict(D=atom2.to_lanes("c", P @ numerics.to_f64(args["B2mat"], bf16))
                    .astype(np.float32))
    return ref


def _wgmma_relu_chain_bound(atom, atom2):
    """The e4m3 sums' ~14 bits (_wgmma_bound) may move a relu'd value across a bf16 rounding
    boundary: one bf16 ulp (2**-8 relative) a product, plus f32 sums; a wrong lane map or
    a relu on the wrong half is off by O(|D|)."""
    def bound(args):
        A = np.abs(atom.from_lanes("a", numerics.to_f64(args["A"], fp8e4m3fn)))
        S = A @ np.abs(numerics.to_f64(args["Bmat"], fp8e4m3fn))
        B2 = np.abs(numerics.to_f64(args["B2mat"], bf16))
        return dict(D=atom2.to_lanes("c", (2.0 ** -8 + 2.0 ** -11) * S @ B2 + 1e-6))
    return bound


# ----------------------------------------------------------------------------- cases

@dataclass
class Case:
    name: str
    build: Callable[[], Kernel]
    args: Callable[[np.random.Generator, int], dict]  # (rng, grid) -> numpy arrays + scalars
    grid: int | None            # None: the GPU's SM count (132 on the H200); interp uses 132
    outputs: tuple
    floats: dict = field(default_factory=dict)     # output -> (rtol, atol); others bit-exact
    decode: dict = field(default_factory=dict)     # output -> dtype: equal as numbers, any NaN
    expect: tuple = ()          # regexes the PTX must contain
    interp_kw: dict = field(default_factory=dict)
    reference: Callable | None = None  # (args) -> {output: array}, besides the interpreter
    # (args) -> {output: per-element absolute tolerance}: for hardware that rounds in its own
    # way (wgmma e4m3 accumulates with ~14 significant bits, not the interpreter's f32)
    bound: Callable | None = None
    # output -> check(got, want) for outputs equal under an op's own contract (e.g. any NaN)
    same: dict = field(default_factory=dict)


def _k(name, fn, abi, waves=1, **params) -> Callable[[], Kernel]:
    return lambda: build_kernel(name, fn, abi=abi, target=SM, waves=waves, **params)


def _predicated(k):
    """Masked stores (i32, f32x4, u64, LDS) and masked LDS / global atomics inside
    predicated_masks (predicated PTX), then the same stores outside it (branches): both
    must write exactly the masked-in elements."""
    a = k.args
    t = k.thread_id()
    gid = k.cta_id() * (k.W * k.L) + t
    x = k.load(a.x, gid, i32)
    m = (x & 3).ne(0)
    lds = k.lds("hist", u32, 8)
    k.store(lds, t & 7, k.const(0, u32), mask=t < 8)
    k.barrier()
    with k.predicated_masks():
        k.store(a.o32, gid, x * 3, mask=m)
        k.store(a.o128, gid * 4, k.vec(x, x + 1, x + 2, x + 3) , mask=m)
        k.store(a.o64, gid, k.cast(x, u64) << 33, mask=m)
        k.atomic("add", lds, x & 7, k.const(1, u32), mask=m, scope="cta")
        old = k.atomic("add", a.gcnt, x & 7, k.const(1, u32), mask=m)
        k.store(a.olds, gid, old, mask=~m)  # masked-off lanes' result: 0, stored where off
    k.store(a.o32b, gid, x * 5, mask=~m)
    k.barrier()
    k.store(a.hist, k.cta_id() * 8 + (t & 7), k.load(lds, t & 7, u32), mask=t < 8)


def _predicated_args(rng, grid):
    n = grid * 64
    return dict(x=rng.integers(-1000, 1000, n).astype(np.int32),
                o32=np.full(n, -1, np.int32), o128=np.full(4 * n, -1, np.int32),
                o64=np.full(n, 7, np.uint64), gcnt=np.zeros(8, np.uint32),
                olds=np.full(n, 9, np.uint32), o32b=np.full(n, -2, np.int32),
                hist=np.zeros(grid * 8, np.uint32))


def _vscale_args(rng, grid):
    chunks = 3
    return dict(x=rng.standard_normal(grid * 128).astype(np.float32),
                out=np.full(grid * chunks * 32, -7.0, np.float32),
                out4=np.zeros(grid * 32 * 4, np.float32), n=grid * chunks * 32 - 13, s=1.5)


def _xlane_args(rng, grid):
    return dict(src=rng.integers(-1000, 1000, 32).astype(np.int32),
                out=np.zeros(XLANE_COLS * 32, np.int32), out64=np.zeros(3 * 32, np.uint64))


def _atomic_args(rng, grid):
    cnt = np.zeros(8 + grid, np.int32)
    cnt[1], cnt[2], cnt[4] = -5, 5, -1
    return dict(cnt=cnt, ucnt=np.array([0, 0xFFFFFFFF], np.uint32),
                fl=np.array([0.25], np.float32), c64=np.zeros(2, np.uint64),
                own=np.arange(grid * 32, dtype=np.int32), olds=np.zeros(grid * 32 * 4, np.int32),
                ldsout=np.zeros(grid * 32, np.int32))


HANDOFF_ROUNDS = 2


def _handoff_args(rng, grid):
    return dict(box=np.zeros(grid, np.uint64), trace=np.zeros(HANDOFF_ROUNDS * grid, np.uint32),
                err=np.zeros(1, np.uint32), who=np.zeros(grid, np.uint32),
                never=np.zeros(1, np.uint32), timeouts=np.zeros(grid, np.uint32),
                clockok=np.zeros(grid, np.uint32), tag0=5)


def _cast_values(rng):
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, -448.0, 449.0, 464.0, 465.0,
                        480.0, 1e9, -1e9, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10, -(2.0 ** -10),
                        2.0 ** -7, 1.0625, 1.1875, 0.5, 2.5e-3, 3e38, -3e38, 1.5, -2.5, 255.5,
                        256.0, 2.0 ** 31, -(2.0 ** 31) - 256, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8],
                       np.float32)
    rest = CAST_N - special.size
    mags = np.exp2(rng.uniform(-12, 10, rest)) * rng.choice([-1, 1], rest)
    return np.concatenate([special, mags.astype(np.float32)])


def _cast_args(rng, grid):
    n = CAST_N
    return dict(codes=np.arange(256, dtype=np.uint8), decoded=np.zeros(256, np.float32),
                x=_cast_values(rng), fp8=np.zeros(n, np.uint8), bf=np.zeros(n, np.uint16),
                bfback=np.zeros(n, np.float32), toint=np.zeros(n, np.int32),
                tou8=np.zeros(n, np.uint8), fp8v=np.zeros(n, np.uint8),
                fp8vback=np.zeros(n, np.float32))


def _lds_args(words):
    def make(rng, grid):
        return dict(out=np.zeros(grid * words, np.int32))
    return make


def _mma_args(atom):
    def make(rng, grid):
        def operand(op):
            rows, cols = atom.shape(op)
            mat = rng.standard_normal((rows, cols)) * 2
            vals = atom.to_lanes(op, mat)
            return numerics.convert(vals, "f64", atom.dtype(op))
        return dict(A=operand("a"), B=operand("b"),
                    C=rng.standard_normal((32, atom.c_slots)).astype(np.float32),
                    D=np.zeros((32, atom.c_slots), np.float32))
    return make


def _mma_reference(atom):
    def ref(args):
        a = numerics.to_f64(args["A"], atom.a_dtype)
        b = numerics.to_f64(args["B"], atom.b_dtype)
        c = args["C"].astype(np.float64)
        return dict(D=atom.execute(a, b, c).astype(np.float32))
    return ref


def _wgmma_args(atom):
    def make(rng, grid):
        A = numerics.convert(rng.standard_normal((atom.m, atom.k)) * 2, "f64", fp8e4m3fn)
        B = numerics.convert(rng.standard_normal((atom.k, atom.n)) * 2, "f64", fp8e4m3fn)
        img = atom.b_to_smem(B)  # padded to the K*N bytes the kernel copies
        img = np.concatenate([img, np.zeros(atom.k * atom.n - img.size, np.uint8)]).view(np.uint32)
        return dict(A=atom.to_lanes("a", A), Bimg=img, Bmat=B,
                    C=rng.standard_normal((128, atom.c_slots)).astype(np.float32),
                    D=np.zeros((128, atom.c_slots), np.float32))
    return make


def _wgmma_reference(atom):
    def ref(args):
        A = atom.from_lanes("a", numerics.to_f64(args["A"], fp8e4m3fn))
        B = numerics.to_f64(args["Bmat"], fp8e4m3fn)
        C = atom.from_lanes("c", args["C"].astype(np.float64))
        return dict(D=atom.to_lanes("c", A @ B + C).astype(np.float32))
    return ref


def _wgmma_bound(atom, rel=2.0 ** -11):
    """|D_gpu - D_exact| <= rel * (|A| @ |B| + |C|): Hopper's FP8 tensor cores add the
    products with about 14 significant bits (seen on the H200: 0.0063 off on |D| ~ 50, i.e.
    ~2**-13 of the magnitude sum); a wrong lane map or descriptor is off by O(|D|)."""
    def bound(args):
        A = np.abs(atom.from_lanes("a", numerics.to_f64(args["A"], fp8e4m3fn)))
        B = np.abs(numerics.to_f64(args["Bmat"], fp8e4m3fn))
        C = np.abs(atom.from_lanes("c", args["C"].astype(np.float64)))
        return dict(D=rel * atom.to_lanes("c", A @ B + C))
    return bound


BIG_WORDS = 16384  # 64 KiB of LDS: above the 48 KiB default, the launcher raises the limit
MMA_BF16 = nv_atoms.MMA_M16N8K16_BF16
MMA_E4M3 = nv_atoms.MMA_M16N8K32_E4M3
WGMMA16 = nv_atoms.wgmma_e4m3(16)
WGMMA256 = nv_atoms.wgmma_e4m3(256)
WGMMA_BF16_8 = nv_atoms.wgmma_bf16(8)

TURN_STEPS = 8  # turns each group of waves takes
TURN_GROUP = 2  # waves a group (the kernel has two groups)


def _turns(k, *, named=True, final_sync=True):
    """Two groups of TURN_GROUP waves take turns through named barriers 1 and 2 (the
    scoring's warpgroup ping-pong: stages/index_score.py): before its turn a group waits on
    its own barrier, after it it arrives on the other's; group 1 arrives once up front, group
    0 takes a last wait at the end (every completion has exactly 2 x TURN_GROUP arrivals).
    In a turn every wave counts itself in the CTA's counter and stores old // TURN_GROUP:
    with the turns kept, group g's turn s reads 2s + g."""
    a = k.args
    c = k.cta_id()
    g = k.wave_id() / TURN_GROUP
    both = 2 * TURN_GROUP
    if named:
        with k.if_(g.eq(1)):
            k.named_barrier(1, both, arrive=True)
    for s in k.range(TURN_STEPS):
        if named:
            k.named_barrier(g + 1, both)
        old = k.atomic("add", a.counter, c, k.const(1, i32), order="relaxed", scope="device")
        k.store(a.out, (c * k.W + k.wave_id()) * TURN_STEPS + s, old / TURN_GROUP,
                mask=k.lane_id().eq(0))
        if named:
            k.named_barrier(2 - g, both, arrive=True)
    if named and final_sync:
        with k.if_(g.eq(0)):
            k.named_barrier(1, both)


def _turns_args(rng, grid):
    return dict(counter=np.zeros(grid, np.int32),
                out=np.full(grid * 2 * TURN_GROUP * TURN_STEPS, -1, np.int32))


def _turns_reference(args):
    grid = args["counter"].size
    w = np.arange(2 * TURN_GROUP)[:, None] // TURN_GROUP
    one = 2 * np.arange(TURN_STEPS)[None, :] + w
    return dict(out=np.tile(one.reshape(-1), grid).astype(np.int32),
                counter=np.full(grid, 2 * TURN_GROUP * TURN_STEPS, np.int32))


ASYNC_SLOTS, ASYNC_DEPTH, ASYNC_STEPS = 3, 2, 7  # a ring of copies DEPTH steps ahead


def _async_ring(k):
    """A lane-private pipeline through LDS: each step's 16 + 4 bytes a lane copied with
    async_copy DEPTH steps before they are read, one commit a step, a counted wait (DEPTH - 1
    pending: exactly the step read) before the reads, a ring of SLOTS steps. Two waves."""
    T = k.W * k.L
    tid = k.wave_id() * k.L + k.lane_id()
    ring = k.lds("ring", u32, ASYNC_SLOTS * T * 5)
    four = ASYNC_SLOTS * T * 4  # the 4-byte words after the 16-byte chunks

    def issue(t):
        slot = t % ASYNC_SLOTS
        k.async_copy(ring, (slot * T + tid) * 4, k.args.src, (t * T + tid) * 4, u32, 4)
        k.async_copy(ring, four + slot * T + tid, k.args.src4, t * T + tid, u32, 1)
        k.async_commit()
    for t in range(ASYNC_DEPTH):
        issue(t)
    for t in range(ASYNC_STEPS):
        slot = t % ASYNC_SLOTS
        k.async_wait(min(ASYNC_DEPTH - 1, ASYNC_STEPS - 1 - t))
        k.store(k.args.out, (t * T + tid) * 4, k.load(ring, (slot * T + tid) * 4, u32, 4))
        k.store(k.args.out4, t * T + tid, k.load(ring, four + slot * T + tid, u32))
        if t + ASYNC_DEPTH < ASYNC_STEPS:
            issue(t + ASYNC_DEPTH)


def _async_args(rng, grid):
    n = ASYNC_STEPS * 64
    return dict(src=rng.integers(0, 2**32, 4 * n, dtype=np.uint32),
                src4=rng.integers(0, 2**32, n, dtype=np.uint32),
                out=np.zeros(4 * n, np.uint32), out4=np.zeros(n, np.uint32))


CASES = [
    Case("async_ring", _k("async_ring", _async_ring, ABI(src=Ptr(u32), src4=Ptr(u32),
                                                         out=Ptr(u32), out4=Ptr(u32)), waves=2),
         _async_args, 1, ("out", "out4"),
         expect=(r"cp\.async\.cg\.shared\.global \[%rd\d+(\+\d+)?\], \[%rd\d+(\+\d+)?\], 16",
                 r"cp\.async\.ca\.shared\.global \[%rd\d+(\+\d+)?\], \[%rd\d+(\+\d+)?\], 4",
                 r"cp\.async\.commit_group", r"cp\.async\.wait_group\s+1;\s+ld\.shared",
                 r"cp\.async\.wait_group\s+0"),
         reference=lambda a: dict(out=a["src"], out4=a["src4"])),
    Case("vscale", _k("vscale", _vscale, ABI(x=Ptr(f32), out=Ptr(f32), out4=Ptr(f32),
                                            n=Scalar(i32), s=Scalar(f32)), chunks=3),
         _vscale_args, 4, ("out", "out4"), floats={"out": (0, 0), "out4": (0, 0)},
         expect=(r"ld\.global(\.nc)?\.v4\.(f32|b32)", r"mul\.rn\.f32", r"@%p\d+ bra")),
    Case("xlane", _k("xlane", _xlane, ABI(src=Ptr(i32), out=Ptr(i32), out64=Ptr(u64))),
         _xlane_args, 1, ("out", "out64"),
         expect=(r"shfl\.sync\.bfly\.b32\s+%r\d+, %r\d+, 16, 31, -1", r"shfl\.sync\.idx\.b32",
                 r"vote\.sync\.ballot\.b32", r"%lanemask_lt", r"popc\.b32",
                 r"match\.any\.sync\.b32")),
    Case("atomics", _k("atomics", _atomics, ABI(
        cnt=Ptr(i32), ucnt=Ptr(u32), fl=Ptr(f32), c64=Ptr(u64), own=Ptr(i32), olds=Ptr(i32),
        ldsout=Ptr(i32))), _atomic_args, ATOMIC_GRID,
         ("cnt", "ucnt", "fl", "c64", "own", "olds", "ldsout"), floats={"fl": (0, 0)},
         expect=(r"atom\.relaxed\.gpu\.global\.add\.u32", r"atom\.acq_rel\.gpu\.global\.max\.s32",
                 r"atom\.release\.gpu\.global\.min\.s32", r"atom\.acquire\.gpu\.global\.or\.b32",
                 r"fence\.sc\.gpu; atom\.acq_rel\.gpu\.global\.and\.b32",
                 r"atom\.relaxed\.sys\.global\.add\.u32", r"atom\.acq_rel\.cta\.global\.add\.u32",
                 r"atom\.relaxed\.gpu\.global\.max\.u32", r"atom\.acq_rel\.gpu\.global\.add\.f32",
                 r"atom\.relaxed\.gpu\.global\.add\.u64", r"atom\.relaxed\.gpu\.global\.max\.u64",
                 r"atom\.acq_rel\.gpu\.global\.exch\.b32", r"atom(\.relaxed)?\.gpu\.global\.cas\.b32",
                 r"atom\.relaxed\.sys\.global\.cas\.b32", r"atom\.relaxed\.cta\.shared\.add\.u32",
                 r"bar\.sync\s+0")),
    Case("handoff", _k("handoff", _handoff, ABI(
        box=Ptr(u64), trace=Ptr(u32), err=Ptr(u32), who=Ptr(u32), never=Ptr(u32),
        timeouts=Ptr(u32), clockok=Ptr(u32), tag0=Scalar(u32)), rounds=HANDOFF_ROUNDS,
        bound=1 << 22), _handoff_args, None,
         ("box", "trace", "err", "who", "timeouts", "clockok"),
         expect=(r"ld\.relaxed\.gpu\.global\.b64", r"st\.relaxed\.gpu\.global\.b64",
                 r"vote\.sync\.all\.pred", r"nanosleep\.u32", r"%globaltimer", r"%nctaid\.x"),
         interp_kw=dict(on_stall="timeout")),
    Case("casts", _k("casts", _casts, ABI(
        codes=Ptr(u8), decoded=Ptr(f32), x=Ptr(f32), fp8=Ptr(u8), bf=Ptr(u16), bfback=Ptr(f32),
        toint=Ptr(i32), tou8=Ptr(u8), fp8v=Ptr(u8), fp8vback=Ptr(f32)), n=CAST_N),
         _cast_args, 1, ("decoded", "fp8", "bf", "bfback", "toint", "tou8", "fp8v", "fp8vback"),
         floats={"decoded": (0, 0), "bfback": (0, 0), "fp8vback": (0, 0)},
         decode={"fp8": fp8e4m3fn, "bf": bf16, "fp8v": fp8e4m3fn},
         expect=(r"cvt\.rn\.satfinite\.e4m3x2\.f32", r"cvt\.rn\.f16x2\.e4m3x2",
                 r"cvt\.f32\.f16", r"cvt\.rn\.bf16\.f32", r"cvt\.rzi\.s32\.f32")),
    Case("predicated", _k("predicated", _predicated, ABI(
        x=Ptr(i32), o32=Ptr(i32), o128=Ptr(i32), o64=Ptr(u64), gcnt=Ptr(u32), olds=Ptr(u32),
        o32b=Ptr(i32), hist=Ptr(u32)), waves=2), _predicated_args, 4,
         ("o32", "o128", "o64", "gcnt", "olds", "o32b", "hist"),
         expect=(r"@p st\.global\.b32", r"@p st\.global\.v4\.b32", r"@p st\.global\.b64",
                 r"@p atom\.relaxed\.cta\.shared\.add\.u32",
                 r"@p atom\.relaxed\.gpu\.global\.add\.u32", r"@%p\d+ bra")),
    Case("lds_barrier", _k("lds_barrier", _lds_barrier, ABI(out=Ptr(i32)), waves=4, words=1024),
         _lds_args(1024), 4, ("out",),
         expect=(rf"\.extern \.shared \.align {nvptx.LDS_ALIGN} \.b8 lds\[\]", r"bar\.sync\s+0",
                 r"st\.shared\.b32", r"ld\.shared\.b32", r"\.reqntid 128")),
    Case("lds_big", _k("lds_big", _lds_barrier, ABI(out=Ptr(i32)), waves=8, words=BIG_WORDS),
         _lds_args(BIG_WORDS), 2, ("out",), expect=(r"\.reqntid 256",)),
    Case("mma_bf16", _k("mma_bf16", _mma, ABI(A=Ptr(bf16), B=Ptr(bf16), C=Ptr(f32), D=Ptr(f32)),
                        atom=MMA_BF16),
         _mma_args(MMA_BF16), 1, ("D",), floats={"D": (1e-5, 1e-4)},
         expect=(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32",),
         reference=_mma_reference(MMA_BF16)),
    Case("mma_e4m3", _k("mma_e4m3", _mma, ABI(A=Ptr(u8), B=Ptr(u8), C=Ptr(f32), D=Ptr(f32)),
                        atom=MMA_E4M3),
         _mma_args(MMA_E4M3), 1, ("D",), floats={"D": (1e-5, 1e-4)},
         expect=(r"mma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.e4m3\.e4m3\.f32",),
         reference=_mma_reference(MMA_E4M3)),
    Case("wgmma16", _k("wgmma16", _wgmma, ABI(A=Ptr(u8), Bimg=Ptr(u32), C=Ptr(f32), D=Ptr(f32)),
                       waves=4, atom=WGMMA16),
         _wgmma_args(WGMMA16), 1, ("D",), floats={"D": (1e-5, 1e-4)},
         expect=(r"wgmma\.fence\.sync\.aligned", r"wgmma\.mma_async\.sync\.aligned\.m64n16k32"
                 r"\.f32\.e4m3\.e4m3", r"wgmma\.commit_group\.sync\.aligned",
                 r"wgmma\.wait_group\.sync\.aligned 0",
                 r"fence\.proxy\.async\.shared::cta;\s+// end inline asm\s+bar\.sync\s+0"),
         reference=_wgmma_reference(WGMMA16), bound=_wgmma_bound(WGMMA16)),
    Case("wgmma256", _k("wgmma256", _wgmma, ABI(A=Ptr(u8), Bimg=Ptr(u32), C=Ptr(f32),
                                                D=Ptr(f32)), waves=4, atom=WGMMA256),
         _wgmma_args(WGMMA256), 1, ("D",), floats={"D": (1e-5, 1e-4)},
         expect=(r"wgmma\.mma_async\.sync\.aligned\.m64n256k32\.f32\.e4m3\.e4m3",),
         reference=_wgmma_reference(WGMMA256), bound=_wgmma_bound(WGMMA256)),
    Case("relu_pack", _k("relu_pack", _relu_pack, ABI(x=Ptr(f32), out=Ptr(u32))),
         _relu_pack_args, 2, ("out",), expect=(r"cvt\.rn\.relu\.bf16x2\.f32",),
         reference=_relu_pack_reference, same={"out": _relu_pack_same}),
    Case("wgmma_relu", _k("wgmma_relu", _wgmma_relu_chain, ABI(A=Ptr(u8), Bimg=Ptr(u32),
                                                               D=Ptr(f32)),
                          waves=4, atom=WGMMA16, atom2=WGMMA_BF16_8),
         _wgmma_relu_chain_args(WGMMA16, WGMMA_BF16_8), 1, ("D",), floats={"D": (1e-5, 1e-4)},
         expect=(r"cvt\.rn\.relu\.bf16x2\.f32",
                 r"wgmma\.mma_async\.sync\.aligned\.m64n8k16\.f32\.bf16\.bf16 .*, 1, 1, 0;"),
         reference=_wgmma_relu_chain_reference(WGMMA16, WGMMA_BF16_8),
         bound=_wgmma_relu_chain_bound(WGMMA16, WGMMA_BF16_8)),
    Case("turns", _k("turns", _turns, ABI(counter=Ptr(i32), out=Ptr(i32)), waves=2 * TURN_GROUP),
         _turns_args, 4, ("out", "counter"), interp_kw=dict(mode="random", seed=3),
         expect=(r"barrier\.sync\.aligned\s+%r\d+, 128|bar\.sync\s+%r\d+, 128",
                 r"barrier\.arrive\.aligned\s+(1|%r\d+), 128|bar\.arrive\s+(1|%r\d+), 128"),
         reference=_turns_reference),
]
CASE = {c.name: c for c in CASES}


def interp_args(case: Case, args: dict) -> dict:
    """The arguments the kernel takes (test-only extras such as Bmat dropped)."""
    names = set(case.build().abi.names())
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()
            if k in names}


# ----------------------------------------------------------------------------- tests

_PTX: dict = {}


def ptx_of(name: str) -> str:
    if name not in _PTX:
        _PTX[name] = nvptx.build_ptx(CASE[name].build())
    return _PTX[name]


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_ptx_targets_sm90a_and_has_expected_instructions(name):
    ptx = ptx_of(name)
    assert re.search(r"^\.target sm_90a$", ptx, re.M), ptx[:400]
    assert f".version {nvptx.PTX_VERSION // 10}.{nvptx.PTX_VERSION % 10}" in ptx
    assert re.search(rf"\.visible \.entry {name}\(", ptx)
    assert ".minnctapersm 1" in ptx and ".maxntid" not in ptx  # ptxas: not with .reqntid
    missing = [e for e in CASE[name].expect if not re.search(e, ptx)]
    assert not missing, f"{name}: PTX lacks {missing}"
    assert ".local" not in ptx, f"{name}: something spilled to local memory"


def test_llvm_header_and_kernel_definition():
    ir = nvptx.emit_llvm(CASE["lds_barrier"].build())
    assert 'target triple = "nvptx64-nvidia-cuda"' in ir
    assert f'target datalayout = "{nvptx.DATALAYOUT}"' in ir
    assert re.search(r"define ptx_kernel void @lds_barrier\(ptr addrspace\(1\) noundef %out\)", ir)
    assert '"nvvm.reqntid"="128"' in ir and "maxntid" not in ir
    # 1024: the 128B swizzle's pattern is the LDS address's (atoms.base.swizzled)
    assert nvptx.LDS_ALIGN == 1024
    assert f"@lds = external addrspace(3) global [0 x i8], align {nvptx.LDS_ALIGN}" in ir
    assert "addrspace(5)" not in ir


def test_ctas_per_sm_is_the_min_ctas_attribute():
    """Kernel.ctas_per_sm (build_kernel's keyword) -> "nvvm.minctasm" (ptxas then bounds the
    registers so that many CTAs fit an SM); default 1; a bad value is an error naming it."""
    from monokernel.dsl import DSLError, build_kernel
    from monokernel.ir import ABI, Ptr
    from monokernel.types import f32

    def body(k):
        k.store(k.args.out, k.lane_id(), k.const(1.0, f32))
    abi = ABI(out=Ptr(f32))
    for n in (1, 2):
        ir = nvptx.emit_llvm(build_kernel("cps", body, abi=abi, target="sm_90a", waves=4,
                                          wave_size=32, ctas_per_sm=n))
        assert f'"nvvm.minctasm"="{n}"' in ir
    with pytest.raises(DSLError, match="ctas_per_sm 0"):
        build_kernel("cps", body, abi=abi, target="sm_90a", ctas_per_sm=0)


def test_datalayout_is_llvms():
    llvm = pytest.importorskip("llvmlite.binding")
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple(nvptx.TRIPLE).create_target_machine(cpu=SM)
    assert str(tm.target_data) == nvptx.DATALAYOUT


def test_only_barriers_marked_async_proxy_get_the_proxy_fence():
    """A wgmma kernel's barriers: the one after B is staged (async_proxy_lds) has the
    proxy fence before it; a plain barrier of the same kernel does not (its fence would
    wait for every access in flight); masked stores outside predicated_masks branch."""
    def body(k):
        img = k.lds("b", u32, 64)
        k.store(img, k.thread_id(), k.const(1, u32), mask=k.thread_id() < 64)
        k.barrier()  # plain
        with k.async_proxy_lds():
            k.barrier()
        k.store(k.args.out, k.thread_id(), k.load(img, k.thread_id() & 63, u32))
    kern = build_kernel("proxy", body, abi=ABI(out=Ptr(u32)), target=SM, waves=4)
    ptx = nvptx.build_ptx(kern, SM)
    assert len(re.findall(r"bar\.sync\s+0", ptx)) == 2
    assert len(re.findall(r"fence\.proxy\.async\.shared::cta", ptx)) == 1
    assert "@p st" not in ptx and re.search(r"@%p\d+ bra", ptx)


def test_predicated_masks_fall_back_to_branches_when_switched_off(monkeypatch):
    """nvptx.PREDICATED_MASKED_OPS = False (the A/B switch): the `predicated` case's masked
    stores and atomics become branches again, with no `@p` inline PTX left."""
    on = nvptx.build_ptx(CASE["predicated"].build(), SM)
    assert "@p st.global" in on
    monkeypatch.setattr(nvptx, "PREDICATED_MASKED_OPS", False)
    off = nvptx.build_ptx(CASE["predicated"].build(), SM)
    assert "@p st" not in off and "@p atom" not in off
    assert len(re.findall(r"@%p\d+ bra", off)) > len(re.findall(r"@%p\d+ bra", on))


def test_barrier_is_bar_sync_alone_unless_fences_are_asked(monkeypatch):
    """bar.sync 0 is the IR barrier's fence and rendezvous (CUDA's __syncthreads); the
    explicit CTA fences around it (measured slower) come back only with BARRIER_FENCES."""
    ptx = nvptx.build_ptx(CASE["lds_barrier"].build(), SM)
    assert re.search(r"bar\.sync\s+0", ptx) and "fence.acq_rel.cta" not in ptx
    monkeypatch.setattr(nvptx, "BARRIER_FENCES", True)
    ptx = nvptx.build_ptx(CASE["lds_barrier"].build(), SM)
    assert re.search(r"fence\.acq_rel\.cta;\s+bar\.sync\s+0;\s+fence\.acq_rel\.cta", ptx)


def test_poll_bound_and_scopes_in_ir():
    ir = nvptx.emit_llvm(CASE["handoff"].build())
    assert re.search(r'load atomic i64, ptr addrspace\(1\) %\S+ syncscope\("device"\) monotonic', ir)
    assert re.search(r'store atomic i64 %\S+, ptr addrspace\(1\) %\S+ syncscope\("device"\) monotonic', ir)
    assert "icmp uge i32" in ir and str(1 << 22) in ir  # the poll bound
    assert "@llvm.nvvm.nanosleep" in ir


@pytest.mark.parametrize("scope, sync", [("wave", "block"), ("cta", "block"), ("device", "device"),
                                         ("system", "")])
def test_scoped_atomic_loads_stores_and_fences(scope, sync):
    def body(k):
        a = k.args
        x = k.load(a.p, k.lane_id(), u32, order="acquire", scope=scope)
        k.fence("release", scope)
        k.store(a.p, k.lane_id() + 32, x, order="release", scope=scope)
        c = k.atomic("cas", a.p, k.lane_id() + 64, x, compare=0, order="acq_rel", scope=scope)
        k.store(a.p, k.lane_id() + 96, c)
    kern = build_kernel(f"scoped_{scope}", body, abi=ABI(p=Ptr(u32)), target=SM)
    ir = nvptx.emit_llvm(kern)
    s = f' syncscope("{sync}")' if sync else ""
    assert "load atomic i32, ptr addrspace(1) %gep" in ir and f"{s} acquire" in ir
    ptx = nvptx.build_ptx(kern)
    ptx_scope = {"block": "cta", "device": "gpu", "": "sys"}[sync]
    assert re.search(rf"ld\.acquire\.{ptx_scope}\.global\.b32", ptx), ptx
    assert re.search(rf"st\.release\.{ptx_scope}\.global\.b32", ptx), ptx
    assert re.search(rf"atom\.acq_rel\.{ptx_scope}\.global\.cas\.b32", ptx), ptx
    assert re.search(rf"fence\.acq_rel\.{ptx_scope}", ptx), ptx


def test_fp8_cast_pairs_two_values_per_cvt():
    ptx = ptx_of("casts")
    # the f32x4 -> fp8x4 cast is two paired conversions, not four
    ir = nvptx.emit_llvm(CASE["casts"].build())
    assert ir.count("@llvm.nvvm.ff.to.e4m3x2.rn(") >= 3  # scalar + 2 for the vector (+decl)
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") >= 3


def test_wgmma_descriptor_gets_the_shared_window_base():
    ir = nvptx.emit_llvm(CASE["wgmma16"].build())
    assert "ptrtoint ptr addrspace(3) @lds to i64" in ir
    assert re.search(r"and i64 %\S+, 16383", ir)


# ----------------------------------------------------------------------------- rejections

def _no_llvm(monkeypatch):
    """Make any LLVM compile fail loudly: the checks must come first."""
    from monokernel.backend import toolchain

    def boom(*a, **k):
        raise AssertionError("LLVM ran before the backend rejected the kernel")
    monkeypatch.setattr(toolchain, "compile_ptx", boom)


def test_amd_only_atom_is_rejected_before_llvm(monkeypatch):
    _no_llvm(monkeypatch)
    atom = amd_atoms.GFX950_FP8_16x16x32

    def body(k):
        a = k.args
        av = k.load(a.A, k.lane_id() * atom.a_slots, atom.a_dtype, atom.a_slots)
        bv = k.load(a.A, k.lane_id() * atom.b_slots, atom.b_dtype, atom.b_slots)
        cv = k.load(a.C, k.lane_id() * 4, f32, 4)
        k.store(a.C, k.lane_id() * 4, k.mma(atom, av, bv, cv))
    kern = build_kernel("amd_mma", body, abi=ABI(A=Ptr(u8), C=Ptr(f32)), target="interp")
    kern = dataclasses.replace(kern, wave_size=32)  # as if built for 32 lanes
    with pytest.raises(BackendError, match="does not exist on sm_90a"):
        nvptx.build_ptx(kern)


def test_wave64_kernel_is_rejected():
    kern = build_kernel("w64", lambda k: k.store(k.args.p, k.lane_id(), k.lane_id()),
                        abi=ABI(p=Ptr(i32)), target="gfx950")
    with pytest.raises(BackendError, match="32-lane warps"):
        nvptx.emit_llvm(kern)


@pytest.mark.parametrize("direction", ["encode", "decode"])
def test_e4m3fnuz_cast_is_rejected_before_llvm(monkeypatch, direction):
    _no_llvm(monkeypatch)

    def body(k):
        a = k.args
        if direction == "encode":
            x = k.load(a.x, k.lane_id(), f32)
            k.store(a.y, k.lane_id(), k.cast(x, fp8e4m3fnuz))
        else:
            b = k.load(a.y, k.lane_id(), fp8e4m3fnuz)
            k.store(a.x, k.lane_id(), k.cast(b, f32))
    kern = build_kernel("fnuz", body, abi=ABI(x=Ptr(f32), y=Ptr(u8)), target="interp",
                        wave_size=32)
    with pytest.raises(BackendError, match="e4m3fnuz"):
        nvptx.build_ptx(kern)
    with pytest.raises(BackendError, match="e4m3fnuz"):
        nvptx.NVPTXHooks().fp8_to_f32(None, "%x", fp8e4m3fnuz, 1)


def test_cta_beyond_the_chip_is_rejected_by_its_figure(monkeypatch):
    _no_llvm(monkeypatch)
    kern = CASE["xlane"].build()
    waves = SM90A.max_threads_per_cta // kern.wave_size + 1
    with pytest.raises(BackendError, match=f"{waves * kern.wave_size} threads; .* at most "
                                           f"{SM90A.max_threads_per_cta}"):
        nvptx.build_ptx(dataclasses.replace(kern, waves=waves))
    too_much = [LDSAlloc("big", u8, SM90A.lds_bytes + 1, 0)]
    with pytest.raises(BackendError, match=f"{SM90A.lds_bytes + 1} bytes of LDS; .* at most "
                                           f"{SM90A.lds_bytes // 1024} KiB"):
        nvptx.build_ptx(dataclasses.replace(kern, lds=too_much))


def test_unknown_sm_is_rejected():
    with pytest.raises(BackendError, match="unknown NVIDIA SM"):
        nvptx.emit_llvm(CASE["xlane"].build(), "sm_80")


# ----------------------------------------------------------------------------- interpreter

@pytest.mark.parametrize("name", ["vscale", "xlane", "atomics", "casts", "lds_barrier",
                                  "mma_bf16", "mma_e4m3", "wgmma16", "wgmma256", "turns",
                                  "relu_pack", "wgmma_relu"])
def test_cases_run_in_the_interpreter(name):
    """The shared cases are valid programs (the GPU test compares against these runs)."""
    case = CASE[name]
    rng = np.random.default_rng(7)
    grid = case.grid or 8
    args = case.args(rng, grid)
    iargs = interp_args(case, args)
    interp.run(case.build(), iargs, grid=grid, **case.interp_kw)
    if case.reference is not None:
        for k, want in case.reference(args).items():
            if k in case.same:
                case.same[k](iargs[k], want)
            else:
                np.testing.assert_allclose(iargs[k], want, rtol=1e-6, atol=1e-6)


def test_match_any_groups_lanes_by_value():
    """The interpreter's match_any against a lane-by-lane count (the GPU test then holds
    the H200 to the interpreter): each lane's group size, and the leader is the lowest lane
    of its group, so exactly one leader a distinct value."""
    case = CASE["xlane"]
    args = interp_args(case, case.args(np.random.default_rng(3), 1))
    interp.run(case.build(), args, grid=1, **case.interp_kw)
    v = args["src"] & 7
    out = args["out"].reshape(XLANE_COLS, 32)
    size, lead = out[MATCH_COLS[0]], out[MATCH_COLS[1]]
    for lane in range(32):
        alike = [o for o in range(32) if v[o] == v[lane]]
        assert size[lane] == len(alike) and lead[lane] == int(alike[0] == lane), lane
    assert lead.sum() == len(set(v.tolist())) and size.sum() == sum(
        (v == x).sum() ** 2 for x in set(v.tolist()))


def test_handoff_runs_in_the_interpreter_at_full_grid():
    case = CASE["handoff"]
    rng = np.random.default_rng(7)
    args = interp_args(case, case.args(rng, 132))
    interp.run(case.build(), args, grid=132, **case.interp_kw)
    assert args["err"][0] == 0 and args["timeouts"].tolist() == [1] * 132
    assert (args["box"] >> np.uint64(32)).tolist() == [5 + HANDOFF_ROUNDS - 1] * 132


def test_async_copy_read_before_its_wait_is_an_error():
    """The interpreter's contract for async_copy: the bytes may be read only after the
    copying wave's async_wait retired their group (one group too many left pending: an
    error naming the copy), and another copy over unretired bytes is one too."""
    def early(k):  # waits leaving the just-committed group in flight, then reads it
        buf = k.lds("b", u32, 32)
        k.async_copy(buf, k.lane_id(), k.args.src, k.lane_id(), u32)
        k.async_commit()
        k.async_wait(1)
        k.store(k.args.out, k.lane_id(), k.load(buf, k.lane_id(), u32))

    def twice(k):  # a second copy into the bytes of one not yet retired
        buf = k.lds("b", u32, 32)
        k.async_copy(buf, k.lane_id(), k.args.src, k.lane_id(), u32)
        k.async_commit()
        k.async_copy(buf, k.lane_id(), k.args.src, k.lane_id(), u32)
    for body in (early, twice):
        kern = build_kernel("async_bad", body, abi=ABI(src=Ptr(u32), out=Ptr(u32)), target=SM)
        args = dict(src=np.arange(32, dtype=np.uint32), out=np.zeros(32, np.uint32))
        with pytest.raises(interp.InterpError, match="async_copy .* before that wave's "
                           "async_wait retired the group"):
            interp.run(kern, args, grid=1)


def test_async_copy_sizes_and_waits_are_checked():
    """A copy moves 4, 8 or 16 bytes a lane, from global memory into LDS; a wait leaves 0 .. 7
    groups pending: anything else is an error naming it."""
    from monokernel.dsl import DSLError

    def body(size=None, pending=None, src_lds=False):
        def f(k):
            buf = k.lds("b", u32, 64)
            if size is not None:
                k.async_copy(buf, 0, k.args.src, 0, u8, size)
            if src_lds:
                k.async_copy(buf, 0, buf, 4, u32, 1)
            if pending is not None:
                k.async_wait(pending)
        return f
    for kw, msg in ((dict(size=12), "12 bytes a lane"), (dict(pending=8), "pending 8"),
                    (dict(src_lds=True), "must be global memory")):
        with pytest.raises(DSLError, match=msg):
            build_kernel("async_bad", body(**kw), abi=ABI(src=Ptr(u32)), target=SM)


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_async_copy_is_refused_on_amd_by_name(chip):
    from monokernel.backend import amdgcn

    def body(k):
        buf = k.lds("b", u32, 32)
        k.async_copy(buf, k.lane_id(), k.args.src, k.lane_id(), u32)
        k.async_commit()
        k.async_wait(0)
    kern = build_kernel("async_amd", body, abi=ABI(src=Ptr(u32)), target=chip)
    with pytest.raises(BackendError, match="async_copy: lane-private async copies"):
        amdgcn.emit_llvm(kern, chip)


@pytest.mark.parametrize("chip", ["gfx950", "gfx942"])
def test_match_any_is_refused_on_amd_by_name(chip):
    """AMD has no match instruction: a kernel using match_any fails to lower with an error
    naming it (the selection's aggregated counts are an NVIDIA option)."""
    from monokernel.backend import amdgcn

    def body(k):
        n, lead = k.match_any(k.lane_id() & 3)
        k.store(k.args.out, k.lane_id(), n, mask=lead)
    kern = build_kernel("match_amd", body, abi=ABI(out=Ptr(i32)), target=chip)
    with pytest.raises(BackendError, match="match_any is lowered for sm_90a only"):
        amdgcn.emit_llvm(kern, chip)
