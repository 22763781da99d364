"""RMSNorm over R rows: out = bf16(x / sqrt(mean(x^2) + eps) * w), one CTA per row.

Each lane reads 16-byte vectors (8 bf16, the widest per-lane access), squares are summed in
f32 per lane, then by a wave butterfly, then across waves through LDS in wave order, so the
sum's order (and its bits) is the same on every backend and in every run.
"""
from __future__ import annotations

import numpy as np

from .. import numerics
from ..dsl import build_kernel
from ..ir import ABI, Ptr, Scalar
from ..types import bf16, f32

VEC = 8  # bf16 elements in one 16-byte access
ABI_ = ABI(x=Ptr(bf16), w=Ptr(bf16), out=Ptr(bf16), eps=Scalar(f32))


def body(k, *, D):
    a = k.args
    step = k.W * k.L * VEC
    if D % step:
        raise ValueError(f"rmsnorm: D={D} must be a multiple of waves*lanes*{VEC} = {step}")
    row = k.cta_id()
    base = row * D
    partial = k.lds("partial", f32, k.W)
    ss = k.lane_var(0.0, f32)
    for it in k.range(D // step):
        col = (it * (k.W * k.L) + k.thread_id()) * VEC
        v = k.cast(k.load(a.x, base + col, bf16, VEC), f32)
        acc = ss.get()
        for j in range(VEC):
            acc = k.fma(v[j], v[j], acc)
        ss.set(acc)
    k.store(partial, k.wave_id(), k.wave_sum(ss.get()))
    k.barrier()
    total = k.load(partial, 0, f32)
    for w in range(1, k.W):
        total = total + k.load(partial, w, f32)
    scale = k.rsqrt(total * (1.0 / D) + a.eps)
    for it in k.range(D // step):
        col = (it * (k.W * k.L) + k.thread_id()) * VEC
        v = k.cast(k.load(a.x, base + col, bf16, VEC), f32)
        g = k.cast(k.load(a.w, col, bf16, VEC), f32)
        k.store(a.out, base + col, k.cast(v * scale * g, bf16))


def build(target, *, D, waves=4):
    return build_kernel("rmsnorm", body, abi=ABI_, target=target, waves=waves, D=D)


def make_inputs(rng, *, R, D, **_):
    x = rng.standard_normal((R, D)) * 3.0
    w = 1.0 + 0.1 * rng.standard_normal(D)
    return dict(x=numerics.convert(x, "f64", "bf16"), w=numerics.convert(w, "f64", "bf16"),
                out=np.full((R, D), 0x7FC1, np.uint16), eps=1e-5)  # NaN poison


def reference(inp, **_):
    x = numerics.to_f64(inp["x"], bf16)
    w = numerics.to_f64(inp["w"], bf16)
    y = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + inp["eps"]) * w
    return dict(out=y)


# bf16 keeps 8 significant bits: after one rounding the result is within 2^-8 relative, and
# the f32 arithmetic before it adds far less than that.
REL_TOL = 2.0 ** -8 + 1e-5


def check(inp, ref, **_):
    got = numerics.to_f64(inp["out"], bf16)
    err = np.abs(got - ref["out"]) / np.maximum(np.abs(ref["out"]), 1e-6)
    return float(err.max())
