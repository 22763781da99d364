"""Torch peers of our launches, run in the same process as ours (DESIGN.md section 8).

The indexer's scoring as a torch user would write it (what DeepGEMM's paged logits compute,
from keys gathered contiguous beforehand):

    logits  = q8 @ keys8^T                      [R * heads, N]  torch._scaled_mm (FP8, f32 out)
    scores  = kscale * sum_h w[r, h] * relu(logits[r, h])        [R, N]  (relu, one bmm)
    scores[r, p] = -inf for p > positions[r]                     (each row's own context)

q8 and w are what the kernel scores with (the FP8 queries and the head weights with the
query scale and constants folded in, stages/index.py), keys8 / kscale the N cached FP8 keys
and their fp32 scales of one block-table row, gathered into contiguous tensors before the
timing (`gather_keys`): the peer is timed on the scoring alone, never on the gather.

_scaled_mm runs with unit scales and the key scale is applied after relu (relu(s x) =
s relu(x) for s > 0): exact products, f32 sums, as the kernel's. The same function has a
float path (`fp8_mm=False`: the FP8 bits dequantized, a float matmul in `dtype`), which is
what runs on a CPU (_scaled_mm needs CUDA) and what test/test_workloads.py checks against
stages.index_ref's float64 reference on the tiny config.
"""
from __future__ import annotations

import numpy as np

FP8_TORCH = {"fp8e4m3fn": "float8_e4m3fn", "fp8e4m3fnuz": "float8_e4m3fnuz"}
KEY_DIM = 128  # bytes of an FP8 index key (one head)
MM_ALIGN = 16  # torch._scaled_mm: every dimension a multiple of 16


def as_tensor(x, device=None):
    import torch
    if isinstance(x, torch.Tensor):
        return x if device is None else x.to(device)
    return torch.from_numpy(np.ascontiguousarray(x)).to(device or "cpu")


def index_scores(q8, w, keys8, kscale, positions, *, fmt: str = "fp8e4m3fn", fp8_mm=None,
                 dtype=None, bf16_head_sum: bool = False):
    """scores [R, N] (module doc). q8: uint8 [R, H, 128] FP8 bits; w: float [R, H];
    keys8: uint8 [N, 128]; kscale: float [N]; positions: int [R]. Tensors (any device) or
    numpy (CPU). fp8_mm: True = torch._scaled_mm (CUDA), False = dequantized matmul in
    `dtype` (default float64 on CPU, float32 on CUDA), None = True on CUDA.
    bf16_head_sum: relu(logits) (as f32) and w rounded to bf16 before the head sum, the
    precision of the scoring's head_sum "mma"."""
    import torch
    q8 = as_tensor(q8)
    dev = q8.device
    keys8, w, kscale, positions = (as_tensor(x, dev) for x in (keys8, w, kscale, positions))
    R, H, D = q8.shape
    N = keys8.shape[0]
    if D != KEY_DIM or keys8.shape[1] != KEY_DIM:
        raise ValueError(f"index peer: keys of {D} / {keys8.shape[1]} bytes; a head is {KEY_DIM}")
    f8 = getattr(torch, FP8_TORCH[fmt])
    qf, kf = q8.reshape(R * H, D).view(f8), keys8.view(f8)
    if fp8_mm is None:
        fp8_mm = dev.type == "cuda"
    if fp8_mm:
        one = torch.ones((), dtype=torch.float32, device=dev)
        pad = -N % MM_ALIGN  # _scaled_mm takes dimensions in multiples of 16
        if pad:
            kf = torch.cat([kf, torch.zeros(pad, D, dtype=f8, device=dev)])
        logits = torch._scaled_mm(qf, kf.t(), scale_a=one, scale_b=one,
                                  out_dtype=torch.float32)
        if isinstance(logits, tuple):  # torch < 2.4 returns (out, amax)
            logits = logits[0]
        logits = logits[:, :N]
        dt = torch.float32
    else:
        dt = dtype or (torch.float64 if dev.type == "cpu" else torch.float32)
        logits = qf.to(dt) @ kf.to(dt).t()
    logits = logits.relu().reshape(R, H, N)
    if bf16_head_sum:
        logits = logits.to(torch.float32).to(torch.bfloat16).to(dt)
        w = w.to(torch.bfloat16)
    scores = torch.bmm(w.to(dt).view(R, 1, H), logits).view(R, N) * kscale.to(dt)
    past = torch.arange(N, device=dev).view(1, N) > positions.to(torch.int64).view(R, 1)
    return scores.masked_fill_(past, float("-inf"))


def gather_keys(cache, table_row, n: int, *, page: int = 64):
    """The first n keys of a block-table row as contiguous tensors: (keys8 uint8 [n, 128],
    kscale float32 [n]) from a paged cache (uint8 [pages, page x (128 + 4)]: a page's 64 keys,
    then their 64 fp32 scales; stages/index.py), on the cache's device."""
    import torch
    cache = as_tensor(cache)
    pages = cache.reshape(-1, page * (KEY_DIM + 4))
    used = -(-n // page)
    row = table_row[:used]
    row = row.to(torch.int64) if isinstance(row, torch.Tensor) else np.asarray(row, np.int64)
    idx = as_tensor(row, pages.device)
    sel = pages.index_select(0, idx)
    keys = sel[:, :page * KEY_DIM].reshape(used * page, KEY_DIM)[:n].contiguous()
    scale = sel[:, page * KEY_DIM:].contiguous().view(torch.float32).reshape(-1)[:n].contiguous()
    return keys, scale


def timed_index_peer(q8, w, keys8, kscale, positions, *, copies: int, per_graph: int,
                     reps: int, fmt: str = "fp8e4m3fn") -> float:
    """Microseconds per call of index_scores on CUDA, replayed from CUDA graphs like ours
    (monokernel.launch.timing.timed_graph): `copies` device copies of the keys and scales,
    cycled call to call so the key reads do not come from L2."""
    from monokernel.launch import timing
    keys = [keys8] + [keys8.clone() for _ in range(copies - 1)]
    scales = [kscale] + [kscale.clone() for _ in range(copies - 1)]
    st = {"i": 0}

    def call():
        i = st["i"] % copies
        st["i"] += 1
        return index_scores(q8, w, keys[i], scales[i], positions, fmt=fmt, fp8_mm=True)
    return timing.timed_graph(call, per_graph=per_graph, reps=reps)


__all__ = ["index_scores", "gather_keys", "timed_index_peer"]
