"""H200 ceilings, the FP8 GEMV against its byte floor and torch, and MMA atom throughput.

    python3 bench/h200.py [--json FILE]

Everything is measured in one process so the ratios compare like with like: the copy and
`torch._scaled_mm` ceilings first, then our kernels. Times are medians of CUDA-event timed
launches; every launch reads a different copy of the weights (copies span > 4x the 60 MB
L2), so nothing is timed from L2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import mma_loops  # noqa: E402
from monokernel import numerics  # noqa: E402
from monokernel.launch.cuda import CudaKernel  # noqa: E402
from monokernel.proofs import gemv, gemv_mma, gemv_split  # noqa: E402

from monokernel.launch.timing import (COPY_BYTES, GEMM, L2_BYTES, ROTATE_BYTES,  # noqa: E402,F401
                                      ceilings, timed, timed_graph)

N_OUT, K_IN = 2624, 6144  # the front projection q_a | kv_a


def gemv_bench(rows: int, copy_tbs: float, waves: int, variant: str = "mma", unroll: int = 2,
               x_in_lds: bool = False, ksplit: int = 1, probe: str | None = None,
               l2_prefetch: int = 0, bulk: bool = False, ahead: int = 0,
               ctas_per_sm: int = 1) -> dict:
    """probe (gemv_mma.PROBES): time the tensor-core GEMV's grid without loads ("empty") or
    its loads without the math ("read"), no peers, no error: bounds, not a GEMV. A variant
    ending in "-pdl": built with pdl and launched with programmatic dependent launch, so in
    the graph's chain each launch starts under the one before (its first weights read before
    grid_dep_wait): the time per launch of a decode step's chain, not of one launch alone."""
    pdl = variant.endswith("-pdl")
    variant = variant.removesuffix("-pdl")
    rng = np.random.default_rng(rows)
    inp = gemv.make_inputs(rng, N=N_OUT, K=K_IN, R=rows, ctas=132)
    ref = gemv.reference(inp, N=N_OUT, K=K_IN, R=rows)
    wbytes = inp["w"].nbytes + inp["ws"].nbytes
    copies = max(2, -(-ROTATE_BYTES // wbytes))
    w = [torch.from_numpy(inp["w"]).cuda() for _ in range(copies)]
    ws = torch.from_numpy(inp["ws"]).cuda()
    x = torch.from_numpy(inp["x"].view(np.int16)).cuda()
    y = torch.full((rows, N_OUT), float("nan"), device="cuda")
    extra = {}
    if variant == "split":
        kern = gemv_split.build("sm_90a", N=N_OUT, K=K_IN, R=rows, waves=waves)
        grid = 132
        extra = {n: torch.from_numpy(v).cuda() for n, v in gemv_split.scratch(N_OUT, K_IN).items()}
    elif variant in ("mma", "mma-flat", "mma-bulk"):  # flat: weights pre-permuted
        # (permute_weights); bulk: the flat weights by one bulk copy into LDS a wave
        flat = variant in ("mma-flat", "mma-bulk")
        bulk = variant == "mma-bulk"
        if flat:
            w = [torch.from_numpy(gemv_mma.permute_weights(inp["w"], N_OUT, K_IN)).cuda()
                 for _ in range(copies)]
        kern = gemv_mma.build("sm_90a", N=N_OUT, K=K_IN, R=rows, waves=waves, unroll=unroll,
                              x_in_lds=x_in_lds, ksplit=ksplit, probe=probe, flat=flat,
                              l2_prefetch=l2_prefetch, bulk=bulk, pdl=pdl, ahead=ahead,
                              ctas_per_sm=ctas_per_sm)
        grid = N_OUT // gemv_mma.TILE_N * ksplit
        if ksplit > 1:
            extra = {n: torch.from_numpy(v).cuda() for n, v in gemv_mma.scratch(N_OUT, ksplit).items()}
    else:
        kern = gemv.build("sm_90a", N=N_OUT, K=K_IN, R=rows, waves=waves)
        grid = 132
    ck = CudaKernel(kern)
    state = {"i": 0}

    def launch():
        state["i"] = (state["i"] + 1) % copies
        ck.launch(dict(w=w[state["i"]], ws=ws, x=x, y=y, ctas=grid, **extra), grid=grid,
                  sync=False, cooperative=False, pdl=pdl)
    launch()
    torch.cuda.synchronize()
    err = float(np.abs(y.cpu().numpy() - ref["y"]).max() / np.abs(ref["y"]).max())
    try:
        us = timed_graph(launch)
    except Exception as e:  # noqa: BLE001 - a launch a graph cannot capture: time the stream
        if not pdl:
            raise
        print(f"  (pdl launches not captured in a graph: {type(e).__name__}: {e}; timing 20 "
              "back-to-back stream launches instead)", flush=True)
        torch.cuda.synchronize()
        us = timed(lambda: [launch() for _ in range(20)]) / 20
    variant += ("-pdl" if pdl else "") + (f" ahead {ahead}" if ahead else "") + \
        (f" {ctas_per_sm} CTAs/SM" if ctas_per_sm > 1 else "")
    floor_us = wbytes / (copy_tbs * 1e12) * 1e6
    if probe:
        return dict(rows=rows, us=us, floor_us=floor_us, ratio_to_floor=us / floor_us,
                    torch_bf16_us=float("nan"), torch_fp8_scaled_mm_us=float("nan"),
                    rel_err=float("nan"), regs=ck.regs, waves=waves,
                    variant=f"PROBE {probe}{' pdl' if pdl else ''} unroll {unroll}{' x-lds' if x_in_lds else ''}{f' l2pf {l2_prefetch}' if l2_prefetch else ''}")
    # torch peers: bf16 GEMV on weights dequantized ahead (reads 2x the bytes), and fp8
    # _scaled_mm with one per-tensor scale (rows padded to 16, its smallest M)
    wdq = torch.from_numpy(numerics.to_f32(inp["w"], "fp8e4m3fn")).cuda()
    S = torch.from_numpy(inp["ws"]).cuda().repeat_interleave(128, 0).repeat_interleave(128, 1)[:N_OUT]
    wbf = [(wdq * S).to(torch.bfloat16) for _ in range(max(2, -(-ROTATE_BYTES // (2 * N_OUT * K_IN))))]
    xb = torch.from_numpy(numerics.to_f32(inp["x"], "bf16")).cuda().to(torch.bfloat16)
    st = {"i": 0}

    def torch_bf16():
        st["i"] = (st["i"] + 1) % len(wbf)
        return xb @ wbf[st["i"]].t()
    us_bf16 = timed_graph(torch_bf16)
    x16 = torch.zeros(16, K_IN, device="cuda").to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    wt = [t.view(torch.float8_e4m3fn).t() for t in w]

    def torch_fp8():
        st["i"] = (st["i"] + 1) % len(wt)
        return torch._scaled_mm(x16, wt[st["i"]], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    us_fp8 = timed_graph(torch_fp8)
    return dict(rows=rows, us=us, floor_us=floor_us, ratio_to_floor=us / floor_us,
                torch_bf16_us=us_bf16, torch_fp8_scaled_mm_us=us_fp8, rel_err=err,
                regs=ck.regs, waves=waves, variant=(f"{variant} unroll {unroll}{' x-lds' if x_in_lds else ''}{f' ksplit {ksplit}' if ksplit > 1 else ''}{f' l2pf {l2_prefetch}' if l2_prefetch else ''}"
                                             if variant.startswith("mma") else variant))


def mma_bench(name: str, waves: int = 8, iters: int = 4096) -> dict:
    mma_loops.ensure_atoms()
    kern, at = mma_loops.build(name, waves=waves)
    ck = CudaKernel(kern)
    src = torch.randint(0, 64, (mma_loops.SRC_BYTES,), dtype=torch.uint8, device="cuda")
    out = torch.zeros(132 * waves * 32, device="cuda")
    us = timed(lambda: ck.launch(dict(src=src, out=out, iters=iters), grid=132, sync=False,
                                 cooperative=False), reps=10, warmup=2)
    fl = mma_loops.flops_per_launch(at, waves, 132, iters)
    return dict(atom=name, us=us, TFLOPs=fl / (us * 1e-6) / 1e12, regs=ck.regs)


# (work, mem) cases of the overlap probe: relu / FMA instructions and (store, LDS count)
# pairs an iteration; A from registers (RS) also with the scoring epilogue's memory side
OVERLAP_CASES = {False: ((256, 0), (512, 0), (0, 4), (128, 4), (256, 8)),
                 True: ((256, 0), (512, 0))}


def overlap_bench(iters: int = 2048, waves: int = 8) -> list:
    """bench/mma_loops.wgmma_overlap_loop: a wgmma m64n256k32 chain per iteration alone,
    `work` relu / FMA instructions (and `mem` masked store + LDS count pairs) alone, and
    both (issued while the chain is in flight), with A from registers (RS, the scoring's
    form) and from shared memory (SS); overlap = (t_tensor + t_work - t_both) /
    min(t_tensor, t_work): 1 = fully hidden, 0 = serialized (bench/NOTES.md v9, v15: the
    scoring's epilogue)."""
    src = torch.randint(0, 64, (mma_loops.SRC_BYTES,), dtype=torch.uint8, device="cuda")
    out = torch.zeros(132 * waves * 32, device="cuda")

    def t(work, tensor, ss, mem=0):
        kern, _ = mma_loops.build_overlap(work, tensor, waves=waves, a_smem=ss, mem=mem)
        ck = CudaKernel(kern)
        return timed(lambda: ck.launch(dict(src=src, out=out, iters=iters), grid=132, sync=False,
                                       cooperative=False), reps=10, warmup=2), ck.regs
    rows = []
    for ss in (False, True):
        t_tensor, _ = t(0, True, ss)
        for work, mem in OVERLAP_CASES[ss]:
            t_work, _ = t(work, False, ss, mem)
            t_both, regs_b = t(work, True, ss, mem)
            ov = (t_tensor + t_work - t_both) / min(t_tensor, t_work)
            rows.append(dict(a="smem" if ss else "regs", work=work, mem=mem, tensor_us=t_tensor,
                             work_us=t_work, both_us=t_both, overlap=ov, regs=regs_b))
            print(f"A from {'smem' if ss else 'regs'}, work {work:4d}, mem {mem}: wgmma alone "
                  f"{t_tensor:8.1f} us, work alone {t_work:8.1f}, both {t_both:8.1f}: "
                  f"overlap {ov:5.2f} ({regs_b} regs)", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="GEMV variants at 8 rows only, no MMA loops")
    ap.add_argument("--explore", action="store_true",
                    help="8 rows: load depth x waves, and the empty / loads-only probes")
    ap.add_argument("--l2", action="store_true",
                    help="8 rows: the GEMV with its weights bulk-prefetched into the L2 first "
                    "(gemv_mma l2_prefetch, piece sizes) beside the plain loads")
    ap.add_argument("--bulk", action="store_true",
                    help="the GEMV with each wave's (pre-permuted) weights in one bulk copy "
                    "into LDS (gemv_mma bulk) beside the flat and row-major loads, rows 1 / 2 / "
                    "8, K split 1 / 3")
    ap.add_argument("--pdl", action="store_true",
                    help="8 rows (and 1 / 2 / 4): the GEMV launched with programmatic dependent "
                    "launch (chained in the graph: each launch's first weights stream under "
                    "the one before) beside the plain launch, the empty grid both ways, and "
                    "with the CTA's weights L2-prefetched before its wait")
    ap.add_argument("--overlap", action="store_true",
                    help="only: does CUDA-core work overlap a wgmma chain in flight, A from "
                    "registers (RS) and from shared memory (SS)")
    args = ap.parse_args()
    res = dict(device=torch.cuda.get_device_name())
    if args.overlap:
        print("wgmma m64n256k32 chain (A from registers / shared memory) vs relu / FMA work, "
              "132 SMs x 8 warps")
        res["overlap"] = overlap_bench()
        return
    res["ceilings"] = c = ceilings()
    print(f"ceilings: copy {c['copy_TBps']:.2f} TB/s (read+write, 1 GiB), "
          f"fp8 _scaled_mm {c['fp8_mm_TFLOPs']:.0f} TFLOP/s (8192^3)", flush=True)
    res["gemv"] = []
    print("\nFP8 GEMV 2624 x 6144 (e4m3 + 128x128 scales, bf16 x, fp32 acc)")
    print(f"{'rows':>4} {'us':>8} {'floor':>7} {'x floor':>8} {'torch bf16':>11} {'torch fp8 mm':>13} {'rel err':>9}")
    plan = [("mma", r, 2, 8, False, 1) for r in (1, 2, 4, 8)] + [
        ("mma-flat", r, 2, 8, False, 1) for r in (1, 8)] + [
        ("mma-flat-pdl", r, 2, 8, False, 1, None, 0, dict(ahead=a, ctas_per_sm=2))
        for a in (2, 3) for r in (1, 2, 4, 8)] + [
        ("mma", 8, 3, 4, False, 4), ("mma", 8, 1, 4, False, 12), ("mma", 8, 2, 4, False, 6),
        ("mma", 8, 3, 8, False, 2), ("mma", 8, 6, 8, True, 1), ("split", 8, 0, 8, False, 1),
        ("cuda-core", 8, 1, 4, False, 1)]
    plan = [p + (None, 0) if len(p) == 6 else p for p in plan]
    if args.quick:
        plan = [p for p in plan if p[1] == 8][:6]  # the row-major and pre-permuted GEMV first
    if args.explore:
        plan = [("mma", 8, 2, 8, False, 1, None, 0), ("mma", 8, 2, 8, False, 1, "empty", 0)] + \
            [("mma", 8, u, w, False, 1, pr, 0) for pr in ("read_w", "read_flat")
             for u, w in ((2, 8), (6, 8), (3, 4))]
    if args.l2:  # piece sizes: a lane's 384 bytes (flat) / a row's 6144 / a tile's 96 KB
        plan = [("mma", 8, 2, 8, False, 1, None, pf) for pf in (0, 384, 1536, 6144)] + \
            [("mma-flat", 8, 2, 8, False, 1, None, pf) for pf in (0, 384, 6144, 98304)] + \
            [("mma", 8, 2, 8, False, 1, "read_w", pf) for pf in (0, 1536)] + \
            [("mma", r, 2, 8, False, 1, None, pf) for r in (1, 2) for pf in (0, 1536)]
    if args.bulk:
        plan = [(v, r, 2, 8, False, ks, None, 0) for r in (8, 1, 2) for ks in (1, 3)
                for v in ("mma", "mma-flat", "mma-bulk")]
    if args.pdl:  # (v13: pdl measured -1.2 us; the pipeline `ahead` beside it)
        pipe = [dict(ahead=a, ctas_per_sm=c) for a, c in ((2, 2), (3, 2), (4, 2), (2, 1), (1, 2))]
        plan = [(v, 8, 2, 8, False, 1, None, 0) for v in ("mma-flat", "mma-flat-pdl")] + \
            [("mma-flat", 8, 2, 8, False, 1, None, 0, pipe[0])] + \
            [("mma-flat-pdl", 8, 2, 8, False, 1, None, 0, p) for p in pipe] + \
            [("mma-pdl", 8, 2, 8, False, 1, None, 0, pipe[0]), ("mma-pdl", 8, 2, 8, False, 1, "empty", 0)] + \
            [(v, r, 2, 8, False, 1, None, 0, *p) for r in (1, 2, 4)
             for v, p in (("mma-flat-pdl", ()), ("mma-flat-pdl", (pipe[0],)), ("mma-flat-pdl", (pipe[1],)))]
    for variant, rows, unroll, waves, xl, ks, probe, pf, *opt in plan:
        try:
            g = gemv_bench(rows, c["copy_TBps"], waves, variant, unroll, xl, ks, probe, pf,
                           **(opt[0] if opt else {}))
        except Exception as e:  # noqa: BLE001 - a variant that does not build: say so, go on
            print(f"{rows:>4} {variant} unroll {unroll} w{waves} {probe}: {type(e).__name__}: {e}")
            continue
        variant = g["variant"] + f" w{waves}"
        res["gemv"].append(g)
        print(f"{rows:>4} {g['us']:8.2f} {g['floor_us']:7.2f} {g['ratio_to_floor']:8.2f} "
              f"{g['torch_bf16_us']:11.2f} {g['torch_fp8_scaled_mm_us']:13.2f} {g['rel_err']:9.2e}  "
              f"{variant} ({g['regs']} regs)", flush=True)
    res["mma"] = []
    if args.quick or args.explore or args.l2 or args.bulk or args.pdl:
        return
    print("\nMMA atoms, register-resident loops on 132 SMs x 8 warps")
    for name in mma_loops.BENCH_ATOMS:
        m = mma_bench(name)
        res["mma"].append(m)
        print(f"{name:32} {m['TFLOPs']:8.1f} TFLOP/s  ({m['us']:.1f} us, {m['regs']} regs)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
