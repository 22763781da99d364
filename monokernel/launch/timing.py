"""GPU timing shared by bench/h200.py and tools.time_layers: medians of event-timed runs,
CUDA-graph replays of back-to-back launches, and the ceilings a floor is computed from
(DESIGN.md section 8), all measured in the calling process.

    timed(fn)            median microseconds of fn() between two events (long runs)
    timed_graph(fn)      median microseconds per call of fn() replayed from a graph of
                         `per_graph` back-to-back calls (what a decode step's replay sees);
                         fn rotates its own inputs so consecutive calls read other buffers
    ceilings()           device-to-device copy of 1 GiB (read + write counted) and an FP8
                         torch._scaled_mm of 8192^3: {copy_TBps, copy_us, fp8_mm_TFLOPs, ...}
    rotation(nbytes)     how many copies of `nbytes` of inputs span ROTATE_BYTES (> 4x L2)

torch is imported lazily; on a ROCm build of torch `torch.cuda` is HIP, so the same code
times AMD launches (untested: no AMD GPU is available to the project).
"""
from __future__ import annotations

import statistics

L2_BYTES = 60 << 20  # H200: 60 MB L2 (MI355X / MI300X: 4 MB per XCD + 256 MB Infinity Cache)
ROTATE_BYTES = 4 * L2_BYTES  # input copies cycled per launch: well beyond L2
COPY_BYTES = 1 << 30
GEMM = 8192
WARMUP_CALLS = 3  # uncaptured calls before a graph capture, at least a rotation's


def rotation(nbytes: int, span: int = ROTATE_BYTES, minimum: int = 2) -> int:
    """Copies of an input set of `nbytes` so that cycling through them spans `span` bytes."""
    return max(minimum, -(-span // max(1, int(nbytes))))


def timed(fn, reps=30, warmup=5) -> float:
    """Median microseconds of fn() over reps, each bracketed by CUDA events (for long runs,
    where launch overhead does not matter)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def timed_graph(fn, per_graph=20, reps=15) -> float:
    """Median microseconds per call of fn() replayed back to back from a CUDA graph of
    `per_graph` calls: what a decode step's graph replay sees, without the Python launch cost
    (fn must rotate its inputs itself so consecutive calls read different buffers).
    The warm-up runs the graph's whole rotation uncaptured: a launch's first sight of a
    buffer may copy host bytes to the device (a TMA descriptor), and inside the capture that
    copy would become a node the graph replays every time (v50: ~1-2 us a launch)."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(max(WARMUP_CALLS, per_graph)):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per_graph):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return timed(g.replay, reps=reps, warmup=2) / per_graph


def ceilings(fp8: bool = True) -> dict:
    """The copy ceiling (1 GiB device-to-device, read + write counted) and, with `fp8`, the
    FP8 `torch._scaled_mm` 8192^3 ceiling (None where the device or torch lacks it)."""
    import torch
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), reps=20)
    copy_tbs = 2 * COPY_BYTES / (us * 1e-6) / 1e12
    del src, dst
    out = dict(copy_TBps=copy_tbs, copy_us=us, fp8_mm_TFLOPs=None, fp8_mm_us=None)
    if not fp8:
        return out
    try:
        f8 = torch.float8_e4m3fn
        a = torch.randn(GEMM, GEMM, device="cuda").to(f8)
        b = torch.randn(GEMM, GEMM, device="cuda").to(f8).t()
        one = torch.tensor(1.0, device="cuda")
        us_mm = timed(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                               out_dtype=torch.bfloat16), reps=20)
        out.update(fp8_mm_TFLOPs=2 * GEMM ** 3 / (us_mm * 1e-6) / 1e12, fp8_mm_us=us_mm)
    except Exception as e:  # noqa: BLE001 - a device without the fp8 GEMM still has a copy floor
        out["fp8_mm_error"] = f"{type(e).__name__}: {e}"
    return out


def floor_us(nbytes: int, copy_TBps: float) -> float:
    """The byte floor in microseconds: bytes / the measured copy bandwidth."""
    return nbytes / (copy_TBps * 1e12) * 1e6


__all__ = ["timed", "timed_graph", "ceilings", "rotation", "floor_us", "L2_BYTES",
           "ROTATE_BYTES", "COPY_BYTES", "GEMM"]
