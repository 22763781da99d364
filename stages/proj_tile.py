"""One projection job on CUDA cores / VALU: partial sums of W x over a K-chunk for a tile of
weight rows, every weight load of the job in flight at once (stages/index.py's `ix_proj`;
the scheme of stages/front.py's FrontProj, written here so that front.py stays untouched).

    part[r, n] = sum_{c in [k0, k0 + klen)} W[n, c] (* its 128x128 block scale) * x[r, c]

Lanes: 8 lanes share a weight row (LANES_PER_ROW); lane j8 of the 8 owns the 16 consecutive
elements [16 j8, 16 j8 + 16) of every 128-element K-block: one 16-byte load of FP8 weights, or
two of bf16. A CTA of W waves of L lanes covers rpp = W*L/8 rows a pass (32 on every GPU); a
row group of P passes covers P*rpp rows.

Schedule of a job (why it is fast):
  1. every weight load of the job is issued first (groups x passes x 128-blocks, 16 bytes
     each, nontemporal: the weights are read once), so a lane has all of them in flight; they
     sit in a ring of lane variables, one slot a block, that a runtime block loop shifts by
     one (unrolled, LLVM would hoist every block's LDS reads and converted weights at once,
     past the register file);
  2. the activations of the chunk, all R rows, are staged once in LDS as f32 while the weights
     travel (`stage`; the slot order below makes the 8 lanes of a row read 8 consecutive
     16-byte pieces: no bank conflict);
  3. for each 128-block and 4-wide piece q: every pass's 4 weights are converted (and the block
     scale folded in, exact for FP8), then for each row r ONE 16-byte LDS read of the
     activations feeds 4 FMAs in every pass: the activation reads are shared by all the
     passes of all the groups (the LDS traffic is 1/P of the weights' FMAs);
  4. the 8 lanes of a row are reduced by a reduce-scatter of lane swaps (4, 2, 1): with R
     rows, 7 swaps give each of the 8 lanes one row's sum (R=8), instead of 3 R.
Every sum is in a fixed order (a lane's FMA chain in K order, the 8 lanes in a fixed tree):
the same bits on every run and every schedule.

The job's load count (sum over groups of passes x blocks x loads a block) is what a lane
holds in registers: the caller sizes jobs to at most LOADS_IN_FLIGHT (`loads_per_lane`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from monokernel.types import bf16, f32, i32, u32

BLOCK = 128  # FP8 weight scale block (128 x 128), and the K extent of one lane group's step
LANES_PER_ROW = 8  # lanes sharing one weight row: 8 x 16 elements = one 128-block
ELEMS = BLOCK // LANES_PER_ROW  # 16: K elements a lane owns in each block
PIECE = 4  # f32 activations a lane reads from LDS at once (16 bytes)
VEC_BYTES = 16  # bytes a weight load moves
LOADS_IN_FLIGHT = 12  # 16-byte weight loads a lane may hold (48 VGPRs): the job size limit


def rows_per_pass(threads: int) -> int:
    """Weight rows a CTA of `threads` lanes covers at once."""
    if threads % LANES_PER_ROW:
        raise ValueError(f"proj_tile: {threads} threads do not split into rows of {LANES_PER_ROW}")
    return threads // LANES_PER_ROW


def loads_per_block(dt) -> int:
    """16-byte loads one lane issues per 128-block of a row: 1 for FP8, 2 for bf16."""
    return ELEMS * dt.bytes // VEC_BYTES


def loads_per_lane(groups_passes, blocks: int) -> int:
    """[(passes, dtype)] of a job's row groups and its K-blocks -> the lane's load count."""
    return sum(P * blocks * loads_per_block(dt) for P, dt in groups_passes)


@dataclass
class Group:
    """Rows [row0, row0 + rows) of one weight matrix W [*, K] (row-major), P = passes of the
    tile. `scale(pass_row0, kb)` -> the uniform f32 block scale of the rows of a pass (a pass
    stays inside one 128-row block) at K-block kb, or None for unscaled weights.
    `emit(n, r, value, mask)`: n the row inside the group (per-lane i32), r the activation
    row (per-lane i32), mask the lanes that own a sum (rows past `rows` already masked)."""
    ptr: object
    dtype: object
    K: int
    rows: int
    passes: int
    row0: object
    emit: Callable
    scale: Callable | None = None


def act_slot(w):
    """The LDS slot of activation element w (an i32 value, multiple of 4) of a chunk: inside
    each 128-block, the 4-wide piece q of lane j8's 16 elements goes to q * 32 + j8 * 4, so the
    8 lanes of a row read 8 consecutive 16-byte pieces."""
    e = w % BLOCK
    return (w - e) + ((e % ELEMS) / PIECE) * (LANES_PER_ROW * PIECE) + (e / ELEMS) * PIECE


def stage_acts(k, act, tid, rows: int, klen: int, load4):
    """The activations of a chunk, every row, into LDS `act` [rows, klen] f32 in act_slot
    order: barrier (the CTA's previous job is done reading), stores, barrier. `load4(r, kk)`
    gives f32x4 of x[r, k0 + kk : k0 + kk + 4] (kk an i32 multiple of 4)."""
    k.barrier()
    nvec = rows * klen // PIECE
    nthr = k.W * k.L
    for it in range(-(-nvec // nthr)):
        v = it * nthr + tid
        m = v < nvec if nvec % nthr else None
        vc = k.min(v, nvec - 1) if m is not None else v
        r = vc / (klen // PIECE)
        kk = (vc % (klen // PIECE)) * PIECE
        k.store(act, r * klen + act_slot(kk), load4(r, kk), mask=m)
    k.barrier()


def _issue(k, g: Group, wrow, j8, k0, blocks, rpp):
    """Every weight load of group g: [block][pass] -> list of u32x4 (1 FP8, 2 bf16)."""
    nl = loads_per_block(g.dtype)
    per = VEC_BYTES // g.dtype.bytes
    bases = []
    for ps in range(g.passes):
        n = k.min(wrow + ps * rpp, g.rows - 1) if (ps + 1) * rpp > g.rows else wrow + ps * rpp
        bases.append((g.row0 + n) * g.K + k0 + j8 * ELEMS)
    return [[[k.bitcast(k.load(g.ptr, base + b * BLOCK + i * per, g.dtype, per,
                                nontemporal=True), u32) for i in range(nl)]
             for base in bases] for b in range(blocks)]


def _piece(k, g: Group, words, q):
    """f32x4 of weight piece q (elements 4q .. 4q+3 of the lane's 16) of one block."""
    if g.dtype.bytes == 1:
        return k.cast(k.bitcast(words[0][q], g.dtype, PIECE), f32)
    v = words[q // 2]
    return k.cast(k.bitcast(k.vec(v[2 * (q % 2)], v[2 * (q % 2) + 1]), bf16, PIECE), f32)


def reduce_scatter(k, lane, vals):
    """Sum each of the R values over the 8 lanes of a row group (lane bits 4, 2, 1), R in
    {1, 2, 4, 8}: (sum of row r_own, r_own, owner mask). While several values remain, a swap
    halves them (lane bit set: keep the upper half, send the lower); then plain butterflies."""
    R = len(vals)
    if R not in (1, 2, 4, 8):
        raise ValueError(f"proj_tile: {R} rows; 1, 2, 4 or 8")
    idx_bits = 0
    for m in (4, 2, 1):
        if len(vals) > 1:
            half = len(vals) // 2
            bit = (lane & m).ne(0)
            keep = [k.select(bit, vals[half + i], vals[i]) for i in range(half)]
            send = [k.select(bit, vals[i], vals[half + i]) for i in range(half)]
            vals = [keep[i] + k.lane_swap(send[i], m) for i in range(half)]
            idx_bits += 1
        else:
            vals = [vals[0] + k.lane_swap(vals[0], m)]
    j8 = lane & (LANES_PER_ROW - 1)
    shift = 3 - idx_bits  # the row is the top idx_bits bits of j8
    return vals[0], j8 >> shift, (j8 & ((1 << shift) - 1)).eq(0)


def tile_partials(k, lane, groups, act, k0, klen: int, rows: int, stage):
    """The job (module doc): `groups` [Group], K-chunk [k0, k0 + klen) (k0 uniform i32, klen
    a multiple of 128), `rows` activation rows staged by `stage()` into LDS `act` (stage_acts),
    after every weight load is issued. Emits every (group row, activation row) sum."""
    if klen % BLOCK:
        raise ValueError(f"proj_tile: chunk {klen} is not whole {BLOCK}-blocks")
    rpp = rows_per_pass(k.W * k.L)
    blocks = klen // BLOCK
    j8 = lane & (LANES_PER_ROW - 1)
    wrow = k.wave_id() * (k.L // LANES_PER_ROW) + (lane >> 3)  # this lane's row in a pass
    # every load of the job in flight; a ring of lane variables, one slot a block, that the
    # block loop shifts by one (a runtime loop: unrolled, LLVM hoists every block's LDS reads
    # and converted weights at once, past the register file)
    loads = [_issue(k, g, wrow, j8, k0, blocks, rpp) for g in groups]
    flat = [[w for gl in loads for w_ps in gl[b] for w in w_ps] for b in range(blocks)]
    ring = [[k.lane_var(w) for w in flat[b]] for b in range(blocks)]
    stage()
    zero = k.const(0.0, f32)
    acc = [[[k.lane_var(zero) for _ in range(rows)] for _ in range(g.passes)] for g in groups]
    kb0 = k0 // BLOCK if isinstance(k0, int) else k0 / BLOCK

    def block(b, words):
        """Block b (i32) of the chunk, its weights `words` (flat order of `flat`)."""
        it = iter(words)
        cur = [[[next(it) for _ in range(loads_per_block(g.dtype))] for _ in range(g.passes)]
               for g in groups]
        scales = [[g.scale(ps * rpp, kb0 + b) if g.scale else None for ps in range(g.passes)]
                  for g in groups]
        sums = [[[v.get() for v in row] for row in ga] for ga in acc]
        for q in range(PIECE):
            ws = []
            for gi, g in enumerate(groups):
                for ps in range(g.passes):
                    w4 = _piece(k, g, cur[gi][ps], q)
                    sc = scales[gi][ps]
                    ws.append((gi, ps, w4 if sc is None else w4 * sc))
            for r in range(rows):
                av = k.load(act, r * klen + b * BLOCK + q * (LANES_PER_ROW * PIECE) + j8 * PIECE,
                            f32, PIECE)
                for gi, ps, w4 in ws:
                    a_ = sums[gi][ps][r]
                    for e in range(PIECE):
                        a_ = k.fma(w4[e], av[e], a_)
                    sums[gi][ps][r] = a_
        for gi, ga in enumerate(acc):
            for ps, row in enumerate(ga):
                for r, v in enumerate(row):
                    v.set(sums[gi][ps][r])

    if blocks == 1:
        block(k.const(0, i32), [v.get() for v in ring[0]])
    else:
        for b in k.range(blocks, unroll=False):
            cur = [v.get() for v in ring[0]]
            for d in range(blocks - 1):
                for i, v in enumerate(ring[d]):
                    v.set(ring[d + 1][i].get())
            block(b, cur)
    acc = [[[v.get() for v in row] for row in ga] for ga in acc]
    for gi, g in enumerate(groups):
        for ps in range(g.passes):
            s, r_own, own = reduce_scatter(k, lane, acc[gi][ps])
            n = wrow + ps * rpp
            m = own if (ps + 1) * rpp <= g.rows else own & (n < g.rows)
            g.emit(n, r_own, s, m)
