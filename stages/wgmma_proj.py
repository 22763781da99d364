"""An FP8 projection tile on Hopper's warpgroup MMA: partial sums of Y = Wdq A^T for up to 8
activation rows, with no weight conversion.

Why: the bf16 tile (stages/mma_tile.py) converts every e4m3 weight to bf16 (~2.5
instructions a weight) and feeds x * g as two bf16 halves (two MMA passes at 8 rows): the
front's projection loop is bound by that instruction stream, not by its weight bytes
(bench/NOTES.md v16, v21: 294 instructions a 128-k block, 160 of them the conversion). Here
the weights are what the tensor cores read as they are: `wgmma m64nNk32 e4m3` with the tile's
64 weight rows as the register A operand, loaded straight from global memory (two 16-byte
nontemporal loads a row a block a lane, the block's K permuted as mma_tile.a_permutation
derives from the atom's A map), and the activations as B in shared memory.

Activations as e4m3 terms (the stated precision choice; the reference follows it:
`reference_terms`). B must be e4m3 too, so each row's a = x * g over the job's chunk is
scaled by a power of two S_r that puts its largest |a| in [2^ACT_TOP, 2^(ACT_TOP + 1)), and
written as `terms` e4m3 digits

    u_0 = a S_r,   t_j = e4m3_rne(u_j),   u_{j+1} = (u_j - t_j) 2^TERM_BITS,

    a = (t_0 + t_1 2^-4 + t_2 2^-8 + ... + u_T 2^-4T) / S_r      (every step exact in f32)

An RNE digit keeps 4 significant bits and its remainder is at most half its ulp, 2^-4 of the
value, so each term adds ~4 bits: 1 term is the serving stacks' per-128 activation
quantization (DeepGEMM's), 2 about bf16's precision of h (which the model itself rounds to),
3 ~12 bits, 4 all 16 bits of x * g in the normal range. Remainders never overflow
(|u_j| < 2^(ACT_TOP + 1) = 256 < 448) and below e4m3's subnormals the error is absolute
(2^-10 of S_r's unit per term step). Term j of row r is B column 8 j + r (rows R..7 zero),
so N = 8 x terms and a lane's accumulator holds every term of its rows (no lane moves).

Accumulation: a block's 4 wgmmas (k = 128) start from zero and its sum is scaled by the
block's weight scale into an f32 total (total = fma(D, s_w, total)): the H200's wgmma sums
e4m3 products with ~14 significant bits (monokernel/backend/nvptx.py), so, as DeepGEMM does,
no chain is longer than one scale block; blocks alternate between two accumulators so block
i+1's chain runs while block i is scaled (wgmma_wait(1)). The reference sums exactly: the
interpreter matches it to f32 rounding, the H200 to `HW_REL_TOL`.

One warpgroup (4 warps of 32 lanes) a tile of 64 rows: sm_90a and the interpreter only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monokernel.atoms.base import SW128_ATOM_BYTES, desc_units
from monokernel.atoms.nvidia import wgmma_e4m3
from monokernel.ir import MBARRIER_BYTES, TMA_SWIZZLE_128B, TensorMap
from monokernel.types import f32, fp8e4m3fn, i32, u8, u32, u64

from .mma_tile import BLOCK, LOAD_BYTES, PIECE_K, LaneFn, a_permutation, range_scales

TILE_M = 64  # weight rows a tile: the wgmma's M
GROUP_LANES = 128  # a warpgroup
WARP = 32
TERM_COLS = 8  # B columns a term takes: one per activation row (rows R..7 are zeros)
TERM_BITS = 4  # an RNE e4m3 digit's remainder is at most 2^-4 of its value
ACT_TOP = 7  # a row's largest |u_0| in [2^7, 2^8): below e4m3fn's 448 with room for rounding
MAX_TERMS = 4  # 4 x 4 bits hold x * g's 16 significant bits
PREFETCH_PIECE = 256  # bytes a bulk L2 prefetch asks (a row's chunk in pieces)
WEIGHT_DEPTH_BLOCKS = 4  # weight blocks a lane keeps in flight (4 loads of 4 registers each)
# the H200's wgmma sums e4m3 products with ~14 significant bits, a block's 4 instructions
# into a fresh accumulator: a partial sum's max-norm error against the exact sum
HW_REL_TOL = 2.0 ** -10


@dataclass(frozen=True)
class WgTiling:
    """The tile's static facts, derived from the atom's maps (module doc)."""
    rows: int
    terms: int
    n: int  # B columns: TERM_COLS x terms
    perm: tuple  # [c * 32 + kappa] -> block k
    lane_k: int  # k of a row a lane holds a block (32)
    a_rows: tuple  # [h] LaneFn over a warp's lanes: the lane's h-th row of its warp's 16
    a_window: LaneFn  # the lane's lane_k window of each row
    a_words: tuple  # [c][reg] -> (h, word of the lane's words of row h in the block)
    piece_words: tuple  # [run] LaneFn over a block's pieces: u32 word of the piece's run
    col_group_words: int  # u32 words from column n to n + 8 (the next term)
    col_row_words: int  # ... and from column n to n + 1 (the next row)
    pad_words: tuple  # [half] word of a column's 16 k of a chunk (zeroing rows >= R)
    c_row: LaneFn  # over the warpgroup's 128 lanes: accumulator row of slot 0
    c_col: LaneFn
    slots: tuple  # ((row offset, row of the activations' lane part offset, [slot of term j]), ...)

    @property
    def atom(self):
        return wgmma_e4m3(self.n)

    @property
    def chunks(self):  # wgmmas a block
        return BLOCK // self.atom.k

    @property
    def chunk_words(self):  # u32 words of one wgmma's B (N x 32 bytes)
        return self.n * self.atom.k // u32.bytes

    @staticmethod
    def of(rows: int, terms: int, natural: bool = False) -> "WgTiling":
        """`natural`: the block's K in its own order (the weights read from LDS as TMA placed
        them: `TmaWeights`), not permuted for the lanes' contiguous register loads; B is
        staged in the same order either way."""
        if not 1 <= terms <= MAX_TERMS:
            raise ValueError(f"wgmma_proj: {terms} activation terms; 1 .. {MAX_TERMS}")
        if not 1 <= rows <= TERM_COLS:
            raise ValueError(f"wgmma_proj: {rows} rows; at most {TERM_COLS}")
        n = TERM_COLS * terms
        at = wgmma_e4m3(n)
        perm, held, window, lane_k, a_words = a_permutation(at, WARP)
        if natural:
            perm = tuple(range(BLOCK))
        ar = at.a_rows()
        if any((ar[WARP * w:WARP * (w + 1)] != ar[:WARP] + 16 * w).any() for w in range(4)):
            raise ValueError(f"{at.name}: warp w's A rows are not warp 0's + 16 w")
        # B: the byte of (atom k kappa, column n) in a chunk's tile; a piece of PIECE_K
        # consecutive block k (one staging load) lands in runs of consecutive bytes
        table = at.b_smem.table()  # [K, N] bytes
        if not (table == table[:, :1] + table[:1, :]).all():
            raise ValueError(f"{at.name}: B's byte offsets are not k part + column part")
        inv = {p: divmod(kap, at.k) for kap, p in enumerate(perm)}  # block k -> (chunk, kappa)
        runs_of = []
        for q in range(BLOCK // PIECE_K):
            offs = [inv[q * PIECE_K + j][0] * at.n * at.k + int(table[inv[q * PIECE_K + j][1], 0])
                    for j in range(PIECE_K)]
            runs = [offs[i:i + 4] for i in range(0, PIECE_K, 4)]
            for r_ in runs:
                if r_ != list(range(r_[0], r_[0] + 4)) or r_[0] % 4:
                    raise ValueError(f"{at.name}: piece {q}'s bytes {offs} are not aligned words")
            runs_of.append([r_[0] // 4 for r_ in runs])
        piece_words = tuple(LaneFn.of([runs_of[q][i] for q in range(len(runs_of))])
                            for i in range(len(runs_of[0])))
        wide = wgmma_e4m3(max(n, 2 * TERM_COLS)).b_smem.table()  # (N = 8: the next group too)
        gw, rw = int(wide[0, TERM_COLS]) // 4, int(wide[0, 1]) // 4
        if any(int(wide[0, c]) != 4 * (c // TERM_COLS * gw + c % TERM_COLS * rw)
               for c in range(wide.shape[1])) or (wide[:, :n] != table).any():
            raise ValueError(f"{at.name}: B's column offsets are not 8-column groups of rows")
        half = 16  # a core matrix's k: 16 bytes of a column lie together
        pad_words = tuple(int(table[h * half, 0]) // 4 for h in range(at.k // half))
        for h in range(at.k // half):
            if list(table[h * half:(h + 1) * half, 0]) != list(range(table[h * half, 0],
                                                                       table[h * half, 0] + half)):
                raise ValueError(f"{at.name}: a column's k {h * half}.. are not 16 bytes together")
        # accumulator: row / column = lane part + slot part; column 8 j + r
        cr, cc = at.c_rows(), at.c_cols()
        ro = cr[0] - cr[0, 0]
        co = cc[0] - cc[0, 0]
        if not ((cr == cr[:, :1] + ro).all() and (cc == cc[:, :1] + co).all()):
            raise ValueError(f"{at.name}: D rows/columns are not lane part + slot part")
        if (cc[:, :1] + co % TERM_COLS >= TERM_COLS).any():
            raise ValueError(f"{at.name}: a lane's slots of one term cross into the next")
        groups: dict = {}
        for s in range(len(ro)):
            j, rr = divmod(int(co[s]), TERM_COLS)
            groups.setdefault((int(ro[s]), rr), {})[j] = s
        slots = tuple((ro_, rr, tuple(g[j] for j in range(terms)))
                      for (ro_, rr), g in sorted(groups.items()))
        return WgTiling(rows, terms, n, perm, lane_k,
                        tuple(LaneFn.of([held[ln][h] for ln in range(WARP)])
                              for h in range(len(held[0]))),
                        LaneFn.of(window), a_words, piece_words, gw, rw, pad_words,
                        LaneFn.of(cr[:, 0]), LaneFn.of(cc[:, 0]), slots)


_CACHE: dict = {}


def tiling(rows: int, terms: int, natural: bool = False) -> WgTiling:
    key = (rows, terms, natural)
    if key not in _CACHE:
        _CACHE[key] = WgTiling.of(rows, terms, natural)
    return _CACHE[key]


@dataclass(frozen=True)
class TmaWeights:
    """The tile's weights by TMA into LDS, read there by the SS wgmma (A through a 128B-
    swizzled descriptor), instead of loaded into registers. Why: the staging's proxy fence
    (MEMBAR.ALL.CTA) waits for every access its thread has in flight, so register weight
    loads issued before it delayed the staging (H200: staged 5.6 us into the job) and issued
    after it started the stream ~4 us late (bench/NOTES.md v26); a tensor copy is no access
    of the thread's, so every block of the job is asked for at the job's start and the
    staging runs under the stream. `tmap`: the kernel's `weight_map` argument, `ring` /
    `ring_name`: u8 LDS of ring_bytes(blocks) aligned to SW128_ATOM_BYTES, `bars`: `blocks`
    mbarriers (`of`)."""
    tmap: str
    ring: object
    ring_name: str
    bars: object

    @staticmethod
    def of(k, tmap: str, blocks: int, prefix: str) -> "TmaWeights":
        """The job's ring (`prefix`_ring) and mbarriers (`prefix`_bars) in k's LDS: allocated
        at the first call, pointed to again at a later one (a use outside the allocation's
        region: a pdl prefetch's boxes allocate them, the job waits on them)."""
        ring, bars = f"{prefix}_ring", f"{prefix}_bars"
        if k.has_lds(ring):
            return TmaWeights(tmap, k.lds_ref(ring), ring, k.lds_ref(bars))
        return TmaWeights(tmap, k.lds(ring, u8, ring_bytes(blocks), align=SW128_ATOM_BYTES),
                          ring, k.mbarrier(bars, blocks))


def weight_map(of: str, row_bytes: int) -> TensorMap:
    """The tensor map TmaWeights copies from: the weights `of` as rows of `row_bytes`, a box
    of one tile's TILE_M rows of one BLOCK (its k), 128B-swizzled as the SS wgmma reads A."""
    return TensorMap(of=of, row_bytes=row_bytes, box_rows=TILE_M, box_row_bytes=BLOCK,
                     swizzle=TMA_SWIZZLE_128B)


def ring_bytes(blocks: int) -> int:
    """LDS of a job's weight boxes (TmaWeights): every block of the job at once."""
    return blocks * TILE_M * BLOCK


def b_lds_words(T: WgTiling, chunk: int) -> int:
    """u32 words of the staged B: every wgmma of the chunk's blocks, N x 32 bytes each."""
    return chunk // T.atom.k * T.chunk_words


def max_lds_words(T: WgTiling, chunk: int) -> int:
    """u32 words of the rows' maxima table: a word per row per wave-wide run of pieces."""
    return T.rows * max(1, chunk // PIECE_K // WARP)


@dataclass(frozen=True)
class Crew:
    """The threads that stage the activations: the whole CTA (one warpgroup), or the second
    warpgroup of two (warp-specialized: the first holds the weights and runs the wgmmas, and
    never executes the staging's proxy fence, which waits for every access in flight)."""
    tid: object  # i32 thread index within the crew
    threads: int
    sync: object  # () -> a barrier of the crew's warps


STAGED_BARRIER = 1  # named barrier: the producers' B is fenced (warp-specialized form)
MAXIMA_BARRIER = 2  # named barrier of the producers: their maxima are stored


def fits(chunk: int) -> bool:
    """Whether a K split of `chunk` k is whole BLOCK-blocks whose pieces fill whole warps."""
    return chunk % BLOCK == 0 and chunk // PIECE_K % WARP == 0


def check(k, T: WgTiling, chunk: int):
    if k.target.name not in ("sm_90a", "interp") or k.L != WARP or \
            k.W not in (GROUP_LANES // WARP, 2 * GROUP_LANES // WARP):
        raise ValueError(f"wgmma_proj: one warpgroup of 32-lane warps (or two: the second "
                         f"stages) on sm_90a (or the interpreter); this kernel: "
                         f"{k.target.name}, {k.W} waves of {k.L}")
    if not fits(chunk):
        raise ValueError(f"wgmma_proj: a chunk of {chunk} k; whole {BLOCK}-blocks whose pieces "
                         f"fill whole warps ({PIECE_K * WARP} k)")


def _stage(k, T, b_lds, mx_lds, chunk, pending, value8, crew):
    """Store the job's activations as e4m3 terms (module doc) from the loads `pending`
    (load_pieces); B is ready for the wgmmas after this function's proxy fence and a CTA
    barrier of the caller's. The caller's CTA barrier before it ended the previous job's
    reads of both tables. The values
    are formed twice (for the maxima, then for the terms) from the loaded bf16 words, which
    hold half the registers across the barrier."""
    R = T.rows
    per_row = chunk // PIECE_K  # pieces of a row
    runs = per_row // WARP  # wave-wide runs of a row (the maxima table's words a row)
    for v, m, piece, shared in pending:
        a = value8(piece, shared)
        mx = k.abs(a[0])
        for j in range(1, a.n):
            mx = k.max(mx, k.abs(a[j]))
        mx = k.wave_max(mx)  # a wave's pieces lie in one row (check(): whole warps a row)
        lead = k.lane_id().eq(0)
        k.store(mx_lds, k.min(v / WARP, R * runs - 1), k.bitcast(mx, u32),
                mask=lead if m is None else lead & m)
    crew.sync()  # every run's maximum
    for v, m, piece, shared in pending:
        r = k.min(v / per_row, R - 1)
        bits = k.load(mx_lds, r * runs, u32)
        for q in range(1, runs):
            bits = k.max(bits, k.load(mx_lds, r * runs + q, u32))
        scale, _ = range_scales(k, bits, ACT_TOP)
        pq = v % per_row
        blk, q = pq / (BLOCK // PIECE_K), pq % (BLOCK // PIECE_K)
        base = blk * (T.chunks * T.chunk_words) + r * T.col_row_words
        words = [base + fn.emit(k, q) for fn in T.piece_words]
        u = value8(piece, shared) * scale
        for j in range(T.terms):
            t8 = k.cast(u, fp8e4m3fn)
            tw = k.bitcast(t8, u32, PIECE_K // 4)
            for i, w in enumerate(words):
                k.store(b_lds, w + j * T.col_group_words if j else w, tw[i], mask=m)
            if j + 1 < T.terms:  # the remainder, exact in f32, scaled up by a digit
                u = (u - k.cast(t8, f32)) * float(1 << TERM_BITS)
    _zero_pad(k, T, b_lds, chunk, crew)
    with k.async_proxy_lds():  # B is read next by the wgmmas (the async proxy): this thread's
        k.wgmma_fence()  # stores fenced for it; the caller's CTA barrier makes it the CTA's


def _zero_pad(k, T, b_lds, chunk, crew):
    """Zeros in the columns of rows R..7 of every term: the wgmma reads all N columns, and a
    job may not read LDS it did not write (the interpreter's poison between jobs)."""
    R = T.rows
    if R == TERM_COLS:
        return
    pads, halves = TERM_COLS - R, len(T.pad_words)
    n = chunk // T.atom.k * T.terms * pads * halves  # 16-byte stores
    nthr, tid = crew.threads, crew.tid
    zero = k.vec(*[k.const(0, u32)] * 4)
    for it in range(-(-n // nthr)):
        i = it * nthr + tid
        m = i < n if n % nthr else None
        if m is not None:
            i = k.min(i, n - 1)
        hf, rest = i % halves, i / halves
        rp, rest = rest % pads, rest / pads
        j, c = rest % T.terms, rest / T.terms
        word = (c * T.chunk_words + j * T.col_group_words + (rp + R) * T.col_row_words +
                k.select(hf.eq(0), k.const(T.pad_words[0], i32), k.const(T.pad_words[-1], i32)))
        k.store(b_lds, word, zero, mask=m)


def load_pieces(k, T: WgTiling, chunk: int, load_row8, load_shared8, crew):
    """Issue the staging's loads: `load_row8(r, kk, mask)` loads row r's part of the values
    k0 + kk .. + 8 of the job's chunk (x), `load_shared8(kk, mask)` the part every row shares
    (g): loaded once for all of a thread's pieces at the same kk (every piece when a chunk's
    pieces are a multiple of the CTA's threads, or divide them). Returns the pending pieces
    (v, mask, row part, shared part) for _stage."""
    per_row = chunk // PIECE_K
    nthr, tid = crew.threads, crew.tid
    nv = T.rows * per_row
    same_kk = per_row % nthr == 0 or nthr % per_row == 0
    shared: dict = {}
    out = []
    for it in range(-(-nv // nthr)):
        v = it * nthr + tid
        m = v < nv if nv % nthr else None
        if same_kk:  # this piece's kk: a static offset + the thread's own
            key = it * nthr % per_row if per_row % nthr == 0 else 0
            pq = (tid + key if key else tid) if per_row % nthr == 0 else tid % per_row
        else:
            key, pq = it, v % per_row
        kk = pq * PIECE_K
        if load_shared8 is not None and key not in shared:
            shared[key] = load_shared8(kk, m if not same_kk else None)
        out.append((v, m, load_row8(v / per_row, kk, m),
                    shared.get(key) if load_shared8 is not None else None))
    return out


def project(k, T: WgTiling, *, w, w_stride: int, scale, scale_stride: int, row0, k0, kb0,
            blocks: int, b_lds, b_name: str, mx_lds, load_row8, value8, emit, load_shared8=None,
            staged=None, depth: int = WEIGHT_DEPTH_BLOCKS, prefetch: bool = False,
            tma: TmaWeights | None = None, tma_issued=None):
    """The tile's partial sums (module doc): out[m, r] = sum over the job's blocks of
    Wdq[row0 + m, k] * a[r, k] for the 64 rows from row0 (a multiple of 64).

    w, scale      fp8 e4m3fn weights [.., w_stride] and their fp32 128 x 128 block scales
                  (scale_stride a row); kb0: the job's first scale column (k0 / 128)
    b_lds, mx_lds u32 LDS of b_lds_words / max_lds_words (b_name: b_lds's allocation, for
                  the wgmma descriptors)
    load_row8, load_shared8, value8  the activations (load_pieces): value8(row part,
                  shared part) -> the f32 x 8 values
    emit(m, r, v, mask)  per lane: output row m (i32), activation row r, the f32 sum v
    staged()      called once the activations are staged (a phase mark)
    depth         weight blocks in flight ahead of the one summed
    prefetch      the tile's weight rows asked of the L2 (bulk prefetches) before the staging,
                  whose loads then find them there
    tma           the weights by TMA into LDS (TmaWeights; T of natural K order; one
                  warpgroup): `w`, `w_stride`, `depth` and `prefetch` then unused
    tma_issued    uniform i1 (or None: never): the boxes were asked for already (issue_boxes,
                  before a pdl wait), so the job only waits for them"""
    at = T.atom
    check(k, T, blocks * BLOCK)
    if tma is not None:
        _project_tma(k, T, tma, scale=scale, scale_stride=scale_stride, row0=row0, k0=k0,
                     kb0=kb0, blocks=blocks, b_lds=b_lds, b_name=b_name, mx_lds=mx_lds,
                     load_row8=load_row8, value8=value8, emit=emit, load_shared8=load_shared8,
                     staged=staged, issued=tma_issued)
        return
    chunk = blocks * BLOCK
    lane, wave = k.lane_id(), k.wave_id()
    rows_l = [row0 + wave * (TILE_M // 4) + fn.emit(k, lane) for fn in T.a_rows]
    win = T.a_window.emit(k, lane) * T.lane_k
    nl = T.lane_k // LOAD_BYTES  # 16-byte loads a row a block
    srow = (row0 / BLOCK) * scale_stride + kb0  # the tile lies in one 128-row scale block

    def loads(i):
        base = k0 + i * BLOCK + win
        ws = [k.bitcast(k.load(w, r * w_stride + base + u * LOAD_BYTES if u else
                               r * w_stride + base, fp8e4m3fn, LOAD_BYTES, nontemporal=True), u32)
              for r in rows_l for u in range(nl)]
        return ws, k.load(scale, srow + i, f32)

    depth = max(1, min(depth, blocks))
    if prefetch:  # the tile's weights toward the L2 while the CTA stages (no registers held)
        k.prefetch_rows_l2(w, row0 * w_stride + k0, TILE_M, chunk, w_stride, PREFETCH_PIECE)

    def _chain(pre):
        """The blocks' wgmma chains (B staged and fenced), the sums scaled, emitted."""
        if staged:
            staged()
        b0 = k.lds_offset(b_name)

        def chain(i, zero):
            if i + depth < blocks:
                pre[i + depth] = loads(i + depth)
            ws, sc = pre.pop(i)
            words = [[ws[h * nl + u][x] for u in range(nl) for x in range(LOAD_BYTES // 4)]
                     for h in range(len(rows_l))]
            k.wgmma_fence()
            acc = zero
            for c in range(T.chunks):
                A = k.bitcast(k.vec(*[words[h][x] for h, x in T.a_words[c]]), at.a_dtype,
                              at.a_slots)
                desc = at.smem_descriptor(b0 + ((i * T.chunks + c) * T.chunk_words) * u32.bytes)
                acc = k.wgmma(at, A, k.const(desc, u64), acc)
            return acc, sc

        _emit(k, T, mx_lds, chunk, row0, _scaled_chains(k, at, blocks, chain), emit)

    k.barrier()  # the previous job is done reading B and the maxima
    wg = GROUP_LANES // WARP
    if k.W == wg:
        crew = Crew(k.wave_id() * k.L + k.lane_id(), k.W * k.L, k.barrier)
        pending = load_pieces(k, T, chunk, load_row8, load_shared8, crew)
        _stage(k, T, b_lds, mx_lds, chunk, pending, value8, crew)
        # the first weight loads AFTER the staging's proxy fence: the fence waits for every
        # access the thread has in flight (MEMBAR.ALL.CTA), weights included (H200: staged
        # 5.6 us into the job with the weights issued first, bench/NOTES.md v26)
        pre = {i: loads(i) for i in range(depth)}
        k.barrier()  # every thread's B stores, fenced for the async proxy
        _chain(pre)
        return
    with k.if_(wave >= wg):  # producers: stage, fence, arrive
        crew = Crew((wave - wg) * k.L + lane, wg * k.L,
                    lambda: k.named_barrier(MAXIMA_BARRIER, wg))
        pending = load_pieces(k, T, chunk, load_row8, load_shared8, crew)
        _stage(k, T, b_lds, mx_lds, chunk, pending, value8, crew)
        k.named_barrier(STAGED_BARRIER, k.W, arrive=True)
    with k.if_(wave < wg):  # consumers: weights in flight from the job's start
        pre = {i: loads(i) for i in range(depth)}
        k.named_barrier(STAGED_BARRIER, k.W)
        _chain(pre)


def issue_boxes(k, tma: TmaWeights, row0, k0, blocks: int):
    """Wave 0 sets up the job's mbarriers and asks for every block's box (TILE_M rows from
    row0 x BLOCK bytes from k0 + i BLOCK, 128B-swizzled) at once; a CTA barrier between, so
    no wave waits on a barrier not yet set up. Call it from every wave."""
    issuer = k.wave_id().eq(0)
    bars = [k.ptr_add(tma.bars, i * MBARRIER_BYTES) for i in range(blocks)]
    box = TILE_M * BLOCK
    with k.if_(issuer):
        for bar in bars:
            k.mbar_init(bar, 1)
    k.barrier()  # the mbarriers are set up before any wave waits on them
    with k.if_(issuer):
        for i, bar in enumerate(bars):
            k.mbar_arrive_tx(bar, box)
            k.tma_load_rows(k.ptr_add(tma.ring, i * box), tma.tmap, row0, bar,
                            col=k0 + i * BLOCK)


def _project_tma(k, T, tma, *, scale, scale_stride, row0, k0, kb0, blocks, b_lds, b_name,
                 mx_lds, load_row8, value8, emit, load_shared8, staged, issued=None):
    """project() with the weights by TMA (TmaWeights): wave 0 sets up a job's mbarriers and
    asks for every block's box (TILE_M rows x BLOCK bytes, 128B-swizzled) at once; the CTA
    stages B under the stream; block i's chain waits for its box and reads A from it (chunk
    c at + c x 32 bytes of the swizzled rows, as a page of keys is read: index_score_sm90)."""
    if T.perm != tuple(range(BLOCK)):
        raise ValueError("wgmma_proj: weights by TMA are read in their own K order; stage B "
                         "with tiling(..., natural=True)")
    if k.W != GROUP_LANES // WARP:
        raise ValueError(f"wgmma_proj: weights by TMA in one warpgroup a CTA; this kernel: "
                         f"{k.W} waves")
    chunk = blocks * BLOCK
    box = TILE_M * BLOCK
    ss = wgmma_e4m3(T.n, a_smem=True, a_sw128=True)
    issuer = k.wave_id().eq(0)
    bars = [k.ptr_add(tma.bars, i * MBARRIER_BYTES) for i in range(blocks)]
    k.barrier()  # the previous job is done reading B, the maxima and the ring
    # the staging's loads are asked for before the weights: behind the grid's 16 MB of
    # boxes they waited for most of the stream (H100: staged 5.8 us into the job, v50)
    crew = Crew(k.wave_id() * k.L + k.lane_id(), k.W * k.L, k.barrier)
    pending = load_pieces(k, T, chunk, load_row8, load_shared8, crew)
    if issued is None:
        issue_boxes(k, tma, row0, k0, blocks)
    else:  # (before a pdl wait, by the stage's prefetch_lds: only waited for here)
        with k.if_(~issued):
            issue_boxes(k, tma, row0, k0, blocks)
    _stage(k, T, b_lds, mx_lds, chunk, pending, value8, crew)
    k.barrier()  # every thread's B stores, fenced for the async proxy
    if staged:
        staged()
    srow = (row0 / BLOCK) * scale_stride + kb0  # the tile lies in one 128-row scale block
    scales = [k.load(scale, srow + i, f32) for i in range(blocks)]
    b0 = k.lds_offset(b_name)
    a0 = k.opaque(ss.a_smem_descriptor(k.lds_offset(tma.ring_name)), u64)

    def chain(i, zero):
        k.mbar_wait(bars[i], 0)
        k.wgmma_fence()
        acc = zero
        for c in range(T.chunks):
            desc = ss.smem_descriptor(b0 + ((i * T.chunks + c) * T.chunk_words) * u32.bytes)
            acc = k.wgmma(ss, a0 + desc_units(i * box + c * ss.k), k.const(desc, u64), acc)
        return acc, scales[i]

    total = _scaled_chains(k, ss, blocks, chain)
    k.barrier()  # every wave is past its waits: the mbarriers may be set up again
    with k.if_(issuer):
        for bar in bars:
            k.mbar_inval(bar)
    _emit(k, T, mx_lds, chunk, row0, total, emit)


def _scaled_chains(k, at, blocks, chain):
    """The f32 total of the job's blocks: `chain(i, zero)` issues block i's wgmmas into a
    fresh accumulator (from `zero`) and returns it with the block's weight scale; each chain
    is committed, and block i - 1's sum scaled into the total while block i's chain runs
    (wgmma_wait(1): no chain longer than one scale block, the H200's 14-bit sums)."""
    zero = k.vec(*[k.const(0.0, f32)] * at.c_slots)
    total, prev = zero, None
    for i in range(blocks):
        acc, sc = chain(i, zero)
        k.wgmma_commit()
        if prev is not None:
            k.wgmma_wait(1)  # block i - 1's chain (block i's runs on)
            total = k.fma(prev[0], prev[1], total)
        prev = (acc, sc)
    k.wgmma_wait(0)
    return k.fma(prev[0], prev[1], total)


def _emit(k, T, mx_lds, chunk, row0, total, emit):
    """Each row's terms summed (t_0 + t_1 2^-4 + ..., in term order), times 1 / S_r."""
    lane = k.wave_id() * k.L + k.lane_id()
    crow = row0 + T.c_row.emit(k, lane)
    ccol = T.c_col.emit(k, lane)
    runs = chunk // PIECE_K // WARP
    for ro, rr, js in T.slots:
        y = total[js[0]]
        for j in range(1, len(js)):
            y = k.fma(total[js[j]], float(2.0 ** (-TERM_BITS * j)), y)
        r = ccol + rr if rr else ccol
        rc = k.min(r, T.rows - 1)
        bits = k.load(mx_lds, rc * runs, u32)
        for q in range(1, runs):
            bits = k.max(bits, k.load(mx_lds, rc * runs + q, u32))
        _, inv = range_scales(k, bits, ACT_TOP)
        emit(crow + ro if ro else crow, r, y * inv, r < T.rows)


# --------------------------------------------------------------------------- the reference

def reference_terms(a: np.ndarray, terms: int) -> np.ndarray:
    """What the tile feeds the tensor cores for activations `a` [..., chunk] (float64, each
    row's chunk of one job): the sum of its e4m3 terms over S_r (module doc), computed with
    torch's e4m3fn rounding, independently of the kernel's code."""
    import torch
    a = np.asarray(a, np.float64)
    mx = np.abs(a).max(axis=-1, keepdims=True).astype(np.float32)
    e = (mx.view(np.uint32) >> 23).astype(np.int64) & 0xFF  # the max's f32 exponent field
    x = np.clip(2 * 127 + ACT_TOP - e, 1, 2 * 127 - 1)  # S_r's exponent field
    s = np.ldexp(1.0, (x - 127).astype(np.int64))
    u = a * s
    out = np.zeros_like(a)
    for j in range(terms):
        t = torch.from_numpy(u).to(torch.float8_e4m3fn).to(torch.float64).numpy()
        out += t * 2.0 ** (-TERM_BITS * j)
        u = (u - t) * 2.0 ** TERM_BITS
    return out / s
