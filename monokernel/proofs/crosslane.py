"""Cross-lane ops against definitions written independently of the interpreter.

Per lane an i32 and an f32 come in; out comes every lane swap mask, a shuffle, the wave
reductions, ballot, prefix count and readfirstlane, each in its own row of `ints`/`floats`.
"""
from __future__ import annotations

import numpy as np

from ..dsl import build_kernel
from ..ir import ABI, Ptr
from ..types import f32, i32, u32

ABI_ = ABI(xi=Ptr(i32), xf=Ptr(f32), ints=Ptr(i32), floats=Ptr(f32))


def swap_masks(L):
    return [1 << b for b in range(L.bit_length() - 1)]


def rows(L):
    """Output row names in order (ints, floats)."""
    ints = [f"swap{m}" for m in swap_masks(L)] + ["shuffle", "sum", "max", "min", "ballot_lo",
                                                  "ballot_hi", "prefix", "first"]
    floats = [f"fswap{m}" for m in swap_masks(L)] + ["fsum", "fmax", "fshuffle"]
    return ints, floats


def body(k):
    a = k.args
    L = k.L
    lane = k.lane_id()
    xi = k.load(a.xi, lane, i32)
    xf = k.load(a.xf, lane, f32)
    ints, floats = [], []
    for m in swap_masks(L):
        ints.append(k.lane_swap(xi, m))
    src = (lane * 7 + 3) % L
    ints.append(k.shuffle(xi, src))
    ints.append(k.wave_reduce(xi, "add"))
    ints.append(k.wave_reduce(xi, "max"))
    ints.append(k.wave_reduce(xi, "min"))
    b = k.ballot((xi % 3).eq(0))
    if L == 64:
        ints.append(k.bitcast(k.cast(b & 0xFFFFFFFF, u32), i32))
        ints.append(k.bitcast(k.cast(b >> 32, u32), i32))
    else:
        ints.append(k.bitcast(b, i32))
        ints.append(k.const(0, i32))
    ints.append(k.prefix_count((xi % 3).eq(0)))
    ints.append(k.readfirstlane(xi + lane))
    for m in swap_masks(L):
        floats.append(k.lane_swap(xf, m))
    floats.append(k.wave_sum(xf))
    floats.append(k.wave_max(xf))
    floats.append(k.shuffle(xf, src))
    for r, v in enumerate(ints):
        k.store(a.ints, lane + r * L, v)
    for r, v in enumerate(floats):
        k.store(a.floats, lane + r * L, v)


def build(target, **_):
    return build_kernel("crosslane", body, abi=ABI_, target=target, waves=1)


def make_inputs(rng, *, L, **_):
    ni, nf = (len(x) for x in rows(L))
    return dict(xi=rng.integers(-1000, 1000, L).astype(np.int32),
                xf=rng.standard_normal(L).astype(np.float32),
                ints=np.full(ni * L, -0x21524111, np.int32),  # poison: 0xDEADBEEF
                floats=np.full(nf * L, np.nan, np.float32))


def reference(inp, *, L, **_):
    xi, xf = inp["xi"].astype(np.int64), inp["xf"].astype(np.float64)
    lane = np.arange(L)
    ints, floats = [], []
    for m in swap_masks(L):
        ints.append(xi[lane ^ m])
    src = (lane * 7 + 3) % L
    ints.append(xi[src])
    ints += [np.full(L, xi.sum()), np.full(L, xi.max()), np.full(L, xi.min())]
    pred = (np.fmod(xi, 3) == 0)
    bits = sum(1 << i for i in range(L) if pred[i])
    ints.append(np.full(L, np.int64(bits & 0xFFFFFFFF).astype(np.uint32).view(np.int32)))
    ints.append(np.full(L, np.int64(bits >> 32).astype(np.uint32).view(np.int32)))
    ints.append(np.cumsum(pred) - pred)
    ints.append(np.full(L, xi[0] + 0))
    for m in swap_masks(L):
        floats.append(xf[lane ^ m])
    floats += [np.full(L, xf.sum()), np.full(L, xf.max()), xf[src]]
    return dict(ints=np.concatenate(ints), floats=np.concatenate(floats))


# the float sum is a 6-step butterfly in f32: each step rounds once
SUM_REL_TOL = 1e-6


def check(inp, ref, *, L, **_):
    """Exact for integers and moved floats; the float sum within SUM_REL_TOL."""
    ints_ok = np.array_equal(inp["ints"].astype(np.int64), ref["ints"].astype(np.int64))
    nf = len(rows(L)[1])
    got = inp["floats"].astype(np.float64).reshape(nf, L)
    exp = ref["floats"].reshape(nf, L)
    sum_row = len(swap_masks(L))
    exact = np.delete(np.arange(nf), sum_row)
    floats_ok = np.array_equal(got[exact], exp[exact])
    sum_err = float(np.abs(got[sum_row] - exp[sum_row]).max() / max(np.abs(exp[sum_row]).max(), 1e-30))
    return ints_ok, floats_ok, sum_err
