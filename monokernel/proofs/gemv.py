"""FP8 GEMV, the front projection's shape: y[r, n] = sum_k dequant(W)[n, k] * x[r, k].

W is e4m3 with one fp32 scale per 128x128 block (the model's weight format; on gfx942 the
bytes are fnuz and the scales doubled, numerics.fnuz_from_fn_bits), x is bf16, accumulation is
fp32. Each wave owns whole output rows n (strided over the grid's waves); its lanes split K in
16-byte weight vectors (16 fp8 = one load), so every weight byte is read once, nontemporally.
Per-lane partial sums are reduced by the wave butterfly: one fixed order, so the same bits on
every run.
"""
from __future__ import annotations

import numpy as np

from .. import numerics
from ..dsl import build_kernel
from ..ir import ABI, Ptr, Scalar
from ..targets import target as get_target
from ..types import bf16, dtype, f32, i32

W_VEC = 16  # fp8 weights per 16-byte load
X_VEC = 8  # bf16 activations per 16-byte load
BLOCK = 128  # weight scale block (128 x 128)


def abi(fp8):
    return ABI(w=Ptr(fp8), ws=Ptr(f32), x=Ptr(bf16), y=Ptr(f32), ctas=Scalar(i32))


def body(k, *, N, K, R, fp8):
    a = k.args
    per_iter = k.L * W_VEC
    if K % per_iter or K % BLOCK:
        raise ValueError(f"gemv: K={K} must be a multiple of {per_iter} and of {BLOCK}")
    lane = k.lane_id()
    gw = k.cta_id() * k.W + k.wave_id()
    for n in k.range(gw, N, a.ctas * k.W):
        accs = [k.lane_var(0.0, f32) for _ in range(R)]
        for it in k.range(K // per_iter):
            col = (it * k.L + lane) * W_VEC
            w = k.cast(k.load(a.w, n * K + col, fp8, W_VEC, nontemporal=True), f32)
            scale = k.load(a.ws, (n // BLOCK) * (K // BLOCK) + col // BLOCK, f32)
            for r in range(R):
                dot = None
                for half in range(W_VEC // X_VEC):
                    xv = k.cast(k.load(a.x, r * K + col + half * X_VEC, bf16, X_VEC), f32)
                    for j in range(X_VEC):
                        wj = w[half * X_VEC + j]
                        dot = wj * xv[j] if dot is None else k.fma(wj, xv[j], dot)
                accs[r].set(k.fma(dot, scale, accs[r].get()))
        for r in range(R):
            k.store(a.y, r * N + n, k.wave_sum(accs[r].get()))


def build(target, *, N, K, R, waves=4):
    fp8 = dtype(get_target(target).fp8)
    return build_kernel("gemv_fp8", body, abi=abi(fp8), target=target, waves=waves, N=N, K=K,
                        R=R, fp8=fp8)


def make_inputs(rng, *, N, K, R, fp8="fp8e4m3fn", ctas=1, **_):
    """Weights as a real checkpoint has them: e4m3 values spread over the format's range, with
    per-block scales of about 1e-2; activations of unit scale."""
    w = rng.standard_normal((N, K)) * 100.0
    wq = numerics.convert(w, "f64", "fp8e4m3fn")
    # ceil(N / 128) scale rows: q_a | kv_a = 2048 + 576 ends in a half block, whose scale row
    # is kv_a's last (2048 is a whole number of blocks, so n // 128 indexes the fused grid)
    scales = (2.0 ** rng.integers(-9, -5, (-(-N // BLOCK), K // BLOCK))).astype(np.float32)
    if dtype(fp8).name == "fp8e4m3fnuz":
        wq, scales = numerics.fnuz_from_fn_bits(wq), scales * 2
    x = numerics.convert(rng.standard_normal((R, K)), "f64", "bf16")
    return dict(w=wq, ws=scales, x=x, y=np.full((R, N), np.nan, np.float32), ctas=ctas)


def reference(inp, *, N, K, R, fp8="fp8e4m3fn", **_):
    W = numerics.to_f64(inp["w"], dtype(fp8))
    S = np.repeat(np.repeat(inp["ws"].astype(np.float64), BLOCK, 0), BLOCK, 1)[:N]
    x = numerics.to_f64(inp["x"], bf16)
    return dict(y=x @ (W * S).T)


# fp32 accumulation over K terms: the error bound grows like sqrt(K) * 2^-24 of the sum of
# |terms|; 1e-5 of the largest |y| covers K = 6144 with a wide margin.
REL_TOL = 1e-5


def check(inp, ref, **_):
    got, exp = inp["y"].astype(np.float64), ref["y"]
    return float(np.abs(got - exp).max() / np.abs(exp).max())
