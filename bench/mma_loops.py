"""Kernels that keep the matrix units busy from registers, to measure each atom's rate.

Each wave loads its A/B fragments once, then issues `ITERS` x `CHAINS` MMAs on independent
accumulators (so the units, not the dependency chain, set the pace) and finally stores the
accumulator sum so nothing is dead. `wgmma` keeps B in shared memory as Hopper requires and
issues `CHAINS` chained MMAs per commit group.
"""
from __future__ import annotations

from monokernel.atoms import atom, wgmma_e4m3
from monokernel.dsl import build_kernel
from monokernel.ir import ABI, Ptr, Scalar
from monokernel.types import f32, i32, u8, u32, u64

CHAINS = 4
SRC_BYTES = 256  # the `src` buffer the loops read their operands from (bench/h200.py's)


def _abi():
    return ABI(src=Ptr(u8), out=Ptr(f32), iters=Scalar(i32))


def _fragment(k, at, op, lane):
    dt, slots = at.dtype(op), at.slots(op)
    vals = [k.load(k.args.src, (lane * slots + s) % SRC_BYTES, dt) for s in range(slots)]
    return vals[0] if slots == 1 else k.vec(*vals)


def mma_sync_loop(k, *, at):
    lane = k.lane_id()
    A, B = _fragment(k, at, "a", lane), _fragment(k, at, "b", lane)
    accs = [k.lane_var(k.vec(*[k.const(0.0, f32)] * at.c_slots), name=f"acc{i}") for i in range(CHAINS)]
    for _ in k.range(k.args.iters):
        for acc in accs:
            acc.set(k.mma(at, A, B, acc.get()))
    total = accs[0].get()
    for acc in accs[1:]:
        total = total + acc.get()
    gid = (k.cta_id() * k.W + k.wave_id()) * k.L + lane
    k.store(k.args.out, gid, k.extract(total, 0))


def _wg_operands(k, at):
    """A warpgroup MMA's operands from `src` bytes: B staged in shared memory (and A, for
    an SS atom), a proxy-fenced barrier, then A's registers (or descriptor) and B's
    descriptor."""
    smem = k.lds("b_smem", at.b_dtype, int(at.b_smem.table().max()) + 1)
    for e0 in k.range(0, at.K * at.N, k.W * k.L):
        e = e0 + k.thread_id()
        k.store(smem, e, k.load(k.args.src, e % SRC_BYTES, at.b_dtype), mask=e < at.K * at.N)
    if at.a_smem is not None:  # the SS form: A [64, 32] in shared memory too
        a_lds = k.lds("a_smem", at.a_dtype, int(at.a_smem.table().max()) + 1)
        for e0 in k.range(0, at.M * at.K, k.W * k.L):
            e = e0 + k.thread_id()
            k.store(a_lds, e, k.load(k.args.src, (e * 7) % SRC_BYTES, at.a_dtype),
                    mask=e < at.M * at.K)
    with k.async_proxy_lds():  # B (and A) is read next by wgmma (the async proxy)
        k.barrier()
    A = (k.const(at.a_smem_descriptor(k.lds_offset("a_smem")), u64) if at.a_smem is not None
         else _fragment(k, at, "a", k.wave_id() % 4 * k.L + k.lane_id()))
    return A, k.const(at.smem_descriptor(0), u64)


def wgmma_loop(k, *, at):
    A, desc = _wg_operands(k, at)
    acc = k.lane_var(k.vec(*[k.const(0.0, f32)] * at.c_slots))
    for _ in k.range(k.args.iters):
        k.wgmma_fence()
        d = acc.get()
        for _c in range(CHAINS):
            d = k.wgmma(at, A, desc, d)
        k.wgmma_commit()
        k.wgmma_wait(0)
        acc.set(d)
    gid = (k.cta_id() * k.W + k.wave_id()) * k.L + k.lane_id()
    k.store(k.args.out, gid, k.extract(acc.get(), 0))


# The overlap probe's CUDA-core work: EPI_CHAINS independent relu + FMA chains a thread (the
# scoring epilogue's instruction pair), `work` instructions an iteration in all.
EPI_CHAINS = 32
HIST_BITS = 6  # the memory side's counts: the scoring's first digit (top 6 bits), 64 bins
HIST_BINS = 1 << HIST_BITS


def wgmma_overlap_loop(k, *, at, work: int, tensor: bool, mem: int = 0):
    """Does CUDA-core work issued while a wgmma chain is in flight overlap it? Per iteration:
    fence, CHAINS wgmmas (A from registers, or from shared memory for an SS atom), commit
    (if `tensor`), then `work` relu / FMA instructions on registers of their own
    (independent of the chain), then wait(0). Timed against tensor-only (work 0) and
    work-only (tensor False) launches by bench/h200.py --overlap: overlap = (t_tensor +
    t_work - t_both) / min(t_tensor, t_work). `mem`: also that many (score-like store, LDS
    histogram count) pairs an iteration, each masked by its value's sign as the scoring's
    `_store` is (a global store of the value, its top 6 bits counted by a predicated LDS
    atomic): the scoring epilogue's memory side (4 of each a lane a step), v15's question
    whether that, not the ALU work, is what does not overlap the RS chain."""
    if work % (2 * EPI_CHAINS):
        raise ValueError(f"work {work} must be a multiple of {2 * EPI_CHAINS} instructions")
    lane = k.wave_id() % 4 * k.L + k.lane_id()
    A, desc = _wg_operands(k, at)
    acc = k.lane_var(k.vec(*[k.const(0.0, f32)] * at.c_slots))
    # a negative weight: relu(v) * w + v decays positive values and keeps negative ones,
    # so the chains stay finite over any number of iterations
    w = k.cast(k.load(k.args.src, lane % SRC_BYTES, u8), f32) * (-1.0 / 256)
    ep = [k.lane_var(k.cast(k.load(k.args.src, (lane + 7 * i) % SRC_BYTES, u8), f32) - 31.5)
          for i in range(EPI_CHAINS)]
    gid = (k.cta_id() * k.W + k.wave_id()) * k.L + k.lane_id()
    hist = k.lds("ovl_hist", u32, HIST_BINS * k.W) if mem else None
    if mem > EPI_CHAINS:
        raise ValueError(f"mem {mem}: at most {EPI_CHAINS} pairs an iteration")
    for _ in k.range(k.args.iters):
        d = acc.get()
        if tensor:
            k.wgmma_fence()
            for _c in range(CHAINS):
                d = k.wgmma(at, A, desc, d)
            k.wgmma_commit()
        for _r in range(work // (2 * EPI_CHAINS)):
            for v in ep:
                v.set(k.fma(k.max(v.get(), 0.0), w, v.get()))
        for m in range(mem):  # overwritten by the final store below
            v = ep[m].get()
            ok = v > 0.0
            k.store(k.args.out, gid, v, mask=ok)
            digit = k.cast(k.bitcast(v, u32) >> (32 - HIST_BITS), i32)
            k.atomic("add", hist, k.wave_id() * HIST_BINS + digit, k.const(1, u32), mask=ok,
                     scope="cta")
        if tensor:
            k.wgmma_wait(0)
        acc.set(d)
    total = k.extract(acc.get(), 0)
    for v in ep:
        total = total + v.get()
    k.store(k.args.out, gid, total)


def build_overlap(work: int, tensor: bool, n: int = 256, target: str = "sm_90a", waves: int = 8,
                  a_smem: bool = False, mem: int = 0):
    at = wgmma_e4m3(n, a_smem=a_smem)
    return build_kernel(f"wgmma_overlap_w{work}_m{mem}_{'t' if tensor else 'n'}"
                        f"{'_ss' if a_smem else ''}", wgmma_overlap_loop,
                        abi=_abi(), target=target, waves=waves, wave_size=32, at=at,
                        work=work, tensor=tensor, mem=mem), at


def build(name: str, target: str = "sm_90a", waves: int = 8):
    if name.startswith("sm90_wgmma"):
        at = atom(name)
        return build_kernel("wgmma_loop", wgmma_loop, abi=_abi(), target=target, waves=waves,
                            wave_size=32, at=at), at
    at = atom(name)
    return build_kernel("mma_loop", mma_sync_loop, abi=_abi(), target=target, waves=waves,
                        wave_size=at.group if at.group in (32, 64) else None, at=at), at


def flops_per_launch(at, waves, ctas, iters) -> float:
    per_mma = 2.0 * at.M * at.N * at.K
    if at.group == 128:
        return per_mma * CHAINS * iters * (waves // 4) * ctas
    return per_mma * CHAINS * iters * waves * ctas


WGMMA_N = 256
BENCH_ATOMS = ("sm90_mma_m16n8k16_bf16", "sm90_mma_m16n8k32_e4m3", f"sm90_wgmma_m64n{WGMMA_N}k32_e4m3")


def ensure_atoms():
    wgmma_e4m3(WGMMA_N)  # registers the atom by name
