"""The long-context indexer (issue 6): index projections, the paged key cache append, and
the scoring of every visible cached key, in one persistent kernel. Launch kinds:
`index_scoring` (these stages, from h and qr inputs) and `index` (stages.front's three stages
+ `ix_qr` + these stages: the layer's front and its own indexer in one launch).

What it computes, for R rows (row r at token position pos[r] of its request; rows of one
request sit at consecutive positions and share a block-table row):

    qi[r]  = W_qb_idx qr[r]                   [heads, 128]   (FP8 W, 128x128 fp32 blocks)
    ki[r]  = LayerNorm(W_k h[r])              [128]          (FP8 W, eps 1e-6, fp32 w + b)
    rope on dims [0, 64) of every q head and of k (the rope part FIRST; NeoX pairs (i, i+32),
         or (2i, 2i+1) with cfg.index_rope_interleaved), theta = cfg.rope_theta, angles in
         exact fixed point (stages.front's _sincos; the 32 frequencies an input buffer)
    Hadamard (cfg.index_hadamard): x <- H_128 x / sqrt(128) (Sylvester order)
    FP8 per 128 block: s = the smallest power of two with s * fp8_max >= max(amax, 1e-4)
         (ue8m0; fp8_max 448 for e4m3fn, 240 for e4m3fnuz on gfx942), x8 = fp8(x / s)
    w[r, h] = (W_w h[r])_h * heads^-0.5 * s_q[r, h] * 128^-0.5    (W_w bf16 [heads, hidden])
    the key (128 B) and s_k appended to the paged index cache at pos[r]
         page = [64 x 128 B keys][64 x 4 B fp32 scales] = 8448 B, page = block_table[r, pos // 64]
    score[r, p] = s_k[p] * sum_h w[r, h] * relu(q8[r, h] . k8[p])     for every p <= pos[r]

Precision (a stated choice): the queries are FP8 as the reference model quantizes them
(scale folded into w), the dot products run on the chip's FP8 MMA (exact products, f32
sums), the head sum and the scale multiply in f32. Projections: the chip's bf16 MMA, FP8
weights converted to bf16 (exact), every product exact, f32 accumulation, each 128-block's
sum times its block scale; rope, LayerNorm, Hadamard in f32.
From the front (kind `index`): h = x * g * rs(x) is never rounded (the partial sums are of
W (x * g), scaled by the row's rs in ix_key, the front's algebra); qr is the front's bf16 qr.

Stages (each job's work is declared; the scheduler places jobs):

    ix_qr[r]     (kind index only) qr = RMSNorm(q_a) from the front's partial sums (front_q's
                 math and helpers) into the bulk region ix_qr the q heads acquire.
    ix_proj[j]   partial sums on the tensor cores (stages/mma_tile.py, the front's tile: the
                 chip's bf16 MMA, 16 weight rows as A, every weight load of a wave's m-tile in
                 flight before its first MMA, 16-byte nontemporal loads, the chunk's
                 activations staged once in LDS as B). j = h * QS + s < heads * QS: W_qb_idx
                 rows of head h over q_lora split s (QS = q_splits) -> ix_qpart [QS, R,
                 heads*128]; j = heads * QS + s: W_k (128 rows, fp8) then W_w (heads rows, bf16
                 fed as loaded, no scale) over hidden split s, one staging of the activations
                 for both -> ix_kpart [KS, R, 128 + heads]. qr and the buffers' h are bf16
                 (staged as they are, parts=1); from the front, x * g is fed as exact bf16
                 halves (parts=2). Plain stores, then (CTA barrier, device release) the job's
                 pair in ix_pdone. Split counts (proj_splits): a wave's loads of an m-tile at
                 most mma_tile.LOADS_IN_FLIGHT (all in flight at once); QS the smallest q_lora
                 split that fits and gives heads * QS >= grid jobs of at least Q_MIN_BLOCKS
                 128-blocks, KS the smallest hidden split that fits with a key job at most
                 1.5 q jobs' bytes. GLM-5: 256 q jobs of 32 KB + 24 key jobs of 48 KB.
    ix_q[h]      q head h for all rows: waits for its QS pairs (threads in parallel; barrier;
                 acquire), sums the partials in split order (the same bits on every run and
                 schedule), rope, Hadamard, quantize -> ix_qb, bulk (32 fp8 words and the
                 scale's bits a (head, row); a release counter of `heads` publishers): a
                 scoring job acquires it once and loads its query operands straight into
                 registers.
    ix_key[0]    waits for the KS key jobs' pairs, sums their partials in split order,
                 LayerNorm, rope, Hadamard, quantize: the new
                 keys -> the cache and ix_nb (bulk: a row's key words, scale bits, then its
                 head weights w = W_w h * s_q * consts).
    ix_score[j]  J jobs (one a CTA). The plan (wave 0, one row a lane): row r joins row r-1's
                 group iff it sits at the next position and its page of pos[r-1] is row
                 r-1's (same request); a group is scored together, read through its last
                 row's block table. A unit is (group, segment of S keys) and costs the
                 group's row PAIRS; units are split over the J jobs by cost prefix (even at
                 every context: a long row's keys are split evenly across CTAs;
                 `score_runs` is the same map on the host). Scores go to `scores` by logical
                 position, first-digit counts to an LDS histogram per (row, segment) (LDS
                 atomics), flushed to `score_hist` after a CTA barrier; each job then
                 announces itself in `score_done` (release fence, then the pair).

Scoring tilings (stages/index_tiling.py: the head's 128 bytes are permuted onto the atom's K
so a lane loads 32 contiguous key bytes, two 16-byte nontemporal loads, straight into
registers as the A operand, DEPTH (2) steps ahead; no LDS copy, no barrier, no branch on the
key path):

    gfx950  v_mfma_f32_16x16x128_f8f6f4: A = 16 keys x 128 B, B = 16 heads of one row
            (registers, from ix_qb), one MFMA a head half. A wave scores a row PAIR, at
            every build width (below 4 rows too: simplest; the pair's second row is masked
            when a group has an odd row count): per 16 keys 2 rows x ceil(heads/16) MFMAs (4
            for 32 heads), each key read and converted once for both rows. Waves are spread
            over the group's pairs with power-of-two strides (P rounded up to P2 = 2^lp: wave
            w takes pair w % P2 and every (W/P2)-th 16-key group: shifts, no division; a
            wave idles only for groups of 5-6 rows). relu, the head weights and the head
            halves in registers; the 16 head lanes are reduced by a reduce-scatter of lane
            swaps (8, 4, 2, 1: 8 swaps for 2 rows x 4 keys), one score a lane pair.
    gfx942  v_mfma_f32_16x16x32_fp8 (e4m3fnuz): the same with 4 chained MFMAs a head half
            (16 per pair and 16 keys).
    sm_90a  wgmma m64n(2*HP)k32 e4m3: a warpgroup takes 64 keys (one page) as the register
            A operand, every row pair of the group reads its queries from shared memory as
            B (staged once a job, K-major), 4 chained wgmmas a pair: all rows of the CTA
            share each key load. Head sums: in-thread then 2 lane swaps (t = lane % 4).

Keys this launch writes: a row's new key lands in a slot that the group's key loop also
reads (the key job may be writing it); the loop's value there is discarded: after the CTA
barrier `_fixup` recomputes exactly those scores from the launch's own new key (ix_nb, f32
dot products of exact fp8 products) and moves their histogram count from the stale digit to
the new one. Only the jobs whose range holds such a slot do anything there.

Registers (a persistent kernel holds every stage): each stage reads its pointers, the arena
and the tag again at its start (DSL reload_arg, `local_io`), derives lane values from an
opaque zero of the job index (`_lane`), and keeps per-row facts in LDS or VGPRs, so LLVM does
not hoist them out of the job loop into scalar registers held across all stages; the
front's stages get the same reload in kind `index` (`reloaded`). Zero spills on gfx950 and
gfx942 at 2, 4 and 8 rows (test/test_index.py).

Scores/selection contract (layouts/scores.py; the region protocol is this module's):
    scores      PlainBuffer f32 [R, capacity]: scores[r, p] for p <= pos[r] (others untouched)
    score_hist  PlainBuffer u32 [R, capacity / S, 64]: first-digit (ordered_key >> 26)
                counts of the stored scores of row r in segment s (segments past the row's
                last key are untouched)
    score_done  TaggedPairs u32 [J]: job j's pair is published after its scores and
                histograms (device-scope release fence first). A consumer polls all J pairs,
                takes an acquire fence (`wait_scored`; declare `scored_reads`), then reads
                both plain regions. Every scoring job may write any row's scores (the split
                follows the runtime contexts), so a consumer depends on all of them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from layouts.regions import BulkBuffer, PlainBuffer, TaggedPairs
from layouts.scores import FIRST_DIGIT_BINS, FIRST_DIGIT_SHIFT, ScoresLayout
from monokernel import numerics
from monokernel.atoms import atom as get_atom
from monokernel.atoms.nvidia import wgmma_e4m3
from monokernel.types import bf16, dtype as as_dtype, f32, i32, u8, u32, u64
from spec.config import FP8_SCALE_BLOCK, KEY_PAGE_TOKENS

from .base import Buffer, Job, Stage, Use
from .index_tiling import SCORE_ATOMS, SM90, KeyTiling, tiling
from .launch import Launch
from . import mma_tile

HD = 128  # index head dim
PAGE = KEY_PAGE_TOKENS
PAGE_BYTES = PAGE * (HD + 4)  # 8448
PAGE_WORDS = PAGE_BYTES // 4  # 2112
SCALE_WORD0 = PAGE * HD // 4  # 2048: first scale word of a page
BLOCK = FP8_SCALE_BLOCK
Q_FILL = 1.0  # q partial-sum jobs: at least this fraction of the grid's CTAs (module doc)
Q_MIN_BLOCKS = 2  # 128-blocks of q_lora a q job takes at least (32 KB of W_qb_idx)
QW = 36  # ix_qb words a (head, row): 32 fp8 words, the scale's bits, pad to 16 bytes
NW0 = 36  # ix_nb: a row's 32 key words, its scale's bits, pad; then its head weights
DEPTH = 2  # key groups a scoring wave keeps in flight ahead of the one it computes
SCALE_FLOOR = float(np.float32(1e-4))
DEFAULT_WAVES = {"interp": 2, "amd": 4, "nvidia": 8}
INTERP_GRID = 8
GPU_SEGMENT = 1024
INTERP_SEGMENT = 256
INTERP_CAPACITY = 4096


# ------------------------------------------------------------------------------------ plan

@dataclass(frozen=True)
class IndexPlan:
    """Every number the index stages use, from the build spec."""
    config: object  # spec.ModelConfig
    rows: int
    target: str  # the build target
    chip: str  # whose atoms and fp8 format the scoring uses (== target unless interp)
    fp8: object  # DType of the weights, queries and the key cache
    grid: int
    waves: int
    capacity: int  # positions a row may have (block-table width x 64)
    cache_pages: int
    segment: int
    score_jobs: int
    k_splits: int  # K-splits of the key jobs (W_k and W_w over hidden)
    q_splits: int = 1  # K-splits of each q head's job (W_qb_idx over q_lora)
    source: str = "buffers"  # "buffers": h, qr inputs (index_scoring); "front": the front's
    front: object = None  # FrontPlan (source "front")

    @property
    def heads(self): return self.config.index_heads
    @property
    def hidden(self): return self.config.hidden
    @property
    def q_lora(self): return self.config.q_lora_rank
    @property
    def max_pages(self): return self.capacity // PAGE
    @property
    def segments(self): return self.capacity // self.segment
    @property
    def fp8_max(self): return numerics.FP8_MAX[self.fp8.name]
    @property
    def weight_scales(self):  # W_qb_idx's 128x128 block scales, then W_k's
        return self.heads * self.q_lora // BLOCK + self.hidden // BLOCK
    @property
    def kchunk(self): return self.hidden // self.k_splits
    @property
    def qchunk(self): return self.q_lora // self.q_splits
    @property
    def lanes(self): return 32 if self.wgmma else 64  # the wave size the kernel runs with
    @property
    def q_jobs(self): return self.heads * self.q_splits  # job h * q_splits + s: head h, split s
    @property
    def proj_jobs(self): return self.q_jobs + self.k_splits
    @property
    def proj_atom(self):  # the bf16 MMA of the projections (stages/mma_tile.py)
        return mma_tile.proj_atom_name(self.target, self.lanes, self.chip)
    @property
    def w_tile(self): return -(-self.heads // 16) * 16  # W_w's rows, whole 16-row m-tiles
    @property
    def q_tiling(self):  # qr is bf16: staged unsplit
        return mma_tile.tiling(self.proj_atom, self.rows, 1)
    @property
    def k_tiling(self):  # h (buffers) is bf16; x * g (front) is fed as hi + lo halves
        return mma_tile.tiling(self.proj_atom, self.rows, 1 if self.source == "buffers" else 2)
    @property
    def q_loads(self):  # 16-byte weight loads a lane holds for an m-tile of a q / key job
        return _mtile_loads(self.proj_atom, self.waves, HD, self.qchunk // BLOCK, 1)
    @property
    def k_loads(self):
        kb = self.kchunk // BLOCK
        return max(_mtile_loads(self.proj_atom, self.waves, HD, kb, 1),
                   _mtile_loads(self.proj_atom, self.waves, self.w_tile, kb, 2))
    @property
    def wgmma(self): return self.chip == SM90
    @property
    def halves(self): return -(-self.heads // 16)  # AMD: 16-head MMA columns
    @property
    def heads_pad(self): return -(-self.heads // 8) * 8  # Hopper: columns of a row
    @property
    def pairs(self): return -(-self.rows // 2)
    @property
    def nb_words(self): return NW0 + -(-self.heads // 4) * 4  # ix_nb words a row
    @property
    def scores_layout(self) -> ScoresLayout:
        return ScoresLayout(self.rows, self.capacity, self.segment)

    @property
    def hist_slots(self) -> int:
        """(row, segment) histograms one scoring job may hold: a job's units cost at most
        C/J + R/2 pairs (C <= R * segments), a unit of n rows costs >= n/2 pairs."""
        return -(-2 * self.rows * self.segments // self.score_jobs) + self.rows

    @property
    def atom(self):
        if self.wgmma:
            return wgmma_e4m3(2 * self.heads_pad)
        return get_atom(SCORE_ATOMS[self.chip])

    @property
    def tiling(self) -> KeyTiling:
        return tiling(self.atom.name) if not self.wgmma else KeyTiling.of(self.atom)

    def check(self):
        c = self.config
        if c.index_head_dim != HD:
            raise ValueError(f"index: head dim {c.index_head_dim}; the scoring tiles 128")
        if self.rows not in (1, 2, 4, 8):
            raise ValueError(f"index: {self.rows} rows; built widths are 2, 4, 8")
        if self.heads > 64 or self.heads < 1:
            raise ValueError(f"index: {self.heads} heads (1..64)")
        if c.q_lora_rank % BLOCK or c.hidden % BLOCK or self.kchunk % BLOCK or \
                self.qchunk % BLOCK or self.k_splits * self.kchunk != c.hidden or \
                self.q_splits * self.qchunk != c.q_lora_rank:
            raise ValueError(f"index: q_lora {c.q_lora_rank} / {self.q_splits} splits and hidden "
                             f"{c.hidden} / {self.k_splits} splits must be whole {BLOCK}-blocks")
        for tm in (HD, self.w_tile):
            mma_tile.WaveSplit.of(tm, 16, self.waves)  # the projection tiles split over the waves
        if self.capacity % self.segment or self.segment % PAGE:
            raise ValueError(f"index: capacity {self.capacity} must be whole segments of "
                             f"{self.segment} keys, a segment whole pages of {PAGE}")
        if self.cache_pages < 1 or self.cache_pages * PAGE_BYTES > 2**31 - 1:
            raise ValueError(f"index: {self.cache_pages} cache pages overflow int32 byte offsets")
        if self.chip not in (*SCORE_ATOMS, SM90):
            raise ValueError(f"index: no scoring tiling for chip {self.chip!r}")
        if self.wgmma and self.waves % 4:
            raise ValueError(f"index: wgmma scoring needs whole warpgroups, got {self.waves} warps")
        self.scores_layout  # the selection's limits
        return self


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _mtile_loads(atom_name: str, waves: int, tile_m: int, blocks: int, w_bytes: int) -> int:
    """16-byte weight loads a lane issues for one m-tile of a projection tile of `tile_m`
    rows over `blocks` 128-blocks (stages/mma_tile.py's work split)."""
    sp = mma_tile.WaveSplit.of(tile_m, 16, waves)
    return -(-blocks // sp.kparts) * mma_tile.tiling(atom_name, 1, 1).loads_per_block_of(w_bytes)


def proj_splits(cfg, atom_name: str, waves: int, grid: int) -> tuple:
    """(q_splits, k_splits) of ix_proj (module doc): every weight load of a wave's m-tile in
    flight at once (at most mma_tile.LOADS_IN_FLIGHT 16-byte loads a lane). q: the smallest
    split of q_lora that fits and gives heads * q_splits >= Q_FILL * grid jobs of at least
    Q_MIN_BLOCKS blocks (else the largest such split that fits); key: the smallest split of
    hidden whose W_k and W_w loads fit and whose job is at most 1.5 q jobs' bytes."""
    H = cfg.index_heads
    qb, kb = cfg.q_lora_rank // BLOCK, cfg.hidden // BLOCK
    lim = mma_tile.LOADS_IN_FLIGHT
    wt = -(-H // 16) * 16
    fit = [d for d in _divisors(qb) if _mtile_loads(atom_name, waves, HD, qb // d, 1) <= lim]
    big = [d for d in fit if qb // d >= min(Q_MIN_BLOCKS, qb)]
    fill = [d for d in big if H * d >= Q_FILL * grid]
    qs = fill[0] if fill else (big[-1] if big else (fit[0] if fit else qb))
    qbytes = HD * cfg.q_lora_rank // qs
    ks = next((d for d in _divisors(kb)
               if _mtile_loads(atom_name, waves, HD, kb // d, 1) <= lim and
               _mtile_loads(atom_name, waves, wt, kb // d, 2) <= lim and
               (HD + 2 * H) * (cfg.hidden // d) <= 1.5 * qbytes), kb)
    return qs, ks


def plan(spec, *, grid=None, waves=None, chip=None, capacity=None, cache_pages=None,
         segment=None, score_jobs=None, k_splits=None, q_splits=None) -> IndexPlan:
    t = spec.target_info
    if grid is None:
        grid = INTERP_GRID if spec.target == "interp" else t.num_ctas
    chip = chip or (spec.target if spec.target != "interp" else "gfx950")
    if waves is None:
        waves = DEFAULT_WAVES[t.vendor] if spec.target != "interp" else \
            (4 if chip == SM90 else DEFAULT_WAVES["interp"])
    fp8 = as_dtype("fp8e4m3fnuz" if chip == "gfx942" else "fp8e4m3fn")
    cfg = spec.config
    if capacity is None:  # the interpreter's launches stay small (4096 keys a row)
        capacity = -(-cfg.max_context // PAGE) * PAGE
        if spec.target == "interp":
            capacity = min(capacity, INTERP_CAPACITY)
    if segment is None:
        segment = INTERP_SEGMENT if spec.target == "interp" else GPU_SEGMENT
    lanes = 32 if chip == SM90 else 64
    if cfg.index_head_dim == HD and (q_splits is None or k_splits is None):
        atom_name = mma_tile.proj_atom_name(spec.target, lanes, chip)
        qs, ks = proj_splits(cfg, atom_name, waves, grid)
        q_splits = q_splits or qs
        k_splits = k_splits or ks
    if cache_pages is None:
        cache_pages = 4 * spec.rows + capacity // PAGE if spec.target != "interp" else 48
    return IndexPlan(cfg, spec.rows, spec.target, chip, fp8, grid, waves, capacity, cache_pages,
                     segment, score_jobs or grid, k_splits or 1, q_splits or 1).check()


# ----------------------------------------------------------------------- host-side plan

def groups_of(positions, block_table):
    """[(first row, rows)] of the launch: row r joins row r-1 iff pos[r] == pos[r-1] + 1 and
    block_table[r, pos[r-1] // 64] == block_table[r-1, pos[r-1] // 64]."""
    pos = np.asarray(positions).reshape(-1)
    bt = np.asarray(block_table)
    out = []
    for r in range(len(pos)):
        if r and pos[r] == pos[r - 1] + 1 and \
                bt[r, pos[r - 1] // PAGE] == bt[r - 1, pos[r - 1] // PAGE]:
            out[-1][1] += 1
        else:
            out.append([r, 1])
    return [tuple(g) for g in out]


def score_runs(p: IndexPlan, positions, block_table) -> list:
    """The run map: per scoring job j, [(first row, rows, first segment, end segment)] it
    scores (the kernel's formula). A row's scores are at scores[r, 0 .. pos[r]], its
    histograms at score_hist[r, 0 .. pos[r] // S]."""
    pos = np.asarray(positions).reshape(-1)
    S, J = p.segment, p.score_jobs
    gs = groups_of(pos, block_table)
    cost, prefix, C = [], [], 0
    for f, n in gs:
        segs = (int(pos[f + n - 1]) // S) + 1
        c = segs * ((n + 1) // 2)
        prefix.append(C)
        cost.append((segs, (n + 1) // 2))
        C += c
    runs = []
    for j in range(J):
        mine = []
        for (f, n), P, (segs, pairs) in zip(gs, prefix, cost):
            den = pairs * J
            lo = min(-(-max(j * C - P * J, 0) // den), segs)
            hi = min(-(-max((j + 1) * C - P * J, 0) // den), segs)
            if lo < hi:
                mine.append((f, n, lo, hi))
        runs.append(mine)
    return runs


# ----------------------------------------------------------------------------- DSL helpers

_CUR_LANE: list = [None, None]


def _lane(k):
    """This lane's index, as the current stage body made it (local_io): lane_id plus an
    opaque zero from the job index, so lane-derived values (predicates, offsets) are computed
    per job instead of hoisted out of the persistent job loop into registers held across
    every stage."""
    if _CUR_LANE[0] is k:
        return _CUR_LANE[1]
    return k.lane_id()


def _tid(k):
    return k.wave_id() * k.L + _lane(k)


def _rope_freqs(cfg):
    """round(inv_freq_i / 2pi * 2^64) for the 32 rope frequencies (revolutions a position):
    stages.front's exact fixed-point angles."""
    out = []
    for i in range(32):
        inv = cfg.rope_theta ** (-(2.0 * i) / 64)
        out.append(int(round(math.ldexp(inv / (2.0 * math.pi), 64))) % (1 << 64))
    return out


def _sincos(k, pos, freq):
    from .front import _sincos as f
    return f(k, pos, freq)


def _scan(k, x, n):
    """Inclusive prefix sum over lanes 0..n-1 (lane order), per-lane i32; lanes >= n may
    hold anything. Range tests are arithmetic (no lane predicate held in registers)."""
    lane = _lane(k)
    off = 1
    while off < n:
        src = lane - off
        inr = (src >> 31) + 1  # 1 if lane >= off else 0
        x = x + k.shuffle(x, k.max(src, 0)) * inr
        off *= 2
    return x


def ordered_digit(k, score):
    """layouts.scores.ordered_key(score) >> 26 (integer operations on the bits)."""
    u = k.bitcast(score, u32)
    mag = u & 0x7FFFFFFF
    key = k.select((u >> 31).eq(1), ~u, u | 0x80000000)
    key = k.select(mag.eq(0), 0x80000000, key)
    bad = (mag > 0x7F800000) | u.eq(0xFF800000)
    return k.select(bad, 0, key) >> FIRST_DIGIT_SHIFT


def stage_body(fn):
    """A stage body with local_io's mailbox and lane (reset when the body is emitted)."""
    import functools

    @functools.wraps(fn)
    def wrapped(self, k, job, io):
        try:
            return fn(self, k, job, local_io(k, io, job, getattr(self, "flat_mailbox", False)))
        finally:
            _CUR_LANE[0] = _CUR_LANE[1] = None
    return wrapped


def reloaded(stage):
    """A copy of another module's stage whose body gets local_io's mailbox (the arena, tag
    and pointers read again at the job's start), so composing it into a long persistent
    kernel does not keep its region bases in scalar registers across every stage."""
    cls = type(stage)

    def body(self, k, job, io):
        return cls.body(self, k, job, local_io(k, io))
    sub = type(f"Reloaded{cls.__name__}", (cls,), {"body": body, "__module__": cls.__module__})
    out = object.__new__(sub)
    out.__dict__.update(stage.__dict__)
    return out


def local_io(k, io, job=None, flat=False):
    """The stage's mailbox and arguments with every pointer (and the tag) read again from
    the kernel's argument memory at the stage's start (DSL reload_arg): a persistent kernel
    otherwise keeps every stage's pointers, and the region bases LLVM hoists out of the job
    loop, in scalar registers across all stages (SGPR spills). `flat`: the mailbox forms
    every region access through the arena pointer (layouts.protocol), one 64-bit base
    instead of one per region (the projection stages touch five regions)."""
    import copy
    from types import SimpleNamespace
    from layouts.protocol import Mailbox
    env = copy.copy(io.env)
    env.arena = k.reload_arg("arena")
    env.tag = k.reload_arg("tag")
    env.args = SimpleNamespace(**{n: k.reload_arg(n) for n in vars(io.env.args)})
    if job is not None:
        _CUR_LANE[0], _CUR_LANE[1] = k, k.lane_id() + k.bitcast(k.bitcast(job, u32) >> 31, i32)
    return Mailbox(env, io.arena, getattr(io, "scope", "device"), flat=flat)


def rotate(k, p: IndexPlan, xs, pos, freq):
    """rope on dims [0, 64) then (cfg.index_hadamard) the 128-point Hadamard / sqrt(128), on
    the lane's elements xs[t] = x[lane * ne + t]."""
    ne = len(xs)
    lane = _lane(k)
    cfg = p.config
    out = []
    for t in range(ne):
        e = lane * ne + t
        x = xs[t]
        if cfg.index_rope_interleaved:
            fi = (e >> 1) & 31
            partner = xs[t ^ 1]
            first = (e & 1).eq(0)
        else:
            fi = e & 31
            partner = k.lane_swap(x, 32 // ne)
            first = (e & 32).eq(0)
        sn, cs = _sincos(k, pos, k.load(freq, fi, u64))
        ps = partner * sn
        y = k.fma(x, cs, k.select(first, -ps, ps))
        out.append(k.select(e < 64, y, x))
    if cfg.index_hadamard:
        d = 1
        while d < HD:
            if d < ne:
                out = [(out[t ^ d] - out[t]) if t & d else (out[t] + out[t ^ d]) for t in range(ne)]
            else:
                m = d // ne
                hi = (lane & m).ne(0)
                nxt = []
                for t in range(ne):
                    px = k.lane_swap(out[t], m)
                    nxt.append(k.select(hi, px - out[t], out[t] + px))
                out = nxt
            d *= 2
        c = float(np.float32(HD ** -0.5))
        out = [x * c for x in out]
    return out


def quantize(k, p: IndexPlan, ys):
    """(fp8 elements, scale): s = the smallest power of two with s * fp8_max >= max(amax,
    1e-4) over the whole 128-vector (the wave), x8 = fp8(y / s) (exact division)."""
    am = k.abs(ys[0])
    for y in ys[1:]:
        am = k.max(am, k.abs(y))
    am = k.max(k.wave_max(am), SCALE_FLOOR)
    fmax = p.fp8_max
    est = am * (1.0 / fmax)
    sc = k.bitcast(k.bitcast(est, u32) & 0x7F800000, f32)
    for _ in range(2):
        sc = k.select(sc * fmax < am, sc * 2.0, sc)
    inv = 1.0 / sc
    return [k.cast(y * inv, p.fp8) for y in ys], sc


def pack_words(k, q8):
    """The lane's fp8 elements as the 128-vector's u32 words: (word, word index, is a word
    lane). ne = 2 (wave64): even lanes hold word lane/2; ne = 4 (warp32): every lane."""
    lane = _lane(k)
    if len(q8) == 4:
        return k.bitcast(k.vec(*q8), u32), lane, lane >= 0
    if len(q8) != 2:
        raise ValueError(f"index: {len(q8)} elements a lane")
    lo = k.cast(k.bitcast(k.vec(*q8), "u16"), u32)
    other = k.lane_swap(lo, 1)
    return lo | (other << 16), lane >> 1, (lane & 1).eq(0)


def wait_flags(k, io, lo, n: int):
    """Wait for ix_pdone pairs [lo, lo + n) (lo uniform i32 or int): every thread polls its
    share in parallel, a CTA barrier (every wave's polls have succeeded, or the CTA failed),
    then a device acquire: the jobs' plain partial sums are visible to every wave."""
    nthr = k.W * k.L
    tid = _tid(k)
    for it in range(-(-n // nthr)):
        i = it * nthr + tid
        io.wait("ix_pdone", lo + k.min(i, n - 1), mask=i < n if n % nthr else None)
    io.env.cta_ok()
    k.fence("acquire", "device")


# ------------------------------------------------------------------------------------ stages

class IndexProj(Stage):
    """Partial sums of the three index projections on the tensor cores (module doc,
    stages/mma_tile.py): job h * q_splits + s: W_qb_idx rows of head h over q_lora split s ->
    ix_qpart; job q_jobs + s: W_k (128 rows) then W_w (heads rows) over hidden split s,
    sharing the split's staged activations -> ix_kpart. Each job then releases and publishes
    its ix_pdone pair."""
    name = "ix_proj"
    rel_tol = 1e-5
    flat_mailbox = True  # local_io: region accesses through the arena pointer

    def __init__(self, p: IndexPlan):
        self.p = p

    def jobs(self):
        p = self.p
        R = p.rows
        qw = HD * p.qchunk + 4 * p.qchunk // BLOCK  # weights + the head's block scales
        kw = (HD + 2 * p.heads) * p.kchunk + 4 * p.kchunk // BLOCK
        return ([Job(j, cost_bytes=qw + 2 * R * p.qchunk + 4 * R * HD,
                     cost_flops=2 * HD * p.qchunk * R, lds_bytes=self._lds())
                 for j in range(p.q_jobs)]
                + [Job(p.q_jobs + s, cost_bytes=kw + 4 * R * p.kchunk + 4 * R * (HD + p.heads),
                       cost_flops=2 * (HD + p.heads) * p.kchunk * R, lds_bytes=self._lds())
                   for s in range(p.k_splits)])

    def _act_words(self):  # u32 words of the staged activations (q and key jobs share them)
        p = self.p
        return max(mma_tile.act_lds_words(p.q_tiling, p.qchunk),
                   mma_tile.act_lds_words(p.k_tiling, p.kchunk))

    def _red_words(self, lanes: int):  # f32 words of the K-parts' sums (0: no tile has parts)
        p = self.p
        at = get_atom(p.proj_atom)
        if max(mma_tile.WaveSplit.of(tm, at.m, p.waves).kparts for tm in (HD, p.w_tile)) == 1:
            return 0
        return p.waves * lanes * at.c_slots

    def _lds(self):
        return 4 * (self._act_words() + self._red_words(self.p.lanes))

    def regions(self):
        p = self.p
        R = p.rows
        return [PlainBuffer("ix_qpart", f32, (p.q_splits, R, p.heads * HD)),
                PlainBuffer("ix_kpart", f32, (p.k_splits, R, HD + p.heads)),
                TaggedPairs("ix_pdone", (p.proj_jobs,), u32)]

    def buffers(self):
        p = self.p
        src = ({"h": Buffer(bf16, (p.rows, p.hidden)), "qr": Buffer(bf16, (p.rows, p.q_lora))}
               if p.source == "buffers" else
               {"x": Buffer(bf16, (p.rows, p.hidden)), "attn_norm_w": Buffer(bf16, (p.hidden,))})
        return {**src,
                "ix_wq": Buffer(p.fp8, (p.heads * HD, p.q_lora)),
                "ix_wk": Buffer(p.fp8, (HD, p.hidden)),
                "ix_ws": Buffer(f32, (p.weight_scales,)),
                "ix_ww": Buffer(bf16, (p.heads, p.hidden))}

    def bytes_moved(self):
        p = self.p
        out = {"ix_wq": p.heads * HD * p.q_lora, "ix_wk": HD * p.hidden,
               "ix_ws": 4 * p.weight_scales, "ix_ww": 2 * p.heads * p.hidden}
        if p.source == "buffers":  # from the front, x is the front's (counted there)
            out.update(h=2 * p.rows * p.hidden, qr=2 * p.rows * p.q_lora)
        return out

    def reads(self, j):
        p = self.p
        if p.source == "front" and j < p.q_jobs:
            return [Use("ix_qr", 0, p.rows * p.q_lora)]
        return []

    def writes(self, j):
        p = self.p
        R, NQ, PW_ = p.rows, p.heads * HD, HD + p.heads
        if j < p.q_jobs:
            h, s = divmod(j, p.q_splits)
            out = [Use("ix_qpart", (s * R + r) * NQ + h * HD, (s * R + r) * NQ + (h + 1) * HD)
                   for r in range(R)]
        else:
            s = j - p.q_jobs
            out = [Use("ix_kpart", (s * R + r) * PW_, (s * R + r + 1) * PW_) for r in range(R)]
        return out + [Use("ix_pdone", j, j + 1)]

    @stage_body
    def body(self, k, job, io):
        p = self.p
        act = k.lds("ix_act", u32, self._act_words())
        nred = self._red_words(k.L)
        red = k.lds("ix_red", f32, nred) if nred else None
        with k.if_else(job < p.q_jobs) as (qj, kj):
            with qj:
                self._q_part(k, io, act, red, job)
            with kj:
                self._k_part(k, io, act, red, job - p.q_jobs)
        # publish: every wave's stores, the CTA's release, then this job's pair (one a job:
        # no counter that a hundred jobs would contend for)
        k.fence("release", "cta")
        ok = io.env.cta_ok()  # a barrier when the CTA has several waves
        with k.if_(ok & k.wave_id().eq(0)):
            k.fence("release", "device")
            io.publish("ix_pdone", job, k.cast(job, u32), mask=_lane(k).eq(0))

    def _tile(self, k, T, *, w, w_dtype, scale, scale_stride, row0, k0, kb0, chunk, tile_m,
              lds, red, stage, emit, w_rows=None, stride):
        mma_tile.project(k, T, w=w, w_stride=stride, w_dtype=w_dtype, scale=scale,
                         scale_stride=scale_stride, row0=row0, k0=k0, kb0=kb0,
                         blocks=chunk // BLOCK, tile_m=tile_m, lds=lds, chunk=chunk,
                         stage=stage, emit=emit, red=red, w_rows=w_rows)

    def _q_part(self, k, io, act, red, j):
        """Head h = j / q_splits, split s: W_qb_idx[h*128 : h*128+128, chunk s] qr[:, chunk s]
        (the head's 128 rows share one row of 128x128 block scales). qr is bf16: staged as
        it is. From the front, the wait for ix_qr comes after the weight loads are issued."""
        p = self.p
        a = io.args
        T = p.q_tiling
        R, NQ, QC = p.rows, p.heads * HD, p.qchunk
        h, s = j / p.q_splits, j % p.q_splits
        k0 = s * QC
        if p.source == "front":
            from layouts.protocol import region_base
            xq = region_base(k, io.env.arena, io.arena, "ix_qr")
        else:
            xq = a.qr

        def load8(r, kk, m):
            return k.load(xq, r * p.q_lora + k0 + kk, bf16, 8, mask=m)

        def stage():
            k.barrier()  # the CTA's previous job is done reading the activations
            if p.source == "front":
                def finish():  # the weights travel while qr is awaited
                    io.acquire("ix_qr")
                    pending = mma_tile.load_activations(k, T, QC, load8)
                    mma_tile.store_activations(k, T, act, QC, pending, lambda v: v)
                    k.barrier()
                return finish
            pending = mma_tile.load_activations(k, T, QC, load8)

            def finish():
                mma_tile.store_activations(k, T, act, QC, pending, lambda v: v)
                k.barrier()
            return finish

        def emit(m, r, v, mask):  # ix_qpart[s, r, m ..] (m: the W_qb_idx row)
            io.store("ix_qpart", (s * R + r) * NQ + m, v, mask=mask)

        self._tile(k, T, w=a.ix_wq, w_dtype=p.fp8, scale=a.ix_ws, scale_stride=p.q_lora // BLOCK,
                   row0=h * HD, k0=k0, kb0=s * (QC // BLOCK), chunk=QC, tile_m=HD, lds=act,
                   red=red, stage=stage, emit=emit, stride=p.q_lora)

    def _k_part(self, k, io, act, red, s):
        """Split s of W_k h and W_w h. From the front, h = x * g * rs(x) is never formed: the
        sums are of W (x * g) (exact f32 products of two bf16, fed as bf16 halves hi + lo)
        and the key job multiplies them by the row's rs (the front's exact algebra)."""
        p = self.p
        a = io.args
        T = p.k_tiling
        R, KC, PW_, H = p.rows, p.kchunk, HD + p.heads, p.heads
        k0 = s * KC
        if p.source == "front":
            def load8(r, kk, m):
                return (k.load(a.x, r * p.hidden + k0 + kk, bf16, 8, mask=m),
                        k.load(a.attn_norm_w, k0 + kk, bf16, 8, mask=m))

            def value8(xg):  # a = x * g, exact in f32
                return k.cast(xg[0], f32) * k.cast(xg[1], f32)
        else:
            def load8(r, kk, m):
                return k.load(a.h, r * p.hidden + k0 + kk, bf16, 8, mask=m)

            def value8(v):
                return v

        def stage():
            k.barrier()  # the CTA's previous job is done reading the activations
            pending = mma_tile.load_activations(k, T, KC, load8)

            def finish():
                mma_tile.store_activations(k, T, act, KC, pending, value8)
                k.barrier()
            return finish

        def store(off, m, v, mask, limit=None):  # ix_kpart[s, r, off + m ..]
            n = v.n
            if PW_ % n == 0 and (limit is None or limit % n == 0):
                io.store("ix_kpart", off + m, v, mask=mask if limit is None else mask & (m < limit))
                return
            for i in range(n):  # rows not in whole vectors (heads not a multiple of n)
                x = v[i] if n > 1 else v
                mi = mask if limit is None else mask & (m + i < limit)
                io.store("ix_kpart", off + m + i, x, mask=mi)

        def emit_k(m, r, v, mask):
            store((s * R + r) * PW_, m, v, mask)

        def emit_w(m, r, v, mask):
            store((s * R + r) * PW_ + HD, m, v, mask, limit=H)

        def after_k():  # the activations are staged; `red` is free again once W_k read it
            if mma_tile.WaveSplit.of(HD, 16, k.W).kparts > 1:
                k.barrier()
        kb0 = s * (KC // BLOCK)
        ws0 = p.heads * p.q_lora // BLOCK  # W_k's block scales follow W_qb_idx's
        self._tile(k, T, w=a.ix_wk, w_dtype=p.fp8, scale=a.ix_ws, scale_stride=p.hidden // BLOCK,
                   row0=0, k0=k0, kb0=ws0 + kb0, chunk=KC, tile_m=HD, lds=act, red=red,
                   stage=stage, emit=emit_k, stride=p.hidden)
        self._tile(k, T, w=a.ix_ww, w_dtype=bf16, scale=None, scale_stride=0, row0=0, k0=k0,
                   kb0=kb0, chunk=KC, tile_m=p.w_tile, lds=act, red=red, stage=after_k,
                   emit=emit_w, w_rows=H, stride=p.hidden)

    def reference(self, env):
        return {}


class IndexQ(Stage):
    """q head h for all rows: the head's q_splits partial sums in split order, rope,
    Hadamard, quantize -> ix_qb (bulk: 32 fp8 words and the scale's bits a (head, row); a
    release counter of `heads` publishers)."""
    name = "ix_q"
    rel_tol = 1e-5
    flat_mailbox = True  # local_io: region accesses through the arena pointer

    def __init__(self, p: IndexPlan):
        self.p = p

    def jobs(self):
        p = self.p
        return [Job(h, cost_bytes=p.rows * HD * (4 * p.q_splits + 1) + 8 * p.q_splits,
                    cost_flops=p.rows * HD * 64) for h in range(p.heads)]

    def regions(self):
        p = self.p
        return [BulkBuffer("ix_qb", u32, (p.heads, p.rows, QW), publishers=p.heads)]

    def buffers(self):
        p = self.p
        return {"positions": Buffer(i32, (p.rows,)), "ix_rope_freq": Buffer(u64, (32,))}

    def bytes_moved(self):
        return {"ix_rope_freq": 256}

    def reads(self, h):
        p = self.p
        R, NQ, S = p.rows, p.heads * HD, p.q_splits
        return [Use("ix_pdone", h * S, (h + 1) * S)] + \
            [Use("ix_qpart", (s * R + r) * NQ + h * HD, (s * R + r) * NQ + (h + 1) * HD)
             for s in range(S) for r in range(R)]

    def writes(self, h):
        R = self.p.rows
        return [Use("ix_qb", h * R * QW, (h + 1) * R * QW)]

    @stage_body
    def body(self, k, hq, io):
        p = self.p
        a = io.args
        R, NQ = p.rows, p.heads * HD
        wait_flags(k, io, hq * p.q_splits, p.q_splits)
        ne = HD // k.L
        for r in k.range(k.wave_id(), R, k.W):
            xv = None
            for s in range(p.q_splits):  # the fixed split order: the same bits every run
                v = io.load("ix_qpart", (s * R + r) * NQ + hq * HD + _lane(k) * ne, ne)
                xv = v if xv is None else xv + v
            xs = [xv[t] for t in range(ne)] if ne > 1 else [xv]
            pos = k.load(a.positions, r, i32)
            ys = rotate(k, p, xs, k.max(pos, 0), a.ix_rope_freq)
            q8, sc = quantize(k, p, ys)
            word, widx, wl = pack_words(k, q8)
            io.store("ix_qb", (hq * R + r) * QW + widx, word, mask=wl)
            io.store("ix_qb", (hq * R + r) * QW + 32, k.bitcast(sc, u32), mask=_lane(k).eq(0))
        io.release("ix_qb")

    def reference(self, env):
        from .index_ref import proj_reference
        return proj_reference(self.p, env)


class IndexKey(Stage):
    """The new keys (LayerNorm, rope, Hadamard, FP8) -> pairs and the paged cache; the head
    weights w = W_w h * heads^-0.5 * s_q * 128^-0.5 -> pairs."""
    name = "ix_key"
    rel_tol = 1e-5
    flat_mailbox = True  # local_io: region accesses through the arena pointer

    def __init__(self, p: IndexPlan):
        self.p = p

    def jobs(self):
        p = self.p
        return [Job(0, cost_bytes=p.rows * (p.k_splits * (HD + p.heads) * 4 + HD * 2),
                    cost_flops=p.rows * HD * 64)]

    def regions(self):
        p = self.p
        return [BulkBuffer("ix_nb", u32, (p.rows, p.nb_words), publishers=1)]

    def buffers(self):
        p = self.p
        extra = {"x": Buffer(bf16, (p.rows, p.hidden))} if p.source == "front" else {}
        return {**extra, "positions": Buffer(i32, (p.rows,)),
                "block_table": Buffer(i32, (p.rows, p.max_pages)),
                "ix_kn": Buffer(f32, (2, HD)), "ix_rope_freq": Buffer(u64, (32,)),
                "index_cache": Buffer(u8, (p.cache_pages, PAGE_BYTES), output=True)}

    def reads(self, j):
        p = self.p
        return [Use("ix_pdone", p.q_jobs, p.proj_jobs),
                Use("ix_kpart", 0, p.k_splits * p.rows * (HD + p.heads)),
                Use("ix_qb", 0, p.heads * p.rows * QW)]

    def writes(self, j):
        p = self.p
        return [Use("ix_nb", 0, p.rows * p.nb_words)]

    @stage_body
    def body(self, k, job, io):
        p = self.p
        a = io.args
        R, KS, H = p.rows, p.k_splits, p.heads
        lane = _lane(k)
        PW_ = HD + H
        NWR = p.nb_words
        wait_flags(k, io, p.q_jobs, KS)
        io.acquire("ix_qb")
        ne = HD // k.L
        e0 = lane * ne
        eps = float(p.config.index_eps)
        coef = float(np.float32(H ** -0.5 * HD ** -0.5))
        rs_of = self._row_scales(k, io)
        for r in k.range(k.wave_id(), R, k.W):
            rs = rs_of(r)
            v = None
            for s in range(KS):  # the fixed split order: the same bits on every run
                x = io.load("ix_kpart", (s * R + r) * PW_ + e0, ne)
                v = x if v is None else v + x
            if rs is not None:
                v = v * rs
            xs = [v[t] for t in range(ne)] if ne > 1 else [v]
            tot = xs[0]
            for x in xs[1:]:
                tot = tot + x
            mean = k.wave_sum(tot) * (1.0 / HD)
            ds = [x - mean for x in xs]
            sq = ds[0] * ds[0]
            for d in ds[1:]:
                sq = k.fma(d, d, sq)
            rstd = k.rsqrt(k.wave_sum(sq) * (1.0 / HD) + eps)
            g = k.load(a.ix_kn, e0, f32, ne)
            b = k.load(a.ix_kn, HD + e0, f32, ne)
            ys = [k.fma(ds[t] * rstd, g[t] if ne > 1 else g, b[t] if ne > 1 else b)
                  for t in range(ne)]
            pos = k.load(a.positions, r, i32)
            pc = k.max(pos, 0)
            ys = rotate(k, p, ys, pc, a.ix_rope_freq)
            q8, sc = quantize(k, p, ys)
            word, widx, wl = pack_words(k, q8)
            io.store("ix_nb", r * NWR + widx, word, mask=wl)
            io.store("ix_nb", r * NWR + 32, k.bitcast(sc, u32), mask=lane.eq(0))
            page = k.load(a.block_table, r * p.max_pages + (pc >> 6), i32)
            ok = io.ok & (pos >= 0) & (page >= 0)
            base = page * PAGE_WORDS
            k.store(a.index_cache, base + (pc & (PAGE - 1)) * 32 + widx, word, mask=wl & ok)
            k.store(a.index_cache, base + SCALE_WORD0 + (pc & (PAGE - 1)), sc,
                    mask=lane.eq(0) & ok)
            for h0 in range(0, H, k.L):
                h = h0 + lane
                m = h < H
                wsum = None
                for s in range(KS):
                    x = io.load("ix_kpart", (s * R + r) * PW_ + HD + k.min(h, H - 1), mask=m)
                    wsum = x if wsum is None else wsum + x
                if rs is not None:
                    wsum = wsum * rs
                sq_ = k.bitcast(io.load("ix_qb", (k.min(h, H - 1) * R + r) * QW + 32, mask=m), f32)
                io.store("ix_nb", r * NWR + NW0 + k.min(h, H - 1), k.bitcast(wsum * sq_ * coef, u32),
                         mask=m)
        io.release("ix_nb")

    def bytes_moved(self):
        p = self.p
        return {"ix_kn": 2 * HD * 4, "index_cache new keys": p.rows * (HD + 4),
                "positions": 4 * p.rows}

    def _row_scales(self, k, io):
        """From the front: rs(x_r) = rsqrt(mean(x_r^2) + eps) of every row (the front's own
        helper and summation order), by all waves, into LDS; a function of the row index.
        From the buffers (h is normalized): None."""
        p = self.p
        if p.source != "front":
            return lambda r: None
        from .front import _row_rs
        red = k.lds("ix_rs_red", f32, 2 * k.W)
        rsl = k.lds("ix_rs", f32, p.rows)
        for r in range(p.rows):
            rs = _row_rs(k, p.front, io.args, r, red, r % 2)
            k.store(rsl, r, rs, mask=k.wave_id().eq(0) & _lane(k).eq(0))
        if k.W > 1:
            k.barrier()
        return lambda r: k.load(rsl, r, f32)

    def reference(self, env):
        from .index_ref import key_reference
        return key_reference(self.p, env)


class IndexScore(Stage):
    """Scores of every visible cached key (module doc)."""
    name = "ix_score"
    rel_tol = 1e-5

    def __init__(self, p: IndexPlan):
        self.p = p
        self.t = p.tiling

    def jobs(self):
        p = self.p
        keys = p.capacity * p.rows // max(p.score_jobs, 1)
        return [Job(j, cost_bytes=keys * (HD + 4) // 2, cost_flops=keys * HD * p.heads * 2,
                    lds_bytes=p.hist_slots * 256) for j in range(p.score_jobs)]

    keys_read = 8192  # the byte floor's context (kind inputs with `pos` set it)

    def bytes_moved(self):
        """The visible keys read once (workload W1: one request's keys) and the block table."""
        p = self.p
        keys = min(self.keys_read, p.capacity)
        return {"index_cache keys": keys * (HD + 4), "index block_table": 4 * (-(-keys // PAGE))}

    def regions(self):
        p = self.p
        return [PlainBuffer("scores", f32, (p.rows, p.capacity)),
                PlainBuffer("score_hist", u32, (p.rows, p.segments, FIRST_DIGIT_BINS)),
                TaggedPairs("score_done", (p.score_jobs,), u32)]

    def buffers(self):
        p = self.p
        return {"positions": Buffer(i32, (p.rows,)),
                "block_table": Buffer(i32, (p.rows, p.max_pages)),
                "index_cache": Buffer(u8, (p.cache_pages, PAGE_BYTES), output=True)}

    def reads(self, j):
        p = self.p
        R = p.rows
        return [Use("ix_qb", 0, p.heads * R * QW), Use("ix_nb", 0, R * p.nb_words)]

    def writes(self, j):
        p = self.p
        return [Use("scores", 0, p.rows * p.capacity),
                Use("score_hist", 0, p.rows * p.segments * FIRST_DIGIT_BINS),
                Use("score_done", j, j + 1)]

    # -- the plan, in LDS -------------------------------------------------------------------
    PW = 12  # plan words a row

    def _plan(self, k, io, job, tab):
        """Wave 0, one row a lane (VGPRs, not SGPRs): per row r the words [active, n, s_lo,
        s_hi, slot_base, pos, btrow] (score_runs' formula; a group is listed at its first
        row; btrow = its last row, whose block table the group reads). All waves read it
        after a barrier."""
        p = self.p
        a = io.args
        R, S, J, MP = p.rows, p.segment, p.score_jobs, p.max_pages
        bt = a.block_table
        with k.if_(k.wave_id().eq(0)):
            lane = _lane(k)
            one, z0 = k.const(1, i32), k.const(0, i32)
            valid = lane < R
            li = k.min(lane, R - 1)
            pos = k.load(a.positions, li, i32)
            prevl = k.min(k.max(lane - 1, 0), R - 1)
            ppos = k.shuffle(pos, prevl)
            pg = k.max(ppos, 0) >> 6
            same = k.load(bt, li * MP + pg, i32).eq(k.load(bt, prevl * MP + pg, i32))
            join = (lane > 0) & valid & pos.eq(ppos + 1) & same
            nxtl = k.min(lane + 1, R - 1)
            jn = k.shuffle(k.select(join, one, z0), nxtl).eq(1) & ((lane + 1) < R)
            run = k.select(valid, one, z0)
            for _ in range(R - 1):
                run = k.select(jn, k.shuffle(run, nxtl) + 1, one)
            n = run
            start = valid & ~join
            zero = k.select(valid, z0, z0)
            segs = k.select(start, (pos + n - 1) / S + 1, zero)
            pairs = (n + 1) >> 1
            cost = segs * pairs
            pre = _scan(k, cost, R) - cost
            C = k.wave_sum(cost)
            den = pairs * J
            lo = k.min((k.max(job * C - pre * J, 0) + den - 1) / den, segs)
            hi = k.min((k.max((job + 1) * C - pre * J, 0) + den - 1) / den, segs)
            act = start & (lo < hi)
            nsl = k.select(act, n * (hi - lo), zero)
            base = _scan(k, nsl, R) - nsl
            last = li + n - 1
            vals = [k.select(act, one, z0), n, lo, hi, base, pos, last, zero, zero, zero, zero, zero]
            for q in range(self.PW // 4):
                k.store(tab, li * self.PW + 4 * q, k.vec(*vals[4 * q:4 * q + 4]), mask=valid)

    def _row(self, k, tab, gi):
        out = []
        for q in range(self.PW // 4):
            v = k.load(tab, gi * self.PW + 4 * q, i32, 4)
            out += [v[i] for i in range(4)]
        return out

    # -- body -------------------------------------------------------------------------------
    @stage_body
    def body(self, k, job, io):
        p = self.p
        R = p.rows
        T = k.W * k.L
        tid = _tid(k)
        tab = k.lds("ix_plan", i32, R * self.PW)
        hist = k.lds("ix_hist", u32, p.hist_slots * FIRST_DIGIT_BINS)
        self._plan(k, io, job, tab)
        io.acquire("ix_qb")
        io.acquire("ix_nb")
        nh = p.hist_slots * FIRST_DIGIT_BINS
        for i0 in range(0, nh, T):
            k.store(hist, k.min(tid + i0, nh - 1), k.const(0, u32), mask=(tid + i0) < nh)
        stage = self._stage_queries(k, io) if p.wgmma else None
        if k.W > 1:
            k.barrier()
        for gi in k.range(R):
            g = self._row(k, tab, gi)
            with k.if_(g[0].eq(1)):
                if p.wgmma:
                    self._group_wgmma(k, io, gi, g, hist, stage)
                else:
                    self._group_mfma(k, io, gi, g, hist, stage)
        if k.W > 1:
            k.barrier()
        self._fixup(k, io, tab, hist)
        if k.W > 1:
            k.barrier()
        self._flush(k, io, tab, hist)
        if k.W > 1:
            k.barrier()
        w0 = k.wave_id().eq(0)
        with k.if_(w0 & io.ok):
            k.fence("release", "device")
        io.publish("score_done", job, k.const(1, u32), mask=w0 & _lane(k).eq(0))

    def _flush(self, k, io, tab, hist):
        p = self.p
        T = k.W * k.L
        tid = _tid(k)
        for gi in k.range(p.rows):
            g = self._row(k, tab, gi)
            act, n, lo, hi, base, posf = g[0], g[1], g[2], g[3], g[4], g[5]
            with k.if_(act.eq(1)):
                tot = (hi - lo) * n * FIRST_DIGIT_BINS
                for i0 in k.range(0, tot, T):
                    idx = i0 + tid
                    sl = idx >> 6
                    b = idx & (FIRST_DIGIT_BINS - 1)
                    seg = lo + sl / n
                    rho = sl % n
                    # a segment past this row's last key (the group's last row sees further)
                    # stays untouched
                    m = (idx < tot) & (seg * p.segment <= posf + rho)
                    v = k.load(hist, (base + sl) * FIRST_DIGIT_BINS + b, u32, mask=m)
                    io.store("score_hist", ((gi + rho) * p.segments + seg) * FIRST_DIGIT_BINS + b,
                             v, mask=m)

    # -- shared pieces ----------------------------------------------------------------------
    def _fixup(self, k, io, tab, hist):
        """The scores of keys this launch writes. The key loops read every visible slot from
        the cache; a slot a row of this launch writes held a stale value there (the key job
        may be writing it), so its score and its histogram count are redone here, after the
        CTA barrier, from the launch's own new key (ix_nb): a wave a (row, new key), f32 dot
        products (fp8 products are exact), one decrement of the stale digit and one increment
        of the new one. Only jobs whose range holds such a key do anything."""
        p = self.p
        a = io.args
        R, H, S, MP, NB = p.rows, p.heads, p.segment, p.max_pages, p.nb_words
        lane = _lane(k)
        for gi in k.range(R):
            g = self._row(k, tab, gi)
            act, n, lo, hi, base, posf, btrow = g[0], g[1], g[2], g[3], g[4], g[5], g[6]
            with k.if_(act.eq(1)):
                key_lo = lo * S
                key_hi = k.min(hi * S, posf + n)
                for u in k.range(R):
                    pu = k.load(a.positions, u, i32)
                    pg = k.max(pu, 0) >> 6
                    same = k.load(a.block_table, btrow * MP + pg, i32).eq(
                        k.load(a.block_table, u * MP + pg, i32))
                    with k.if_(same & (pu >= key_lo) & (pu < key_hi)):
                        for rr in k.range(k.wave_id(), n, k.W):
                            row = gi + rr
                            with k.if_(pu <= posf + rr):
                                score = self._new_dot(k, io, row, u) * k.bitcast(
                                    io.load("ix_nb", u * NB + 32), f32)
                                idx = row * p.capacity + pu
                                old = io.load("scores", idx)
                                slot = (base + ((pu >> int(math.log2(S))) - lo) * n + rr) * FIRST_DIGIT_BINS
                                one = lane.eq(0)
                                k.atomic("add", hist, slot + k.bitcast(ordered_digit(k, old), i32),
                                         k.const(0xFFFFFFFF, u32), mask=one, scope="cta")
                                k.atomic("add", hist, slot + k.bitcast(ordered_digit(k, score), i32),
                                         k.const(1, u32), mask=one, scope="cta")
                                io.store("scores", idx, score, mask=one)

    def _new_dot(self, k, io, row, u):
        """sum_h w[row, h] * relu(q8[row, h] . k8[u]) (uniform f32): lanes over (head, part of
        the 128 bytes), f32 FMAs of exact fp8 products, then lane swaps and a wave sum."""
        p = self.p
        R, H, NB = p.rows, p.heads, p.nb_words
        lane = _lane(k)
        lph = max(1, k.L // 32)  # lanes a head
        words = 32 // lph
        hpb = k.L // lph  # heads a pass
        part = lane & (lph - 1)
        tot = None
        for hb in range(-(-H // hpb)):
            head = hb * hpb + lane / lph
            m = head < H
            hc = k.min(head, H - 1)
            acc = None
            for c in range(words // 4):
                qw = io.load("ix_qb", (hc * R + row) * QW + part * words + 4 * c, 4)
                kw = io.load("ix_nb", u * NB + part * words + 4 * c, 4)
                qf = k.cast(k.bitcast(qw, p.fp8, 16), f32)
                kf = k.cast(k.bitcast(kw, p.fp8, 16), f32)
                acc = qf * kf if acc is None else k.fma(qf, kf, acc)
            d = acc[0]
            for i in range(1, 16):
                d = d + acc[i]
            for sh in range(int(math.log2(lph))):
                d = d + k.lane_swap(d, 1 << sh)
            w = k.bitcast(io.load("ix_nb", row * NB + NW0 + hc), f32)
            t = k.select(m & part.eq(0), k.max(d, 0.0) * w, k.const(0.0, f32))
            s = k.wave_sum(t)
            tot = s if tot is None else tot + s
        return tot

    def _store(self, k, io, hist, g, gi, row_rel, kpos, key_lo, score, valid):
        """One score a lane: scores[row, kpos] and its first digit into the LDS histogram."""
        p = self.p
        n, lo, base, posf = g[1], g[2], g[4], g[5]
        row = gi + row_rel
        ok = valid & (row_rel < n) & (kpos <= posf + row_rel)
        io.store("scores", row * p.capacity + kpos, score, mask=ok)
        slot = base + ((kpos / p.segment) - lo) * n + row_rel
        k.atomic("add", hist, slot * FIRST_DIGIT_BINS + k.bitcast(ordered_digit(k, score), i32),
                 k.const(1, u32), mask=ok, scope="cta")

    def _pipeline(self, k, my_n, locate, load, compute):
        """DEPTH steps in flight: step t + DEPTH's loads issue before step t computes,
        straight from memory into registers (past the end, loads repeat the last step).
        `locate(t)` loads step t's cache page from the block table, `load(t, page)` its keys.
        (Loading the block-table entries a wave-width ahead measured no faster on the H200:
        bench/NOTES.md, index v2.)"""
        ring = [[k.lane_var(x) for x in load(k.const(d, i32), locate(k.const(d, i32)))]
                for d in range(DEPTH)]
        for t0 in k.range(0, my_n, DEPTH):
            for d in range(DEPTH):
                cur = [v.get() for v in ring[d]]
                t = t0 + d
                for v, x in zip(ring[d], load(t + DEPTH, locate(t + DEPTH))):
                    v.set(x)
                with k.if_(t < my_n):
                    compute(t, cur)

    # -- AMD: MFMA, a row pair a wave ---------------------------------------------------------

    def _group_mfma(self, k, io, gi, g, hist, stage):
        p, T = self.p, self.t
        at = T.atom
        a = io.args
        R, H, MP = p.rows, p.heads, p.max_pages
        n, lo, hi, posf, btrow = g[1], g[2], g[3], g[5], g[6]
        bound = posf + n - 1
        key_lo = lo * p.segment
        key_hi = k.min(hi * p.segment, bound + 1)
        ngroups = (key_hi - key_lo + 15) >> 4
        P = (n + 1) >> 1
        w = k.wave_id()
        lane = _lane(k)
        ki, hq = lane & 15, lane >> 4
        kf = hq * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1)  # key after the reduction
        rf = (lane >> 3) & 1  # row of the pair after the reduction
        store_lane = (lane & 1).eq(0)
        # waves over pairs with power-of-two strides (no runtime division): P2 = 2^lp >= P
        # pair slots; wave w takes pair w % P2 and every nsub-th 16-key group from w / P2
        lp = k.cast(P > 1, i32) + k.cast(P > 2, i32) + k.cast(P > 4, i32)
        lw = int(math.log2(k.W))
        lns = k.max(lw - lp, 0)
        nsub = k.const(1, i32) << lns
        j = w >> lp
        for pp in k.range(w & ((k.const(1, i32) << lp) - 1), P, k.W):
            rows = [gi + 2 * pp, gi + 2 * pp + 1]
            have = [k.const(True, "i1"), (2 * pp + 1) < n]
            Bq, Wq = [], []
            zero_u = k.const(0, u32)
            for rho in range(2):
                rb, hb = [], []
                r_ = k.min(rows[rho], R - 1)
                for eta in range(p.halves):
                    head = eta * 16 + ki
                    m = (head < H) & have[rho]
                    qb = (k.min(head, H - 1) * R + r_) * QW + hq * 8
                    v0, v1 = io.load("ix_qb", qb, 4), io.load("ix_qb", qb + 4, 4)
                    wd = [k.select(m, x, zero_u) for x in
                          [v0[i] for i in range(4)] + [v1[i] for i in range(4)]]
                    rb.append([k.bitcast(k.vec(*[wd[wi] for wi in T.b_words[c]]), at.b_dtype,
                                         4 * len(T.b_words[c])) for c in range(T.chunks)])
                    wt = io.load("ix_nb", r_ * p.nb_words + NW0 + k.min(head, H - 1))
                    hb.append(k.bitcast(k.select(m, wt, zero_u), f32))
                Bq.append(rb)
                Wq.append(hb)
            my_n = (ngroups - j + nsub - 1) >> lns

            def first_key(t):  # past the end: the last step again
                return key_lo + (j + k.min(t, my_n - 1) * nsub) * 16

            def locate(t):
                return k.load(a.block_table, btrow * MP + (first_key(t) >> 6), i32)

            def load(t, page):
                p0 = first_key(t)
                base = page * PAGE_WORDS + ((p0 & 63) + ki) * 32 + hq * 8
                lo4 = k.load(a.index_cache, base, u32, 4, nontemporal=True)
                hi4 = k.load(a.index_cache, base + 4, u32, 4, nontemporal=True)
                sc = k.load(a.index_cache, page * PAGE_WORDS + SCALE_WORD0 + (p0 & 63) + kf, f32,
                            nontemporal=True)
                return [lo4, hi4, sc]

            def compute(t, cur):
                p0 = key_lo + (j + t * nsub) * 16
                kw = k.vec(*[cur[0][i] for i in range(4)], *[cur[1][i] for i in range(4)])
                sc = cur[2]
                A = [k.bitcast(k.vec(*[kw[wi] for (_, wi) in T.a_words[c]]), at.a_dtype,
                               4 * len(T.a_words[c])) for c in range(T.chunks)]
                zero4 = k.vec(*[k.const(0.0, f32)] * 4)
                vals = []
                for rho in range(2):
                    v = None
                    for eta in range(p.halves):
                        acc = zero4
                        for c in range(T.chunks):
                            acc = k.mma(at, A[c], Bq[rho][eta][c], acc)
                        term = k.max(acc, 0.0) * Wq[rho][eta]
                        v = term if v is None else v + term
                    vals += [v[i] for i in range(4)]
                for m in (8, 4, 2):
                    half = len(vals) // 2
                    bit = (lane & m).ne(0)
                    keep = [k.select(bit, vals[half + i], vals[i]) for i in range(half)]
                    send = [k.select(bit, vals[i], vals[half + i]) for i in range(half)]
                    vals = [keep[i] + k.lane_swap(send[i], m) for i in range(half)]
                val = vals[0] + k.lane_swap(vals[0], 1)
                score = val * sc
                self._store(k, io, hist, g, gi, 2 * pp + rf, p0 + kf, key_lo, score, store_lane)

            with k.if_(my_n > 0):
                self._pipeline(k, my_n, locate, load, compute)

    # -- Hopper: wgmma, all row pairs on each key load ----------------------------------------
    def _stage_queries(self, k, io):
        """Queries of every row as wgmma B (K-major, per MMA chunk), (R + 1) rows so an odd
        group's last pair reads zeros, and the head weights in the threads' column order."""
        p, T = self.p, self.t
        at = T.atom
        R, H, HP = p.rows, p.heads, p.heads_pad
        ncol = (R + 1) * HP
        cb = ncol // 8 * 256  # bytes a chunk
        qs = k.lds("ix_qstage", u32, T.chunks * cb // 4)
        off = k.lds_offset("ix_qstage")
        tid = _tid(k)
        Tn = k.W * k.L
        for c in range(T.chunks):
            for kk4 in range(8):
                wsrc = T.perm[c * 32 + 4 * kk4] // 4
                for n0 in range(0, ncol, Tn):
                    nn = n0 + tid
                    row, head = nn / HP, nn % HP
                    m = (nn < ncol) & (row < R) & (head < H)
                    v = io.load("ix_qb", (k.min(head, H - 1) * R + k.min(row, R - 1)) * QW + wsrc,
                                mask=m)
                    boff = c * cb + (nn >> 3) * 256 + (kk4 >> 2) * 128 + (nn & 7) * 16 + (kk4 & 3) * 4
                    k.store(qs, boff >> 2, v, mask=nn < ncol)
        # weights: wl[(row * 4 + t) * NH + jj] = w[row, head of thread t's jj-th column]
        NH = HP // 4
        heads_t = self._wg_heads()
        wl = k.lds("ix_wstage", f32, R * 4 * NH)
        for i0 in range(0, R * 4 * NH, Tn):
            i = i0 + tid
            m = i < R * 4 * NH
            row = i / (4 * NH)
            t = (i / NH) % 4
            jj = i % NH
            head = self._pick_head(k, heads_t, t, jj)
            mm = m & (head < H)
            v = k.bitcast(io.load("ix_nb", k.min(row, R - 1) * p.nb_words + NW0 + k.min(head, H - 1),
                                  mask=mm), f32)
            k.store(wl, k.min(i, R * 4 * NH - 1), v, mask=m)
        descs = [at.smem_descriptor(off + c * cb) for c in range(T.chunks)]
        return dict(wl=wl, descs=descs, NH=NH)

    def _wg_heads(self):
        """For thread t (lane % 4) of a warp: its columns' heads (row 0 of the pair), in slot
        order, and for each accumulator slot i: (key h, row rho, column index jj)."""
        p, at = self.p, self.t.atom
        HP = p.heads_pad
        rows, cols = at.c_rows(), at.c_cols()
        per_t = {}
        slot_map = None
        for lane in range(32):
            t, g = lane % 4, lane // 4
            hs = []
            sm = []
            for i in range(at.c_slots):
                r, n = int(rows[lane, i]), int(cols[lane, i])
                h = {g: 0, g + 8: 1}.get(r)
                if h is None:
                    raise ValueError(f"{at.name}: accumulator slot {i} of lane {lane} holds row {r}")
                rho, head = divmod(n, HP)
                if rho == 0 and head not in hs:
                    hs.append(head)
                sm.append((h, rho, head))
            if t in per_t and per_t[t] != hs:
                raise ValueError(f"{at.name}: columns of thread {t} differ across groups")
            per_t[t] = hs
            smt = [(h, rho, per_t[t].index(head)) for (h, rho, head) in sm]
            if slot_map is not None and slot_map != smt:
                raise ValueError(f"{at.name}: accumulator slots differ across lanes")
            slot_map = smt
        self._slot_map = slot_map
        return [per_t[t] for t in range(4)]

    def _wide_atom(self):
        """The wgmma whose N spans every pair of the plan's rows (None with one pair)."""
        p = self.p
        return wgmma_e4m3(2 * p.pairs * p.heads_pad) if p.pairs > 1 else None

    def _wide_slot_maps(self, wide):
        """Per pair pp: [(slot, key h, row rho of the pair, column index jj)] of the wide
        accumulator, checked to repeat the narrow atom's per-thread head order (so the staged
        head weights serve both)."""
        p = self.p
        HP = p.heads_pad
        rows, cols = wide.c_rows(), wide.c_cols()
        narrow = self._slot_map
        maps = None
        for lane in range(32):
            g = lane // 4
            per = [[] for _ in range(p.pairs)]
            for i in range(wide.c_slots):
                r, n = int(rows[lane, i]), int(cols[lane, i])
                h = {g: 0, g + 8: 1}.get(r)
                if h is None:
                    raise ValueError(f"{wide.name}: accumulator slot {i} of lane {lane} holds row {r}")
                row, head = divmod(n, HP)
                per[row // 2].append((i, h, row % 2, head))
            if maps is None:
                maps = per
            elif [[x[:3] for x in m] for m in maps] != [[x[:3] for x in m] for m in per]:
                raise ValueError(f"{wide.name}: accumulator slots differ across lanes")
        out = []
        for m in maps:
            if [(h, rho) for (_, h, rho, _) in m] != [(h, rho) for (h, rho, _) in narrow]:
                raise ValueError(f"{wide.name}: a pair's slots do not follow the narrow atom's")
            out.append([(i, h, rho, jj) for (i, h, rho, _), (_, _, jj) in zip(m, narrow)])
        return out

    @staticmethod
    def _pick_head(k, heads_t, t, jj):
        out = k.const(heads_t[0][0], i32) + 0 * jj
        for tt in range(4):
            for q, hd in enumerate(heads_t[tt]):
                out = k.select(t.eq(tt) & jj.eq(q), k.const(hd, i32), out)
        return out

    def _group_wgmma(self, k, io, gi, g, hist, stage):
        p, T = self.p, self.t
        at = T.atom
        a = io.args
        MP, HP = p.max_pages, p.heads_pad
        n, lo, hi, posf, btrow = g[1], g[2], g[3], g[5], g[6]
        bound = posf + n - 1
        key_lo = lo * p.segment
        key_hi = k.min(hi * p.segment, bound + 1)
        nblocks = (key_hi - key_lo + 63) >> 6
        P = (n + 1) >> 1
        w = k.wave_id()
        wg, ww, nwg = w >> 2, w & 3, k.W // 4
        lane = _lane(k)
        g8, t4 = lane >> 2, lane & 3
        kf = ww * 16 + g8 + ((t4 >> 1) & 1) * 8
        rf = t4 & 1
        NH = stage["NH"]
        slot_map = self._slot_map
        my_n = (nblocks - wg + nwg - 1) / nwg

        def locate(t):  # past the end: the last step again
            b0 = key_lo + (wg + k.min(t, my_n - 1) * nwg) * 64
            return k.load(a.block_table, btrow * MP + (b0 >> 6), i32)

        def load(t, page):
            out = []
            for h in range(2):
                base = page * PAGE_WORDS + (ww * 16 + g8 + 8 * h) * 32 + t4 * 8
                out.append(k.load(a.index_cache, base, u32, 4, nontemporal=True))
                out.append(k.load(a.index_cache, base + 4, u32, 4, nontemporal=True))
            out.append(k.load(a.index_cache, page * PAGE_WORDS + SCALE_WORD0 + kf, f32,
                              nontemporal=True))
            return out

        def operands(cur):
            kw = [k.vec(*[cur[2 * h][i] for i in range(4)], *[cur[2 * h + 1][i] for i in range(4)])
                  for h in range(2)]
            return [k.bitcast(k.vec(*[kw[h][wi] for (h, wi) in T.a_words[c]]), at.a_dtype,
                              4 * len(T.a_words[c])) for c in range(T.chunks)]

        def chain(atom, A, ra):
            """One wgmma per MMA chunk, B = the staged query columns from row ra on."""
            off = k.cast(ra * (HP // 8) * 256 // 16, u64)
            k.wgmma_fence()
            acc = k.vec(*[k.const(0.0, f32)] * atom.c_slots)
            for c in range(T.chunks):
                acc = k.wgmma(atom, A[c], k.const(stage["descs"][c], u64) + off, acc)
            k.wgmma_commit()
            k.wgmma_wait(0)
            return acc

        def finish(acc, smap, pp, b0, sc):
            """Pair pp's scores from the accumulator slots `smap` lists for it: relu, head
            weights, the quad's butterfly, the key scale, the store."""
            ra = gi + 2 * pp
            wv = []
            for rho in range(2):
                b = ((k.min(ra + rho, p.rows - 1)) * 4 + t4) * NH
                parts = [k.load(stage["wl"], b + c4, f32, min(4, NH - c4)) for c4 in range(0, NH, 4)]
                wv.append([x[i] if x.n > 1 else x for x in parts for i in range(x.n)])
            vals = [None] * 4
            for i, h, rho, jj in smap:  # one fma a head (not a rounded product, then a sum)
                q = 2 * h + rho
                r = k.max(acc[i], 0.0)
                vals[q] = r * wv[rho][jj] if vals[q] is None else k.fma(r, wv[rho][jj], vals[q])
            for m in (2, 1):
                half = len(vals) // 2
                bit = (lane & m).ne(0)
                keep = [k.select(bit, vals[half + i], vals[i]) for i in range(half)]
                send = [k.select(bit, vals[i], vals[half + i]) for i in range(half)]
                vals = [keep[i] + k.lane_swap(send[i], m) for i in range(half)]
            self._store(k, io, hist, g, gi, 2 * pp + rf, b0 + kf, key_lo, vals[0] * sc,
                        k.const(True, "i1"))

        narrow_map = [(i, h, rho, jj) for i, (h, rho, jj) in enumerate(slot_map)]

        def compute(t, cur):
            """A pair at a time: N = 2 rows x heads."""
            b0 = key_lo + (wg + t * nwg) * 64
            A = operands(cur)
            for pp in k.range(P):
                finish(chain(at, A, gi + 2 * pp), narrow_map, pp, b0, cur[4])

        wide = self._wide_atom()
        wide_maps = self._wide_slot_maps(wide) if wide is not None else None

        def compute_wide(t, cur):
            """Every pair of the group in ONE chain (N = 2 x pairs x heads): a wgmma's A
            operand comes from registers once per instruction, so the narrow N = 64 chains ran
            at about a quarter of the tensor rate (H200: 4 pairs took 4x one pair's time,
            ~18 us per pair at 512K keys, with or without batching the four chains)."""
            b0 = key_lo + (wg + t * nwg) * 64
            acc = chain(wide, operands(cur), gi)
            for pp in range(p.pairs):
                finish(acc, wide_maps[pp], pp, b0, cur[4])

        with k.if_(my_n > 0):
            if wide is None:
                self._pipeline(k, my_n, locate, load, compute)
            else:
                with k.if_else(P.eq(p.pairs)) as (all_pairs, fewer):
                    with all_pairs:
                        self._pipeline(k, my_n, locate, load, compute_wide)
                    with fewer:
                        self._pipeline(k, my_n, locate, load, compute)

    def reference(self, env):
        from .index_ref import score_reference
        return score_reference(self.p, env)


# ------------------------------------------------------------------------------ consumers

def wait_scored(k, io, p: IndexPlan):
    """For a consumer stage: wait for every scoring job's `score_done` pair, then an acquire
    fence; `scores` and `score_hist` may then be read with plain loads. Declare
    `scored_reads(p)` among the consumer's reads."""
    J = p.score_jobs
    lane = _lane(k)
    for j0 in range(0, J, k.L):
        j = j0 + lane
        io.wait("score_done", k.min(j, J - 1), mask=j < J)
    k.fence("acquire", "device")


def scored_reads(p: IndexPlan) -> list:
    return [Use("score_done", 0, p.score_jobs)]


# -------------------------------------------------------------------------------- launch

def index_stages(p: IndexPlan) -> list:
    return [IndexProj(p), IndexQ(p), IndexKey(p), IndexScore(p)]


def check_inputs(p: IndexPlan, positions, block_table, cache_pages=None):
    """ValueError naming the row and the value: a position outside [0, capacity), a
    block-table entry < 0 (or past the cache) for a page a row reads or writes, two rows
    on one cache slot."""
    from .front import _host
    pos = _host(positions).reshape(-1)
    bt = _host(block_table)
    pages = p.cache_pages if cache_pages is None else cache_pages
    if pos.shape != (p.rows,):
        raise ValueError(f"index: positions has shape {pos.shape}, expected ({p.rows},)")
    if bt.size != p.rows * p.max_pages:
        raise ValueError(f"index: block_table has shape {bt.shape}, expected "
                         f"({p.rows}, {p.max_pages})")
    bt = bt.reshape(p.rows, p.max_pages)
    seen = {}
    for r in range(p.rows):
        x = int(pos[r])
        if not 0 <= x < p.capacity:
            raise ValueError(f"index: row {r}: position {x} outside [0, {p.capacity})")
        for pg in range(x // PAGE + 1):
            e = int(bt[r, pg])
            if not 0 <= e < pages:
                raise ValueError(f"index: row {r}: block_table[{r}, {pg}] = {e}: a page the row "
                                 f"reads (positions up to {x}) must be in [0, {pages})")
        slot = int(bt[r, x // PAGE]) * PAGE + x % PAGE
        if slot in seen:
            raise ValueError(f"index: rows {seen[slot]} and {r} both write cache slot {slot}")
        seen[slot] = r


class IndexLaunch(Launch):
    """A Launch that validates positions and block tables before any run."""

    def __init__(self, name, p: IndexPlan, stages, **kw):
        self.plan = p
        super().__init__(name, stages, grid=p.grid, waves=p.waves, **kw)

    def check_inputs(self, inputs: dict):
        cache = inputs.get("index_cache")
        pages = None if cache is None else int(np.prod(cache.shape)) // PAGE_BYTES
        check_inputs(self.plan, inputs["positions"], inputs["block_table"], pages)
        if self.plan.source == "front":
            from .front import check_inputs as front_check
            front_check(self.plan.front, inputs["positions"], inputs["block_table"])

    def _buffers(self, inputs, *args, **kw):
        self.check_inputs(inputs)
        return super()._buffers(inputs, *args, **kw)

    def run_interp(self, inputs, **kw):
        if self.plan.wgmma and kw.get("wave_size") is None:
            kw["wave_size"] = 32
        return super().run_interp(inputs, **kw)

    # -- the fused selection (kind `index`) -----------------------------------------------
    select_cfg = None  # its SelectConfig, where the launch selects

    def reference(self, inputs: dict) -> dict:
        """The stages' float64 references, the selection's excepted: its outputs are exact
        on the kernel's OWN scores (exact_errors), which a float64 reference is not."""
        from types import SimpleNamespace
        from .select import SelectPass
        rest = [st for st in self.stages if not isinstance(st, SelectPass)]
        return Launch.reference(SimpleNamespace(stages=rest), inputs)

    def exact_errors(self, inputs: dict, outputs: dict, regions: dict) -> dict:
        """{topk, topk_diag: {rel_err, tol 0, ok}}: the selection's outputs against an
        independent exact top-k (stages.select.reference_select: layouts.scores
        .exact_topk_positions, a float64 sort) of the scores this run wrote (the `scores`
        region), rows' keys 0..positions[r], slots through the block table; rel_err is
        the fraction of words that differ. {} for a launch without the selection."""
        c = self.select_cfg
        if c is None:
            return {}
        from .select import reference_select
        nm = c.names
        n = c.n_of(np.asarray(inputs[nm.n_keys]).reshape(-1))
        want = reference_select(np.asarray(regions[nm.scores], np.float32), n,
                                np.asarray(inputs[nm.block_table]).reshape(c.rows, -1), c.topk)
        out = {}
        for name, w in zip((nm.out, nm.diag), want):
            got = np.asarray(outputs[name]).reshape(w.shape).astype(np.int64)
            bad = float(np.mean(got != w.astype(np.int64)))
            out[name] = dict(rel_err=bad, tol=0.0, ok=bad == 0.0)
        return out


def index_scoring_launch(spec, **kw) -> IndexLaunch:
    """Kind `index_scoring`: projections + cache append + scoring from h and qr (inputs).
    Keywords: grid, waves, chip (interp: whose atoms/format), capacity, cache_pages, segment,
    score_jobs, k_splits, q_splits (plan()); the rest go to Launch."""
    pk = {n: kw.pop(n) for n in ("grid", "waves", "chip", "capacity", "cache_pages", "segment",
                                 "score_jobs", "k_splits", "q_splits") if n in kw}
    p = plan(spec, **pk)
    return IndexLaunch("index_scoring", p, index_stages(p), **kw)


def _front_post():
    from .front import _Post
    return _Post


class IndexQR(_front_post()):
    """From the front (kind `index`): qr[r] = RMSNorm(q_a[r]) * g_q with q_a = rs(x_r) *
    sum_s front_part[s, r, :q_lora] (the front_q math, the front's helpers), rounded to bf16
    as the front's qr, into the bulk region `ix_qr` the q heads acquire (the front's `qr`
    output buffer is no region a later stage can wait on)."""
    name = "ix_qr"
    rel_tol = 2.0 ** -8 + 1e-5

    def __init__(self, p: IndexPlan):
        super().__init__(p.front)
        self.ip = p
        self.lo, self.hi = 0, p.q_lora

    def regions(self):
        ip = self.ip
        return [BulkBuffer("ix_qr", bf16, (ip.rows, ip.q_lora), publishers=ip.rows)]

    def buffers(self):
        p = self.p
        return {"x": Buffer(bf16, (p.rows, p.hidden)), "q_a_norm_w": Buffer(bf16, (p.q_lora,))}

    def writes(self, r):
        q = self.ip.q_lora
        return [Use("ix_qr", r * q, (r + 1) * q)]

    @stage_body
    def body(self, k, job, io):
        p = self.p
        a = io.args
        lds = k.lds("ix_qr_red", f32, 2 * k.W)
        k.barrier()
        ys, _ = self.reduce_row(k, io, a, job, lds, 0, 0, p.q_lora)
        qr = self.norm(k, ys, a.q_a_norm_w, lds, 1, p.q_lora)
        for e, v, m in qr:
            io.store("ix_qr", job * p.q_lora + e, k.cast(v, bf16), mask=m)
        io.release("ix_qr")

    def reference(self, env):
        return {}


INTERP_TOPK_CONTEXT = 2048 + 2 * PAGE  # keys the interpreter's `index` cache holds past K


def index_launch(spec, **kw) -> IndexLaunch:
    """Kind `index`: the front (stages.front: RMSNorm, q_a | kv_a, qr, the MLA cache), the
    indexer (qr from the front's partial sums, the key/weight projections from x * g with
    the front's rs, cache append, scoring) and the exact top-k of its scores (stages.select,
    fused after the scoring: topk [rows, index_topk] int32 slots, topk_diag [rows, 4]) in
    one persistent kernel. Keywords as index_scoring_launch plus the front's (splits)."""
    from .front import front_stages, plan as front_plan
    fk = {n: kw.pop(n) for n in ("splits", "cache_pages") if n in kw}
    pk = {n: kw.pop(n) for n in ("grid", "waves", "chip", "segment", "score_jobs", "k_splits",
                                 "q_splits") if n in kw}
    chip = pk.get("chip") or (spec.target if spec.target != "interp" else "gfx950")
    fp8 = "fp8e4m3fnuz" if chip == "gfx942" else "fp8e4m3fn"
    fw = pk.get("waves") or (4 if chip == SM90 and spec.target == "interp" else None)
    if "cache_pages" not in fk:  # every page of a row's context mapped (the scoring reads them)
        cap = -(-spec.config.max_context // PAGE)
        # interp: room for a context past the selection's K = 2048 keys (check_topk --through
        # index checks rows that have more keys than they select)
        interp_pages = -(-(INTERP_TOPK_CONTEXT) // PAGE)
        fk["cache_pages"] = 4 * spec.rows + (interp_pages if spec.target == "interp" else cap)
    fp = front_plan(spec, grid=pk.get("grid"), waves=fw, fp8=fp8, **fk)
    seg = pk.pop("segment", None) or max(GPU_SEGMENT if spec.target != "interp" else INTERP_SEGMENT,
                                         fp.capacity // 32)
    p = plan(spec, capacity=fp.capacity, cache_pages=fp.cache_pages, segment=seg,
             **{**pk, "grid": fp.grid, "waves": fp.waves})
    from dataclasses import replace
    p = replace(p, source="front", front=fp).check()
    front = [reloaded(st) for st in front_stages(fp)]
    cfg = select_config(p, spec)
    L = IndexLaunch("index", p, front + [IndexQR(p)] + index_stages(p) + fused_select(p, cfg),
                    **kw)
    L.select_cfg = cfg
    return L


def select_config(p: IndexPlan, spec):
    """The exact top-k of the launch's own scores (stages.select, DESIGN.md section 7): the
    scoring's layout (rows, capacity, segment), each row's keys 0..positions[r] through its
    block-table row, K = the config's index_topk; up to grid / rows slice jobs a row."""
    from . import select as sel
    return sel.SelectConfig(ScoresLayout(p.rows, p.capacity, p.segment),
                            max_slices=max(1, min(sel.MAX_SLICES, p.grid // p.rows)),
                            topk=spec.config.index_topk, bt_width=p.max_pages, positions=True,
                            names=sel.Names(n_keys="positions"))


def fused_select(p: IndexPlan, cfg) -> list:
    """The selection after the scoring: it reads the plain `scores` and `score_hist` once
    every `score_done` pair is in (wait_scored), as stages/select.py documents."""
    from . import select as sel
    ready = sel.Ready(lambda r: scored_reads(p), lambda k, io: wait_scored(k, io, p))
    return sel.select_stages(cfg, scores="plain", hist="plain", ready=ready)


def _request(launch, rng, pos):
    """One request of R rows whose last row sits at `pos` (default: random, under 512 keys
    in the interpreter, 8192 on a GPU); sets the scoring's byte-floor context."""
    p = launch.plan
    if pos is None:
        top = 512 if p.target == "interp" else min(p.capacity, 8192)
        pos = int(rng.integers(p.rows - 1, top))
    if not p.rows - 1 <= pos < p.capacity:
        raise ValueError(f"index: pos {pos} must be in [{p.rows - 1}, {p.capacity})")
    for st in launch.stages:
        if isinstance(st, IndexScore):
            st.keys_read = pos + 1
    return [(p.rows, pos - p.rows + 1)]


def _kind_inputs(launch, spec, rng, pos=None):
    from .index_ref import make_inputs
    return make_inputs(launch.plan, rng, _request(launch, rng, pos))


from .kinds import Kind, register  # noqa: E402

def _index_inputs(launch, spec, rng, pos=None):
    """The front's inputs and the indexer's for one request of R rows under 512 keys, every
    page of it mapped (the scoring reads all of them)."""
    from .front import make_inputs as front_inputs
    from .index_ref import make_inputs, request_layout
    p = launch.plan
    req = _request(launch, rng, pos)
    fin = front_inputs(p.front, rng, req)
    ix = make_inputs(p, rng, req, layout=request_layout(p, rng, req))
    fin.update({n: v for n, v in ix.items() if n not in ("h", "qr")})
    c = launch.select_cfg
    if c is not None:  # poisoned (as stages.select.make_inputs): the kernel must write them
        from .select import DIAG_WORDS
        fin[c.names.out] = np.full((c.rows, c.topk), -2, np.int32)
        fin[c.names.diag] = np.full((c.rows, DIAG_WORDS), 0xFFFFFFFF, np.uint32)
    return fin


register(Kind("index", "the MoE layer's front and its own indexer (so far): the front "
              "(RMSNorm, q_a | kv_a, qr, MLA cache) + index projections from its partial sums, "
              "the key cache append, the scores of every visible key with first-digit "
              "histograms, and their exact top-k (topk slots, topk_diag)", index_launch,
              _index_inputs))
register(Kind("index_scoring", "the indexer from h and qr: index projections (q heads, key "
              "LayerNorm, rope, Hadamard, FP8), the key cache append, and the scores of every "
              "visible key with first-digit histograms (index = front + this)",
              index_scoring_launch, _kind_inputs))
