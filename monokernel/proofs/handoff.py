"""CTAs hand data to each other: (value, tag) pairs and a bulk buffer behind a counter.

CTA c publishes `pairs` 32-bit values as tagged pairs (value low, tag high, ONE relaxed 64-bit
store each), and `bulk` f32 values with plain stores, then a release fence and the counter
(the tag, relaxed). CTA c reads CTA c-1's: it polls each pair until its tag is this launch's
(no fence needed: the data is in the polled word), polls the counter, acquires, then reads the
bulk with plain loads. `release=False` / `acquire=False` build the broken variants the
relaxed-visibility mode must catch.
"""
from __future__ import annotations

import numpy as np

from ..dsl import build_kernel
from ..ir import ABI, Ptr, Scalar
from ..types import f32, i32, u32, u64

ABI_ = ABI(mbox=Ptr(u64), bulk=Ptr(f32), counters=Ptr(u64), out_pairs=Ptr(u32),
           out_bulk=Ptr(f32), err=Ptr(u32), tag=Scalar(u32), ctas=Scalar(i32))
POLL_BOUND = 1 << 22  # polls before a consumer gives up and flags its error word


def pair_value(c, j, tag):
    return (c * 1000 + j) * 3 + tag


def bulk_value(c, j, tag):
    return np.float32((c * 1000 + j) * 0.5 + tag)


def body(k, *, pairs, bulk, release=True, acquire=True):
    a = k.args
    c = k.cta_id()
    prev = (c + a.ctas - 1) % a.ctas
    lane = k.lane_id()
    tag64 = k.cast(a.tag, u64)
    # produce: pairs, then bulk + release + counter
    for j0 in k.range(0, pairs, k.L):
        j = j0 + lane
        val = k.cast((c * 1000 + j) * 3, u32) + a.tag
        pair = k.cast(val, u64) | (tag64 << 32)
        k.store(a.mbox, c * pairs + j, pair, order="relaxed", scope="device", mask=j < pairs)
    for j0 in k.range(0, bulk, k.L):
        j = j0 + lane
        v = k.cast(c * 1000 + j, f32) * 0.5 + k.cast(a.tag, f32)
        k.store(a.bulk, c * bulk + j, v, mask=j < bulk)
    if release:
        k.fence("release", "device")
    k.store(a.counters, c, tag64, order="relaxed", scope="device")
    # consume CTA c-1's
    failed = k.uniform_var(0, u32)
    for j0 in k.range(0, pairs, k.L):
        j = j0 + lane
        got, timed_out = k.poll(a.mbox, prev * pairs + j, a.tag, shift=32, bits=32,
                                bound=POLL_BOUND, mask=j < pairs)
        k.store(a.out_pairs, c * pairs + j, k.cast(got & 0xFFFFFFFF, u32), mask=j < pairs)
        failed.set(failed.get() | k.cast(timed_out, u32))
    _, timed_out = k.poll(a.counters, prev, a.tag, bits=32, bound=POLL_BOUND)
    failed.set(failed.get() | k.cast(timed_out, u32))
    if acquire:
        k.fence("acquire", "device")
    for j0 in k.range(0, bulk, k.L):
        j = j0 + lane
        v = k.load(a.bulk, prev * bulk + j, f32, mask=j < bulk)
        k.store(a.out_bulk, c * bulk + j, v, mask=j < bulk)
    k.store(a.err, c, failed.get())


def build(target, *, pairs, bulk, release=True, acquire=True):
    name = "handoff" + ("" if release else "_norelease") + ("" if acquire else "_noacquire")
    return build_kernel(name, body, abi=ABI_, target=target, waves=1, pairs=pairs, bulk=bulk,
                        release=release, acquire=acquire)


def make_inputs(rng, *, ctas, pairs, bulk, tag=1, **_):
    return dict(mbox=np.zeros(ctas * pairs, np.uint64), bulk=np.full(ctas * bulk, np.nan, np.float32),
                counters=np.zeros(ctas, np.uint64), out_pairs=np.full(ctas * pairs, 0xDEADBEEF, np.uint32),
                out_bulk=np.full(ctas * bulk, np.nan, np.float32), err=np.full(ctas, 7, np.uint32),
                tag=tag, ctas=ctas)


def reference(inp, *, ctas, pairs, bulk, **_):
    tag = inp["tag"]
    c = np.arange(ctas)
    prev = (c + ctas - 1) % ctas
    j = np.arange(pairs)
    exp_pairs = (((prev[:, None] * 1000 + j) * 3) + tag).astype(np.uint32).reshape(-1)
    jb = np.arange(bulk)
    exp_bulk = ((prev[:, None] * 1000 + jb) * np.float32(0.5) + np.float32(tag)).astype(np.float32).reshape(-1)
    return dict(out_pairs=exp_pairs, out_bulk=exp_bulk, err=np.zeros(ctas, np.uint32))


def check(inp, ref, **_):
    """Every check is exact: hand-offs move bits."""
    return {name: bool(np.array_equal(inp[name], ref[name])) for name in ("out_pairs", "out_bulk", "err")}
