"""FP8 GEMV on Hopper's tensor cores: y = x @ dequant(W)^T for up to 8 rows of x.

Why this shape: at 8 rows a CUDA-core GEMV reads 16 bytes of activations per weight byte and
does 8 FMAs per weight, so it is L2/ALU bound long before the weight stream is. Here a warp
runs `mma.sync m16n8k16 bf16` with 16 weight rows as A (e4m3 -> bf16 is exact) and the 8 x
rows as B (N = 8 = the widest row count we build), so each activation load serves 16 weight
rows and the FMAs go to the tensor cores. The K order inside a 64-wide chunk is permuted
(MMA sums over k in any order, the same permutation applied to A and B): each lane then
loads 16 CONTIGUOUS bytes of two weight rows and 32 contiguous bytes of its x row, instead of
the atom's 2-byte pieces. One CTA owns 16 output rows; its waves split K by whole 128-blocks
(the weight scale is uniform there) and are summed through LDS in wave order: the same bits
on every run.

`flat`: the weights PRE-PERMUTED on the host (`permute_weights`, once per model: weights are
constants) so that each of a warp's loads reads 512 contiguous bytes (whole 128-byte lines)
instead of 8 rows x 64 bytes: the probe `read_flat` measured that load pattern alone at 1.51x
the floor against 1.65x (bench/NOTES.md v7).
"""
from __future__ import annotations

import numpy as np

from ..atoms import atom
from ..dsl import build_kernel
from ..ir import ABI, MBARRIER_BYTES, Ptr, Scalar
from ..types import bf16, f32, fp8e4m3fn, i32, u8, u32
from . import gemv

ATOM = "sm90_mma_m16n8k16_bf16"
TILE_N = 16  # output rows per CTA = the atom's M
CHUNK = 64  # k per lane-load round: 4 MMAs of k16, 16 contiguous k per lane quad
MAX_ROWS = 8  # the atom's N: x rows per MMA
UNROLL = 2  # 128-blocks whose loads are issued together (bench/NOTES.md: measured)
BLOCK = gemv.BLOCK


def abi(ksplit=1):
    extra = dict(partials=Ptr(f32), counters=Ptr(u32)) if ksplit > 1 else {}
    # weights and their scales are the same every launch (constant): read before grid_dep_wait
    return ABI(w=Ptr(fp8e4m3fn, constant=True), ws=Ptr(f32, constant=True), x=Ptr(bf16),
               y=Ptr(f32), ctas=Scalar(i32), **extra)


PROBES = (None, "empty", "read", "read_w", "read_flat")  # bench-only bounds (body's doc)
X_PAD = 8  # bf16 of padding a staged x row: rows K * 2 bytes apart (a multiple of 128) would
# put the 8 rows' reads of one MMA on one bank (8-way conflicts)


FLAT_PIECE = 16  # bytes a lane loads of one weight row a 64-k chunk
FLAT_GROUP = 2 * 32 * FLAT_PIECE  # bytes of one (tile, 64-k chunk): rows r and r + 8, 32 lanes


def permute_weights(w: np.ndarray, N: int, K: int) -> np.ndarray:
    """Weights [N, K] (one byte each) -> the `flat` layout: for tile t (16 rows) and 64-k chunk
    c, FLAT_GROUP contiguous bytes [h][lane][i] = w[16 t + lane // 4 + 8 h, 64 c + 16 (lane % 4)
    + i]: lane l's two 16-byte pieces of the chunk, for every lane in order."""
    if N % TILE_N or K % CHUNK:
        raise ValueError(f"gemv_mma: N={N} / K={K} are not whole {TILE_N}-row tiles and "
                         f"{CHUNK}-k chunks")
    a = np.ascontiguousarray(w).reshape(N // TILE_N, 2, 8, K // CHUNK, 4, FLAT_PIECE)
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2, 4, 5)).reshape(w.shape)


def prefetch_weights(k, w, tile_idx, split, *, K, ksplit, flat, piece):
    """Every thread of the CTA asks the L2 for its share of the CTA's weight bytes, in
    `piece`-byte bulk prefetches, before any weight load (l2_prefetch; measured SLOWER on the
    H200, bench/NOTES.md v13: a stream whose own loads follow at once gains nothing from it).
    Row-major: 16 rows of K / ksplit bytes, K apart; flat: one contiguous range (a tile's
    split is whole chunks)."""
    per_row = K // ksplit
    if per_row % piece:
        raise ValueError(f"gemv_mma: l2_prefetch piece {piece} does not divide the CTA's "
                         f"{per_row}-byte weight rows")
    tile0 = tile_idx * (TILE_N * K)
    if flat:
        base = tile0 + (split * (TILE_N * per_row) if ksplit > 1 else 0)
        k.prefetch_rows_l2(w, base, 1, TILE_N * per_row, 0, piece)
    else:
        base = tile0 + (split * per_row if ksplit > 1 else 0)
        k.prefetch_rows_l2(w, base, TILE_N, per_row, K, piece)


def body(k, *, N, K, R, unroll=1, x_in_lds=False, ksplit=1, probe=None, flat=False,
         l2_prefetch=0, bulk=False, pdl=False, ahead=0):
    """probe "empty": no loads (what a launch of this grid costs); "read": every load, no
    conversion or MMA (what the load pattern alone costs); "read_w": the weight loads alone;
    "read_flat": as many weight loads, each warp's reading 512 contiguous bytes of the tile
    (what the same bytes cost in whole 128-byte lines, i.e. with a pre-permuted layout).
    `l2_prefetch` (bytes, 0: none): the CTA's weights are first asked of the L2 in pieces of
    that size (`prefetch_weights`). `bulk` (flat layout, sm_90a / interp): each wave's weights
    (contiguous in the flat layout) come in ONE bulk copy into LDS (the TMA unit: the whole
    tile in flight at once, no registers holding it), completing on the wave's mbarrier;
    the MMAs then read them from LDS (conflict-free: a warp's 512 contiguous bytes a load).
    The probes write every y (zeros, or a fold of the loaded bits): not a GEMV.
    `pdl` (programmatic dependent launch): the next launch may start at once
    (grid_dep_launch first), and the first `unroll` blocks' weights (constants) and any L2
    prefetch are issued BEFORE grid_dep_wait, so they stream while the launch before this one
    finishes; x, the outputs and the split counters only after it.
    `ahead` (0: off): a software pipeline instead of rounds of `unroll` blocks: the wave's
    blocks unrolled one by one, each block's weights loaded `ahead` blocks and its x one block
    before its MMAs, so the weight stream never waits for the math (with the rounds every
    load of a round waits for the round before's MMAs). (A variant prefetching each weight
    group's successor over x in LDS measured slower, 10.7-13.5 us: bench/NOTES.md v7;
    removed.)"""
    if probe not in PROBES:
        raise ValueError(f"gemv_mma: probe {probe!r}; one of {PROBES}")
    if ahead and (x_in_lds or bulk or probe):
        raise ValueError("gemv_mma: the pipeline (ahead) reads x directly, without bulk copies "
                         "or probes")
    if pdl and (x_in_lds or bulk or probe not in (None, "empty")):
        raise ValueError("gemv_mma: pdl is built for x read directly, no bulk copies and no "
                         "probe but 'empty'")
    if pdl:
        k.grid_dep_launch()
    at = atom(ATOM)
    a = k.args
    blocks = K // BLOCK
    if K % BLOCK or N % TILE_N or blocks % (k.W * ksplit) or R > MAX_ROWS or \
            (ksplit > 1 and x_in_lds):
        raise ValueError(f"gemv_mma: N={N} must be a multiple of {TILE_N}, K={K}/128 of the "
                         f"{k.W} waves x {ksplit} splits, rows {R} <= {MAX_ROWS}; a K split "
                         "reads x directly")
    lane = k.lane_id()
    r, q = lane >> 2, lane & 3  # the atom's groupID / thread-in-group
    # with a K split, CTA c computes split c % ksplit of tile c // ksplit: the grid has
    # ksplit times more, shorter CTAs, which spread evenly over the SMs (164 tiles do not)
    tile_idx = k.cta_id() // ksplit if ksplit > 1 else k.cta_id()
    split = k.cta_id() % ksplit if ksplit > 1 else None
    tile = tile_idx * TILE_N
    xrow_ok = r < R
    total = k.lane_var(k.vec(*[k.const(0.0, f32)] * at.c_slots))
    per_wave = blocks // (k.W * ksplit)
    first_block = k.wave_id() * per_wave if ksplit == 1 else \
        split * (blocks // ksplit) + k.wave_id() * per_wave
    if per_wave % unroll:
        raise ValueError(f"gemv_mma: {per_wave} blocks per wave are not a multiple of unroll={unroll}")
    xl = None
    single_round = x_in_lds and unroll == per_wave
    if l2_prefetch and probe != "empty":
        prefetch_weights(k, a.w, tile_idx, split, K=K, ksplit=ksplit, flat=flat,
                         piece=l2_prefetch)
    wave_lds = None
    if bulk:
        if not flat or probe or x_in_lds:
            raise ValueError("gemv_mma: bulk weights need the flat layout, no probe and x read "
                             "directly")
        region = per_wave * (BLOCK // CHUNK) * FLAT_GROUP  # a wave's weight bytes
        wl = k.lds("w_bulk", u8, k.W * region)
        bar = k.ptr_add(k.mbarrier("w_bars", k.W), k.wave_id() * MBARRIER_BYTES)
        wave_lds = k.ptr_add(wl, k.wave_id() * region)
        k.mbar_init(bar, 1)
        k.barrier()  # every wave's mbarrier set up before any copy completes on it
        src = (tile_idx * (K // CHUNK) + first_block * (BLOCK // CHUNK)) * FLAT_GROUP
        k.mbar_arrive_tx(bar, region)
        k.bulk_load_lds(wave_lds, a.w, src, region, bar)

    def x_loads(kb):
        return [k.load(a.x, r * K + kb + h * 8, bf16, 8, mask=xrow_ok) for h in range(2)]

    def issue(b0, with_x=True, n=unroll):
        """The weight (and, without LDS staging, activation) loads of `n` blocks;
        `with_x` False: weights only (attach_x adds the activations later)."""
        loads = []
        for u in range(n):
            for chunk in range(BLOCK // CHUNK):
                kb = (b0 + u) * BLOCK + chunk * CHUNK + q * 16
                if probe == "read_flat":  # the wave's 2 KB a block, 512 contiguous a load
                    flat_byte = tile * K + ((b0 - first_block + u) * 4 + chunk * 2) * 512 + \
                        first_block * TILE_N * BLOCK + lane * 16
                    w_lo = k.load(a.w, flat_byte, fp8e4m3fn, 16, nontemporal=True)
                    w_hi = k.load(a.w, flat_byte + 512, fp8e4m3fn, 16, nontemporal=True)
                    loads.append((w_lo, w_hi, None, kb))
                    continue
                if bulk:  # the wave's copy in LDS, in the flat layout's order
                    g0 = ((b0 - first_block + u) * (BLOCK // CHUNK) + chunk) * FLAT_GROUP + \
                        lane * FLAT_PIECE
                    w_lo = k.load(wave_lds, g0, fp8e4m3fn, 16)
                    w_hi = k.load(wave_lds, g0 + FLAT_GROUP // 2, fp8e4m3fn, 16)
                elif flat:  # permute_weights: the chunk's FLAT_GROUP bytes, lane-major
                    g0 = (tile_idx * (K // CHUNK) + (b0 + u) * (BLOCK // CHUNK) + chunk) * \
                        FLAT_GROUP + lane * FLAT_PIECE
                    w_lo = k.load(a.w, g0, fp8e4m3fn, 16, nontemporal=True)
                    w_hi = k.load(a.w, g0 + FLAT_GROUP // 2, fp8e4m3fn, 16, nontemporal=True)
                else:
                    w_lo = k.load(a.w, (tile + r) * K + kb, fp8e4m3fn, 16, nontemporal=True)
                    w_hi = k.load(a.w, (tile + r + 8) * K + kb, fp8e4m3fn, 16, nontemporal=True)
                xs = None if x_in_lds or probe == "read_w" or not with_x else x_loads(kb)
                loads.append((w_lo, w_hi, xs, kb))
        return loads

    def attach_x(loads):
        return [(w_lo, w_hi, x_loads(kb), kb) for w_lo, w_hi, _, kb in loads]

    def stage_x():
        # the CTA's activations once in LDS: later x reads are LDS-latency, so only weight
        # loads stay in flight in registers
        xl = k.lds("x", bf16, MAX_ROWS * (K + X_PAD))
        per_round = k.W * k.L * 8
        for e0 in k.range(0, R * K, per_round):
            e = e0 + k.thread_id() * 8
            k.store(xl, (e / K) * X_PAD + e, k.load(a.x, e, bf16, 8, mask=e < R * K), mask=e < R * K)
        k.barrier()
        return xl

    def compute(b0, loads, n=unroll):
        if probe in ("read", "read_w", "read_flat"):  # every loaded word folded into one slot: nothing is dead code
            t = total.get()
            acc = k.bitcast(t[0], u32)
            for w_lo8, w_hi8, xs, _ in loads:
                for v in (w_lo8, w_hi8, *(xs or ())):
                    words = k.bitcast(v, u32)
                    for i in range(words.n):
                        acc = acc ^ words[i]
            total.set(k.vec(k.bitcast(acc & 1, f32), *[t[i] for i in range(1, at.c_slots)]))
            return
        for u in range(n):
            acc = k.vec(*[k.const(0.0, f32)] * at.c_slots)
            for chunk in range(BLOCK // CHUNK):
                w_lo8, w_hi8, xs, kb = loads[u * (BLOCK // CHUNK) + chunk]
                if xs is None:
                    xs = [k.load(xl, r * (K + X_PAD) + kb + h * 8, bf16, 8, mask=xrow_ok)
                          for h in range(2)]
                w_lo = k.cast(k.cast(w_lo8, f32), bf16)
                w_hi = k.cast(k.cast(w_hi8, f32), bf16)
                for j in range(4):
                    x_j = [xs[(4 * j + i) // 8][(4 * j + i) % 8] for i in range(4)]
                    p = 4 * j
                    A = k.vec(w_lo[p], w_lo[p + 1], w_hi[p], w_hi[p + 1],
                              w_lo[p + 2], w_lo[p + 3], w_hi[p + 2], w_hi[p + 3])
                    acc = k.mma(at, A, k.vec(*x_j), acc)
            scale = k.load(a.ws, (tile // BLOCK) * blocks + b0 + u, f32)
            total.set(k.fma(acc, scale, total.get()))

    if probe == "empty":
        if pdl:
            k.grid_dep_wait()
    elif ahead:
        # weights[i] issued at block i - ahead, x[i] at block i - 1 (Python-unrolled: a
        # wave's blocks are few and the register ring needs static names)
        weights = {i: issue(first_block + i, with_x=False, n=1)
                   for i in range(min(ahead, per_wave))}
        if pdl:
            k.grid_dep_wait()
        with_x = {0: attach_x(weights.pop(0))}
        for i in range(per_wave):
            if i + ahead < per_wave:
                weights[i + ahead] = issue(first_block + i + ahead, with_x=False, n=1)
            if i + 1 < per_wave:
                with_x[i + 1] = attach_x(weights.pop(i + 1))
            compute(first_block + i, with_x.pop(i), n=1)
    elif single_round:
        # every weight load of the wave goes out FIRST, then the activations are staged
        # under them: one memory round trip per wave (registers hold weights only)
        b0 = first_block
        loads = issue(b0)
        xl = stage_x()
        compute(b0, loads)
    else:
        if x_in_lds:
            xl = stage_x()
        if bulk:
            k.mbar_wait(bar, 0)  # the wave's weights have landed in LDS
        start = first_block
        if pdl:  # the first weights stream under the launch before; x after its end
            first = issue(first_block, with_x=False)
            k.grid_dep_wait()
            compute(first_block, attach_x(first))
            start = first_block + unroll
        for b0 in k.range(start, first_block + per_wave, unroll):
            # `unroll` whole 128-blocks per iteration: all their loads are issued before the
            # first MMA, so more bytes are in flight per lane (Little's law on ~1 us latency)
            compute(b0, issue(b0))
    def store_y(s):
        # D[m][n] = y[n][tile + m]: slots (r, 2q), (r, 2q+1), (r+8, 2q), (r+8, 2q+1)
        for slot, (dm, dn) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            n = q * 2 + dn
            k.store(a.y, n * N + tile + r + dm, s[slot], mask=n < R)

    red = k.lds("red", f32, k.W * k.L * at.c_slots)
    k.store(red, (k.wave_id() * k.L + lane) * at.c_slots, total.get())
    k.barrier()
    with k.if_(k.wave_id().eq(0)):
        s = k.load(red, lane * at.c_slots, f32, at.c_slots)
        for w in range(1, k.W):
            s = s + k.load(red, (w * k.L + lane) * at.c_slots, f32, at.c_slots)
        if ksplit > 1:
            # the tile's last split (a counter, reset by it) sums the partials in split
            # order: the bits do not depend on which split finished last
            k.store(a.partials, ((tile_idx * ksplit + split) * k.L + lane) * at.c_slots, s)
            k.fence("release", "device")
            old = k.atomic("add", a.counters, tile_idx, k.const(1, u32))
            last = (old + 1).eq(ksplit)
            with k.if_(last):
                k.fence("acquire", "device")
                s = k.load(a.partials, (tile_idx * ksplit * k.L + lane) * at.c_slots, f32, at.c_slots)
                for sp in range(1, ksplit):
                    s = s + k.load(a.partials, ((tile_idx * ksplit + sp) * k.L + lane) * at.c_slots,
                                   f32, at.c_slots)
                store_y(s)
                k.store(a.counters, tile_idx, k.const(0, u32), order="relaxed")
        else:
            store_y(s)


def build(target, *, N, K, R, waves=8, unroll=UNROLL, x_in_lds=False, ksplit=1, probe=None,
          flat=False, l2_prefetch=0, bulk=False, pdl=False, ahead=0, ctas_per_sm=1):
    """`flat`: the kernel reads weights in permute_weights' layout (pass permuted bytes);
    `l2_prefetch`: bulk L2 prefetches of the CTA's weights first, in pieces of that many bytes;
    `bulk` (with flat): each wave's weights in one bulk copy into LDS; `pdl`: launchable with
    programmatic dependent launch, the first weights read before grid_dep_wait; `ahead`: the
    software pipeline, weights that many blocks ahead of their MMAs (body's doc);
    `ctas_per_sm` 2: registers bounded so that two CTAs fit an SM (164 tiles on 132 SMs)."""
    return build_kernel("gemv_fp8_mma", body, abi=abi(ksplit), target=target, waves=waves,
                        wave_size=32, ctas_per_sm=ctas_per_sm, N=N, K=K, R=R, unroll=unroll,
                        x_in_lds=x_in_lds, ksplit=ksplit, probe=probe, flat=flat,
                        l2_prefetch=l2_prefetch, bulk=bulk, pdl=pdl, ahead=ahead)


def scratch(N, ksplit, L=32):
    """Zeroed once; every launch leaves the counters at zero again."""
    return dict(partials=np.zeros((N // TILE_N) * ksplit * L * 4, np.float32),
                counters=np.zeros(N // TILE_N, np.uint32))


make_inputs = gemv.make_inputs
reference = gemv.reference
# bf16 x and exact bf16 weights: the tensor core's f32 accumulation of k16 products, then
# fp32 sums: within the CUDA-core GEMV's bound
REL_TOL = gemv.REL_TOL


def check(inp, ref, **_):
    return gemv.check(inp, ref)
