"""The layer's front (issue 5 item 1), launch kind "front": for R rows of the residual x

    h      = RMSNorm(x) * g_attn                          (bf16 x, bf16 weight, eps cfg.rms_eps)
    q_a | kv_a = W h                                      (FP8 W [front_out, hidden], 128x128
                                                           fp32 block scales, fp32 accumulation)
    qr     = RMSNorm(q_a) * g_q                           -> output `qr`, bf16 [R, q_lora_rank]
    c      = RMSNorm(kv_a[:kv_lora]) * g_kv               -> MLA cache, latent part
    k_rope = rope(kv_a[kv_lora:], position)               -> MLA cache, rope part (bf16)

Three stages, every number from the spec (`FrontPlan`):

  front_proj[t*S + s]   T row tiles of TILE_N=64 outputs x S K-splits, on the tensor cores
                        (stages/mma_tile.py: the chip's bf16 MMA, 16 weight rows as A, the
                        activation rows as B, K permuted inside each 128-block so every lane
                        loads 32 contiguous weight bytes a row a block, nontemporal, all of a
                        job's blocks in flight before the first MMA). The job stages its K-chunk
                        of the activations a = x * g_attn for all R rows in LDS once: a is exact
                        in f32 (a product of two bf16: 16 significant bits) but not in bf16, so
                        it is fed as two bf16 halves hi + lo (hi = a with its low 16 bits
                        cleared, lo = a - hi, both exact), every product W * hi, W * lo exact,
                        only the f32 accumulation rounds: the tolerance stays 1e-5 (an MMA fed
                        bf16(a) would be off by ~2^-9 relative: test_mma_tile's negative
                        control). Each 128-block's MMA sum is scaled once by its fp32 block
                        scale. It publishes the partial sums
                            front_part[s, r, n] = sum_{k in split s} Wdq[n, k] * x[r, k] * g[k]
                        with plain stores, then (CTA barrier, device release) its flag, one
                        tagged pair per job in front_done [T*S] (a shared counter would make
                        hundreds of jobs queue on one compare-and-swap word).
                        The row's 1/rms(x) is a per-row scalar of RMSNorm, so it is applied
                        after the reduction (exact algebra: W (x * rs * g) = rs * W (x * g));
                        h is never rounded (the activations keep 16 significant bits).
  front_q[r]            waits for the flags of the q tiles' jobs (its threads poll them in
                        parallel; CTA barrier; device acquire), then
                        q_a = rs(x_r) * sum_{s=0..S-1} part[s, r, :q]
                        (the FIXED order s = 0, 1, ...: the same bits on every run and every
                        schedule), RMSNorm -> qr (bf16). Everything that needs only inputs
                        (1/rms(x), the norm weights, front_kv's rope angles) comes before the
                        wait, and every partial sum is loaded at once after it: the tail past
                        the last projection job is one L2 round trip (v21: front -0.4 us).
  front_kv[r]           the same sum for kv_a; RMSNorm of the latent, interleaved rope of the
                        64 rope dims (pairs (2i, 2i+1), inv_freq_i = theta^(-2i/rope),
                        theta = cfg.rope_theta), and the row's cache token written at
                        slot = block_table[r, pos // 64] * 64 + pos % 64.

K-split S (`k_splits`): one round of jobs when it can: the smallest divisor of hidden/128
(>= cfg.front_k_splits) whose T*S jobs fill ONE_ROUND_FILL..1 of the grid with the job's staged
activations in at most STAGING_LDS_SHARE of the CTA's LDS; else the smallest that gives T*S >=
the grid's CTAs with a balance (T*S/G) / ceil(T*S/G) >= 0.8; else the smallest that fills the
grid; else hidden/128. GLM-5 (T = 41): sm_90a (132 SMs) S = 3 (123 jobs of 128 KB, one round),
gfx950 (256 CUs) S = 6 (246 jobs, one round), gfx942 (304) S = 12; tiny (T = 7) on the
interpreter's 8 CTAs: S = 2.

MLA cache token (cfg.mla_cache_bytes(kv) bytes, kv_cache is u8 [pages * 64, bytes]):
  fp8  [0, kv_lora)                    e4m3 latent (e4m3fnuz on gfx942, with fmax 240)
       [kv_lora, +4*kv_lora/128)       fp32 scale per 128 values: the smallest power of two s
                                       with s * fmax >= max(amax, 1e-4) (fmax 448, or 240 on
                                       gfx942); latent byte = fp8(c / s) (RNE, exact division)
       [.., +2*rope)                   bf16 roped k
  bf16 [0, 2*kv_lora) bf16 latent, [2*kv_lora, +2*rope) bf16 roped k.
c is quantized from its f32 value (never rounded to bf16 first).

Rope angles: pos * inv_freq_i is reduced exactly, in 0.64 fixed-point revolutions (a wrapping
u64 product of the position and the pair's frequency inv_freq_i / 2pi * 2^64), to a quadrant
and a remainder of at most pi/4, whose sine and cosine are Taylor polynomials in f32 (error
< 3e-7 at any position; f32 angles would be off by ~0.03 rad at 2^19): no sin/cos intrinsic,
the same bits on every backend. A lane forms its pair's frequency from round(2^64 / 2pi) and
five fixed-point powers rho^(2^b), rho = theta^(-2/rope), by 64x64 -> high-64 products (five
u64 constants instead of 32 per-lane ones, which LLVM hoists into ~50 VGPRs on AMD).

Waves per CTA: 4 on AMD (wave64), 8 on NVIDIA (warp32), 2 in the interpreter; the same stage
text for every wave size: with 4 waves each owns one 16-row m-tile of the job's 64 rows, with 8
two waves share an m-tile (K halves, summed through LDS in wave order), with 2 each runs two.

Invalid input: a position outside [0, max_context) (the block table spans max_context/64
pages), a block-table entry of -1 (or >= the cache's pages) for a row's page, or two rows on
one slot raise ValueError naming the row and the value before launch (FrontLaunch); the
kernel checks the same (but duplicates) itself and, on a bad row, writes no output (every
front_q/front_kv job checks every row) and records the failure in the error word
(LaunchFailed: "... rejected invalid input: a row's position is outside [0, capacity) ...").

Speed: the projection's FMAs run on the tensor cores (bf16 MMA, f32 accumulation), a few
VALU instructions per weight byte convert e4m3 -> bf16 (exact) whatever R is; the weights are
the only bytes a job streams from HBM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from layouts.offsets import Access
from layouts.regions import PlainBuffer, TaggedPairs
from monokernel import numerics
from monokernel.types import bf16, dtype as as_dtype, f32, fp8e4m3fn, i32, i64, u8, u32, u64
from spec.config import FP8_SCALE_BLOCK, KEY_PAGE_TOKENS

from . import mma_tile, wgmma_proj
from .base import Buffer, Job, Stage, Use
from .launch import Launch

TILE_N = 64  # output rows per projection job
BLOCK = FP8_SCALE_BLOCK  # weight scale block (128 x 128) and cache scale block (128 values)
PAGE = KEY_PAGE_TOKENS  # tokens per cache page
POST_VEC = 4  # elements per thread in front_q / front_kv
SCALE_FLOOR = float(np.float32(1e-4))  # amax clamp of the cache scale rule
# error-word texts of the kernel's own input checks ("invalid input" is how the linker's
# error decoding tells a rejected input from a timed-out wait)
BAD_POSITION = ("invalid input: a row's position is outside [0, {cap}) (the cache capacity); "
                "no output was written")
BAD_PAGE = ("invalid input: a row's block-table entry for its page is -1 or past the cache's "
            "{pages} pages; no output was written")

DEFAULT_WAVES = {"interp": 2, "amd": 4, "nvidia": 8}
# the front KIND on NVIDIA (front_launch; the index kinds keep plan()'s defaults): two CTAs of
# 4 warps an SM (264 CTAs on the H200, K split 6: one round of 246 jobs of 64 KB) and
# front_proj's weight ring unrolled: r8 14.4 -> 11.9 us, r2 12.4 -> 10.6 (bench/NOTES.md v16)
FRONT_KIND_NVIDIA_WAVES = 4
FRONT_KIND_NVIDIA_CTAS_PER_SM = 2
# ... and in that shape its projection on the fp8 warpgroup MMA with x * g as two e4m3 terms
# (about bf16's 8 significant bits, the precision the model rounds h to; check_layer's qr
# within 1.9e-3 .. 3.0e-3 of the float64 reference, tolerance 4e-3, rows 2 / 4 / 8, fp8 and
# bf16 caches) and every weight block of a job by TMA into LDS (FrontProj.tma_weights). H100,
# one process, the old defaults against these (bench/NOTES.md v51): r8 12.34 -> 11.23 us, r4
# 11.09 -> 10.74, r2 11.20 -> 10.71 (v50b: three terms 0.919 / 0.993 / 0.990 of the old at
# r8 / r4 / r2). Either stays a stage tunable (front_proj.act_terms=0,front_proj.tma_weights=0:
# the bf16 tile).
FRONT_KIND_NVIDIA_ACT_TERMS = 2
FRONT_KIND_NVIDIA_TMA_WEIGHTS = True
POST_JOBS_PER_ROW = 2  # front_q and front_kv: one job a row each
ONE_ROUND_FILL = 0.9  # k_splits: one round of jobs on at least this share of the CTAs
STAGING_LDS_SHARE = 0.5  # k_splits: the most of a CTA's LDS a job's staged activations take
# (the fused index launch's scoring and selection stages need the rest)
INTERP_GRID = 8


# ------------------------------------------------------------------------------------ plan

def k_splits(cfg, tiles: int, grid: int, rows: int = 8, lds_bytes: int | None = None) -> int:
    """The K-split count (module doc). One round first: the smallest split whose jobs fill
    at least ONE_ROUND_FILL of the grid without exceeding it, if a job's staged activations
    (rows x 2 halves x its chunk, mma_tile.act_lds_words) fit `lds_bytes`: on the H200 a
    round of 123 jobs of 128 KB beat two rounds of 246 jobs of 64 KB by 1.0-1.5 us at 8 and
    2 rows (bench/NOTES.md v7: every job of a round waits, computes and publishes at the same
    time, so a second round repeats the idle memory phases)."""
    blocks = cfg.hidden // BLOCK
    divs = [d for d in range(1, blocks + 1) if blocks % d == 0 and d >= max(cfg.front_k_splits, 1)]
    if not divs:
        raise ValueError(f"{cfg.name}: front_k_splits {cfg.front_k_splits} exceeds the "
                         f"{blocks} scale blocks of hidden {cfg.hidden}")
    halves = 2  # x * g staged as exact bf16 hi and lo halves (module doc)
    for d in divs:
        staged = 4 * halves * rows * mma_tile.act_row_words(cfg.hidden // d)  # bytes
        fits = lds_bytes is None or staged <= STAGING_LDS_SHARE * lds_bytes
        if ONE_ROUND_FILL * grid <= tiles * d <= grid and fits:
            return d
    fill = [d for d in divs if tiles * d >= grid]
    for d in fill:
        jobs = tiles * d
        if jobs / grid / math.ceil(jobs / grid) >= 0.8:
            return d
    return fill[0] if fill else divs[-1]


TAGGED_BATCH, TAGGED_PROBE = 1, 2  # FrontPlan.tagged_parts' forms


@dataclass(frozen=True)
class FrontPlan:
    """Every number the front's stages use, from the build spec."""
    config: object  # spec.ModelConfig
    rows: int
    kv: str
    target: str
    fp8: object  # DType of weights and the fp8 cache (e4m3fnuz on gfx942)
    grid: int
    waves: int
    splits: int
    cache_pages: int
    chip: str | None = None  # interp only: whose bf16 MMA a wave64 runs (default gfx950's)
    # front_part as tagged pairs (launch tunable tagged_parts): each partial sum published
    # as its own (value, tag) word, no fence and no job flag; the post jobs poll the words
    # themselves, all of a thread's at once (Mailbox.wait_all). Why: the flag form puts a
    # release fence and a barrier in every projection job and two round trips (the flag,
    # then the data) in front of the tail; this one round trip once the data lands. Exact
    # but much SLOWER on an H100 (bench/NOTES.md v54, same process: front r8 11.27 ->
    # 16.95 us, form 2 15.42; r2 1.18 / 1.11; the fused index r8 unchanged): the polling
    # rounds' loads compete with the weight stream and the stores they wait for. Off.
    # 0: the flags; 1 (TAGGED_BATCH): every round loads all of a thread's words; 2
    # (TAGGED_PROBE): a thread first polls one of its words alone (the poll op), then the
    # rounds: the long wait for the projection costs one word a round of L2 traffic, not all
    tagged_parts: int = 0

    @property
    def hidden(self): return self.config.hidden
    @property
    def n_out(self): return self.config.front_out
    @property
    def q_lora(self): return self.config.q_lora_rank
    @property
    def kv_lora(self): return self.config.kv_lora_rank
    @property
    def rope(self): return self.config.qk_rope
    @property
    def tiles(self): return self.n_out // TILE_N
    @property
    def chunk(self): return self.hidden // self.splits  # K per projection job
    @property
    def eps(self): return float(self.config.rms_eps)
    @property
    def token_bytes(self): return self.config.mla_cache_bytes(self.kv)
    @property
    def max_pages(self): return -(-self.config.max_context // PAGE)  # block-table width
    @property
    def capacity(self): return self.max_pages * PAGE  # positions a row may write
    @property
    def fp8_max(self): return numerics.FP8_MAX[self.fp8.name]
    @property
    def scale_blocks(self): return self.kv_lora // BLOCK
    @property
    def weight_scale_rows(self): return -(-self.n_out // BLOCK)

    def check(self):
        c = self.config
        if self.rows not in (1, 2, 4, 8):
            raise ValueError(f"front: {self.rows} rows; the projection's lane groups hold at most 8")
        for what, v in (("q_lora_rank", c.q_lora_rank), ("kv_lora_rank", c.kv_lora_rank),
                        ("qk_rope", c.qk_rope)):
            if v % TILE_N:
                raise ValueError(f"front: {c.name} {what} = {v} is not a multiple of {TILE_N}")
        if c.hidden % BLOCK or self.chunk % BLOCK:
            raise ValueError(f"front: hidden {c.hidden} / {self.splits} splits is not a whole "
                             f"number of {BLOCK}-blocks")
        if c.kv_lora_rank % BLOCK:
            raise ValueError(f"front: kv_lora_rank {c.kv_lora_rank} is not a multiple of {BLOCK}")
        if self.tagged_parts not in (0, TAGGED_BATCH, TAGGED_PROBE):
            raise ValueError(f"front: tagged_parts {self.tagged_parts}; 0 (flags), "
                             f"{TAGGED_BATCH} (batched rounds) or {TAGGED_PROBE} (a probe, then "
                             "the rounds)")
        if c.qk_rope // 2 > 32 or c.qk_rope % 2:
            raise ValueError(f"front: qk_rope {c.qk_rope}: rope pairs must fit one warp (<= 64 dims)")
        if self.token_bytes % (8 if self.kv == "bf16" else 4):
            raise ValueError(f"front: a {self.token_bytes}-byte cache token breaks the stores' "
                             "alignment")
        if self.cache_pages < 1 or self.cache_pages * PAGE > 2**31 - 1:
            raise ValueError(f"front: cache_pages {self.cache_pages} must give 1 .. 2^31-1 slots")
        return self


def plan(spec, *, grid: int | None = None, waves: int | None = None, fp8=None,
         cache_pages: int | None = None, splits: int | None = None,
         chip: str | None = None, tagged_parts: int = 0) -> FrontPlan:
    t = spec.target_info
    if grid is None:
        grid = INTERP_GRID if spec.target == "interp" else t.num_ctas
    if waves is None:
        waves = DEFAULT_WAVES[t.vendor]
    fp8 = as_dtype(fp8 if fp8 is not None else (t.fp8 or "fp8e4m3fn"))
    cfg = spec.config
    tiles = cfg.front_out // TILE_N
    S = splits if splits is not None else k_splits(cfg, tiles, grid, spec.rows,
                                                   None if spec.target == "interp" else t.lds_bytes)
    return FrontPlan(cfg, spec.rows, spec.kv, spec.target, fp8, grid, waves, S,
                     cache_pages if cache_pages is not None else 4 * spec.rows,
                     chip if spec.target == "interp" else None, int(tagged_parts)).check()


# --------------------------------------------------------------------------- DSL helpers

def _tid(k):
    return k.wave_id() * k.L + k.lane_id()


def _args(k, io, names):
    """The stage's buffer pointers, read again from the kernel arguments at the start of each
    job (k.reload_arg, where the DSL has it): LLVM then cannot hoist every stage's pointers
    out of the persistent job loop into scalar registers at once (the front's three stages
    use 10 buffers, and a scalar register file of 102 is what a persistent kernel has)."""
    if not hasattr(k, "reload_arg"):
        return io.args
    return SimpleNamespace(**{n: k.reload_arg(n) for n in names})


def _cta_sum(k, lds, slot: int, v):
    """Sum of the uniform per-wave values `v` over the CTA's waves, in wave order (the same
    bits on every wave). `slot` picks this call's own W words of `lds`."""
    if k.W == 1:
        return v
    k.store(lds, slot * k.W + k.wave_id(), v, mask=k.lane_id().eq(0))
    k.barrier()
    total = k.load(lds, slot * k.W, f32)
    for w in range(1, k.W):
        total = total + k.load(lds, slot * k.W + w, f32)
    return total


def _ss_thread(k, vals, acc=None):
    """Sum of squares of f32 values (python list of vectors), fma in list order."""
    for v in vals:
        for j in range(v.n):
            x = v[j] if v.n > 1 else v
            acc = x * x if acc is None else k.fma(x, x, acc)
    return acc


def _row_rs(k, p, a, r, lds, slot):
    """1 / rms(x_r) = rsqrt(mean(x_r^2) + eps): 8 bf16 per thread per pass, squares summed in
    f32 in a fixed order (thread, butterfly, waves)."""
    H = p.hidden
    step = k.W * k.L * 8
    tid = _tid(k)
    acc = k.lane_var(0.0, f32)
    for it in range(-(-H // step)):
        e = it * step + tid * 8
        m = e < H if H % step else None
        xv = k.cast(k.load(a.x, r * H + e, bf16, 8, mask=m), f32)
        acc.set(_ss_thread(k, [xv], acc.get()))
    total = _cta_sum(k, lds, slot, k.wave_sum(acc.get()))
    return k.rsqrt(total * (1.0 / H) + p.eps)


def _rows_rs(k, p, a, rows, lds):
    """_row_rs of several rows at once (python ints), bit for bit: every row's loads go out
    before any sum and the waves' partial sums of all the rows cross one CTA barrier, so a
    batch costs one L2 round trip and one barrier instead of one each a row. `lds` holds
    len(rows) * W f32."""
    H = p.hidden
    step = k.W * k.L * 8
    tid = _tid(k)
    its = -(-H // step)
    loads = []
    for r in rows:
        for it in range(its):
            e = it * step + tid * 8
            m = e < H if H % step else None
            loads.append(k.load(a.x, r * H + e, bf16, 8, mask=m))
    sums = []
    for i in range(len(rows)):
        acc = k.const(0.0, f32)
        for it in range(its):
            acc = _ss_thread(k, [k.cast(loads[i * its + it], f32)], acc)
        sums.append(k.wave_sum(acc))
    if k.W == 1:
        return [k.rsqrt(t * (1.0 / H) + p.eps) for t in sums]
    for i, v in enumerate(sums):
        k.store(lds, i * k.W + k.wave_id(), v, mask=k.lane_id().eq(0))
    k.barrier()
    out = []
    for i in range(len(rows)):
        total = k.load(lds, i * k.W, f32)
        for w in range(1, k.W):
            total = total + k.load(lds, i * k.W + w, f32)
        out.append(k.rsqrt(total * (1.0 / H) + p.eps))
    return out


def _row_slot(k, p, a, r):
    """(position, cache slot, position ok, page ok) of row r (uniform). A bad position reads
    page entry 0 instead (never out of bounds)."""
    pos = k.load(a.positions, r, i32)
    okp = (pos >= 0) & (pos < p.capacity)
    pidx = k.select(okp, pos / PAGE, k.const(0, i32))
    page = k.load(a.block_table, r * p.max_pages + pidx, i32)
    okg = (page >= 0) & (page < p.cache_pages)
    return pos, page * PAGE + pos % PAGE, okp, okg


def _and(ok, m):
    """A store's mask: `ok` (the rows' check, the CTA's health) and, where a piece has one,
    the piece's mask m."""
    return ok if m is None else m & ok


def _check_rows(k, p, io, a):
    """Uniform i1: every row's position and page are valid. A bad one is recorded in the
    error word (io.env.fail with BAD_POSITION / BAD_PAGE), which marks the CTA failed. (A
    runtime loop: one error site per kind keeps the scalar registers of a persistent kernel
    free; the host check, run first, names the row and the value.)"""
    bad_pos = k.uniform_var(0, u32, name="front_bad_pos")
    bad_page = k.uniform_var(0, u32, name="front_bad_page")
    for r in k.range(p.rows):
        _, _, okp, okg = _row_slot(k, p, a, r)
        bad_pos.set(bad_pos.get() | k.cast(~okp, u32))
        bad_page.set(bad_page.get() | k.cast(okp & ~okg, u32))
    io.env.fail(bad_pos.get().ne(0), BAD_POSITION.format(cap=p.capacity))
    io.env.fail(bad_page.get().ne(0), BAD_PAGE.format(pages=p.cache_pages))
    return (bad_pos.get() | bad_page.get()).eq(0)


def _rope_freq_fixed(p):
    """Rope frequencies in 0.64 fixed-point revolutions per position, as the kernel forms
    them: F_0 = round(2^64 / 2pi) and P_b = round(rho^(2^b) * 2^64), rho = theta^(-2/rope);
    pair i's frequency is F_0 times P_b for every set bit b of i, each product the high 64
    bits of the 128-bit product (relative error < 1e-15: < 1e-9 rad at any position)."""
    d = p.rope
    rho = p.config.rope_theta ** (-2.0 / d)
    f0 = int(round(math.ldexp(1.0 / (2.0 * math.pi), 64)))
    bits = max(1, (d // 2 - 1).bit_length())
    return f0, [min(int(round(math.ldexp(rho ** (1 << b), 64))), (1 << 64) - 1)
                for b in range(bits)]


def _mulhi64(k, a, b):
    """The high 64 bits of the 128-bit product of two u64 values (32-bit pieces)."""
    m = 0xFFFFFFFF
    a0, a1 = a & m, a >> 32
    b0, b1 = b & m, b >> 32
    p01, p10 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> 32) + (p01 & m) + (p10 & m)
    return a1 * b1 + (p01 >> 32) + (p10 >> 32) + (mid >> 32)


def _rope_freq(k, p, pair):
    """Per lane: the frequency of rope pair `pair` (i32) in 0.64 fixed point (see above)."""
    f0, powers = _rope_freq_fixed(p)
    f = k.lane_var(k.const(f0, u64))
    for b, pb in enumerate(powers):
        g = f.get()
        f.set(k.select(((pair >> b) & 1).eq(1), _mulhi64(k, g, k.const(pb, u64)), g))
    return f.get()


# Taylor coefficients of sin and cos on |x| <= pi/4 (truncation error < 2e-9)
_SIN = (-1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880)
_COS = (-1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800)


def _sincos(k, pos, freq):
    """(sin, cos) of 2pi * frac(pos * freq / 2^64) for a per-lane u64 `freq` (module doc)."""
    t = k.cast(pos, u64) * freq  # wrapping: revolutions in 0.64 fixed point
    # the 64-bit constant opaque: else LLVM hoists it out of the persistent job loop as a
    # pair of halves (a shared zero and 2^29) that it spills instead of rematerializing
    quad = (t + k.opaque(1 << 61, u64)) >> 62  # nearest quarter turn (mod 4 below)
    rem = k.cast(t - (quad << 62), i64)  # in [-2^61, 2^61): at most 1/8 turn
    x = k.cast(k.cast(rem >> 32, i32), f32) * (2.0 * math.pi / 2.0**32)
    z = x * x
    ps = z * _SIN[3]
    for c in reversed(_SIN[:3]):
        ps = (ps + c) * z
    s = k.fma(x, ps, x)
    pc = z * _COS[4]
    for c in reversed(_COS[:4]):
        pc = (pc + c) * z
    c_ = pc + 1.0
    q = k.cast(quad & 3, i32)
    swap = (q & 1).eq(1)
    sn = k.select(swap, c_, s)
    cs = k.select(swap, s, c_)
    sn = k.select(q >= 2, -sn, sn)
    cs = k.select(q.eq(1) | q.eq(2), -cs, cs)
    return sn, cs


# ------------------------------------------------------------------------------------ stages

class FrontProj(Stage):
    """front_part[s, r, n] = sum over split s of Wdq[n, k] * (x[r, k] * g[k]), on the chip's
    bf16 MMA through stages/mma_tile.py (x * g fed as exact bf16 halves hi + lo)."""
    name = "front_proj"
    rel_tol = 1e-5  # f32 accumulation of <= 1024 exact products per split (max-norm relative)
    TUNABLES = ("loads_in_flight", "straight", "async_weights", "half", "act_terms", "wg_depth",
                "wg_prefetch", "tma_weights", "boxes_before_wait")
    CHOICES = {"half": ("bf16", "f16")}
    # 16-byte weight loads a lane keeps in flight (None: mma_tile.LOADS_IN_FLIGHT): deeper
    # rings measured slower on the H200 (bench/NOTES.md v16)
    loads_in_flight = None
    # mma_tile.project's ring unrolled (no register copies rotating it)
    straight = False
    # every weight block of the job copied into LDS up front (sm_90a cp.async: the whole
    # job's bytes in flight at once, no registers held; mma_tile.project(async_slots=))
    async_weights = False
    # the MMA's input type: "bf16" (activations as exact bf16 hi + lo) or "f16" (sm_90a:
    # weights decoded in one unpack a pair, activations as f16 hi + lo under a power-of-two
    # range scale a row; mma_tile.range_scales)
    half = "bf16"
    # 0: the bf16 tile above; 1..4: sm_90a's fp8 warpgroup MMA, weights read as they are and
    # x * g as that many e4m3 terms a value (stages/wgmma_proj.py; the reference follows the
    # terms, rel_tol the H200's wgmma sums)
    _act_terms = 0
    wg_depth = None  # the fp8 tile's weight blocks in flight (None: WEIGHT_DEPTH_BLOCKS)
    wg_prefetch = False  # the fp8 tile's weights asked of the L2 before its staging
    # the fp8 tile's weights by TMA into LDS, every block of a job asked for at its start and
    # read there by the SS wgmma (wgmma_proj.TmaWeights: the staging's proxy fence then has
    # no weight load to wait for); needs act_terms, sm_90a or the interpreter
    tma_weights = False
    WEIGHT_MAP = "qkv_a_w_tmap"  # the weights' tensor map argument (tma_weights)
    # with tma_weights and pdl: the CTA's first job asks for its boxes before grid_dep_wait
    # (prefetch_lds; the weights are constant), so they land in LDS while the launch before
    # still runs, where the plain pdl form only hints them into the L2. Exact, but in a pdl
    # chain on an H100 (bench/NOTES.md v52, same process) r8 10.79 -> 11.28 us, r2 10.33 ->
    # 10.23: off, a tunable
    boxes_before_wait = False

    @property
    def act_terms(self) -> int:
        return self._act_terms

    @act_terms.setter
    def act_terms(self, v: int):
        if not 0 <= v <= wgmma_proj.MAX_TERMS:
            raise ValueError(f"front_proj.act_terms = {v}: 0 (bf16 tile) or 1 .. "
                             f"{wgmma_proj.MAX_TERMS} e4m3 terms")
        self._act_terms = v
        self.rel_tol = wgmma_proj.HW_REL_TOL if v else type(self).rel_tol

    def __init__(self, p: FrontPlan, release: bool = True):
        self.p = p
        self.release = release  # False: the broken variant a relaxed-visibility test catches

    def jobs(self):
        p = self.p
        wbytes = TILE_N * p.chunk + TILE_N // BLOCK * 4 * (p.chunk // BLOCK) + 4
        abytes = p.rows * p.chunk * 2 + p.chunk * 2
        lds = 4 * 2 * p.rows * mma_tile.act_row_words(p.chunk)
        if self.act_terms:
            T = wgmma_proj.tiling(p.rows, self.act_terms)
            lds = 4 * (wgmma_proj.b_lds_words(T, p.chunk) + wgmma_proj.max_lds_words(T, p.chunk))
        if self._tma():
            lds += wgmma_proj.ring_bytes(p.chunk // BLOCK)
        if self.async_weights:
            lds += TILE_N * p.chunk  # the job's weights (async_slot_words: a byte each)
        if self.half == "f16":
            lds += 4 * p.rows  # the range table
        return [Job(j, cost_bytes=wbytes + abytes + p.rows * TILE_N * 4,
                    cost_flops=2 * TILE_N * p.chunk * p.rows, lds_bytes=lds)
                for j in range(p.tiles * p.splits)]

    def _tma(self) -> bool:
        """tma_weights, checked: it is a form of the fp8 tile (act_terms)."""
        if self.tma_weights and not self.act_terms:
            raise ValueError("front_proj.tma_weights = 1 (the sm_90a front kind's default) is "
                             "a form of the fp8 warpgroup tile: set front_proj.act_terms (1 .. "
                             "4) too, or front_proj.tma_weights=0 with act_terms=0 for the "
                             "bf16 tile")
        return bool(self.tma_weights)

    def lds_prefetch(self) -> bool:
        """Whether a pdl launch's first job asks for its boxes before the wait (Stage.
        prefetch_lds): boxes_before_wait, checked: it is a form of tma_weights."""
        if self.boxes_before_wait and not self._tma():
            raise ValueError("front_proj.boxes_before_wait = 1 asks for the weights' TMA boxes "
                             "early: set front_proj.tma_weights (with act_terms) too")
        return bool(self.boxes_before_wait)

    def _tma_weights(self, k):
        """The job's ring and mbarriers (wgmma_proj.TmaWeights) in k's LDS, shared by
        prefetch_lds (before the job loop) and the body."""
        return wgmma_proj.TmaWeights.of(k, self.WEIGHT_MAP, self.p.chunk // BLOCK, "front_w")

    def prefetch_lds(self, k, job, args):
        """boxes_before_wait: job `job`'s weight boxes asked for (wgmma_proj.issue_boxes)."""
        p = self.p
        t, s = job / p.splits, job % p.splits
        wgmma_proj.issue_boxes(k, self._tma_weights(k), t * TILE_N, s * p.chunk,
                               p.chunk // BLOCK)

    def kernel_args(self) -> dict:
        out = super().kernel_args()
        if self._tma():
            out[self.WEIGHT_MAP] = wgmma_proj.weight_map("qkv_a_w", self.p.hidden)
        return out

    def regions(self):
        p = self.p
        shape = (p.splits, p.rows, p.n_out)
        if p.tagged_parts:
            return [TaggedPairs("front_part", shape, f32)]
        return [PlainBuffer("front_part", f32, shape),
                TaggedPairs("front_done", (p.tiles * p.splits,), u32)]

    def buffers(self):
        p = self.p
        return {"x": Buffer(bf16, (p.rows, p.hidden)),
                "attn_norm_w": Buffer(bf16, (p.hidden,)),
                "qkv_a_w": Buffer(p.fp8, (p.n_out, p.hidden), constant=True),
                "qkv_a_scale": Buffer(f32, (p.weight_scale_rows, p.hidden // BLOCK),
                                      constant=True)}

    def bytes_moved(self):
        p = self.p
        return {"qkv_a_w": p.n_out * p.hidden,
                "qkv_a_scale": p.weight_scale_rows * (p.hidden // BLOCK) * 4,
                "x": p.rows * p.hidden * 2, "attn_norm_w": p.hidden * 2}

    def writes(self, j):
        p = self.p
        t, s = divmod(j, p.splits)
        return [Use("front_part", (s * p.rows + r) * p.n_out + t * TILE_N,
                    (s * p.rows + r) * p.n_out + (t + 1) * TILE_N) for r in range(p.rows)] + \
            ([] if p.tagged_parts else [Use("front_done", j, j + 1)])

    def tiling(self, lanes: int):
        """The MMA tile's facts for this plan on `lanes`-lane waves (stages/mma_tile.py)."""
        p = self.p
        return mma_tile.tiling(mma_tile.proj_atom_name(p.target, lanes, p.chip, self.half),
                               p.rows)

    def body(self, k, job, io):
        if self.act_terms:
            return self._body_terms(k, job, io)
        p = self.p
        a = _args(k, io, self.buffers())
        T = self.tiling(k.L)
        R, KC, H = p.rows, p.chunk, p.hidden
        t = job / p.splits
        s = job % p.splits
        k0 = s * KC
        act = k.lds("front_act", u32, mma_tile.act_lds_words(T, KC))
        split = mma_tile.WaveSplit.of(TILE_N, T.atom.m, k.W)
        red = k.lds("front_red", f32, k.W * k.L * T.atom.c_slots) if split.kparts > 1 else None
        slots = (k.lds("front_w", u32, mma_tile.async_slot_words(T, k.W, KC // BLOCK, TILE_N))
                 if self.async_weights else None)
        nrng = mma_tile.range_lds_words(T)
        rng = k.lds("front_range", u32, nrng) if nrng else None

        def load8(r, kk, m):
            return (k.load(a.x, r * H + k0 + kk, bf16, 8, mask=m),
                    k.load(a.attn_norm_w, k0 + kk, bf16, 8, mask=m))

        def value8(xg):  # a = x * g, exact in f32 (a product of two bf16)
            return k.cast(xg[0], f32) * k.cast(xg[1], f32)

        def stage():
            k.barrier()  # the previous job of this CTA is done reading the activations
            pending = mma_tile.load_activations(k, T, KC, load8)
            if rng is not None:
                mma_tile.clear_range(k, T, rng)

            def finish():
                mma_tile.store_activations(k, T, act, KC, pending, value8, rng)
                k.barrier()
                io.env.phase(0)  # the activations are staged (the first weights in flight)
            return finish

        def emit(m, r, v, mask):  # front_part[s, r, m ..]
            self._store_part(k, io, (s * R + r) * p.n_out + m, v, mask)

        mma_tile.project(k, T, w=a.qkv_a_w, w_stride=H, w_dtype=p.fp8, scale=a.qkv_a_scale,
                         scale_stride=H // BLOCK, row0=t * TILE_N, k0=k0, kb0=s * (KC // BLOCK),
                         blocks=KC // BLOCK, tile_m=TILE_N, lds=act, chunk=KC, stage=stage,
                         emit=emit, red=red,
                         loads_in_flight=self.loads_in_flight or mma_tile.LOADS_IN_FLIGHT,
                         straight=self.straight, async_slots=slots, rng=rng,
                         weights_first=k.target.vendor == "nvidia")
        self._publish(k, job, io)

    def _body_terms(self, k, job, io):
        """The job on sm_90a's fp8 warpgroup MMA (act_terms e4m3 terms a value)."""
        p = self.p
        a = _args(k, io, self.buffers())
        T = wgmma_proj.tiling(p.rows, self.act_terms, natural=self._tma())
        R, KC, H = p.rows, p.chunk, p.hidden
        t = job / p.splits
        s = job % p.splits
        k0 = s * KC
        b = k.lds("front_b", u32, wgmma_proj.b_lds_words(T, KC))
        mx = k.lds("front_max", u32, wgmma_proj.max_lds_words(T, KC))
        tma = self._tma_weights(k) if self._tma() else None

        def value8(x8, g8):  # a = x * g, exact in f32 (a product of two bf16)
            return k.cast(x8, f32) * k.cast(g8, f32)

        def emit(m, r, v, mask):  # front_part[s, r, m]
            self._store_part(k, io, (s * R + r) * p.n_out + m, v, mask)

        wgmma_proj.project(k, T, w=a.qkv_a_w, w_stride=H, scale=a.qkv_a_scale,
                           scale_stride=H // BLOCK, row0=t * TILE_N, k0=k0,
                           kb0=s * (KC // BLOCK), blocks=KC // BLOCK, b_lds=b, b_name="front_b",
                           mx_lds=mx, value8=value8, emit=emit,
                           load_row8=lambda r, kk, m: k.load(a.x, r * H + k0 + kk, bf16, 8, mask=m),
                           load_shared8=lambda kk, m: k.load(a.attn_norm_w, k0 + kk, bf16, 8,
                                                             mask=m),
                           staged=lambda: io.env.phase(0),
                           depth=self.wg_depth or wgmma_proj.WEIGHT_DEPTH_BLOCKS,
                           prefetch=self.wg_prefetch, tma=tma,
                           tma_issued=io.env.lds_prefetched if self.lds_prefetch() else None)
        self._publish(k, job, io)

    def _store_part(self, k, io, index, v, mask):
        """Partial sums v (a scalar or a run) at front_part[index ..]: plain stores, or with
        FrontPlan.tagged_parts each one a tagged pair (its own relaxed 64-bit store)."""
        if not self.p.tagged_parts:
            io.store("front_part", index, v, mask=mask)
            return
        for i in range(v.n):
            io.publish("front_part", index + i if i else index, v[i] if v.n > 1 else v,
                       mask=mask)

    def _publish(self, k, job, io):
        io.env.phase(1)  # wave 0's blocks are summed and its partial sums stored
        if self.p.tagged_parts:  # every word carries its tag: no fence, no flag
            io.env.phase(2)
            return
        # publish: every wave's stores, then the CTA's release, then this job's flag (one
        # tagged pair per job: no counter that hundreds of jobs would contend for)
        k.fence("release", "cta")
        ok = io.env.cta_ok()  # a barrier when the CTA has several waves
        with k.if_(ok & k.wave_id().eq(0)):
            if self.release:
                k.fence("release", "device")
            io.publish("front_done", job, k.cast(job, u32), mask=k.lane_id().eq(0))
        io.env.phase(2)  # the job's flag is published

    def prefetch(self, k, job, args):
        """The job's TILE_N weight rows of its K split into the L2: one bulk prefetch a row
        (its `chunk` contiguous bytes), spread over the CTA's threads. (The scales, 4 bytes a
        128 x 128 block, are left to the job's own loads.)"""
        p = self.p
        t, s = job / p.splits, job % p.splits
        k.prefetch_rows_l2(args.qkv_a_w, t * (TILE_N * p.hidden) + s * p.chunk, TILE_N, p.chunk,
                           p.hidden, p.chunk)

    def reference(self, env):
        import torch
        p = self.p
        x = _ref_bf16(env["x"])
        g = _ref_bf16(env["attn_norm_w"])
        W = _ref_weights(env["qkv_a_w"], env["qkv_a_scale"], p)
        a = (x * g).reshape(p.rows, p.splits, p.chunk)
        if self.act_terms:  # what the fp8 tile feeds the tensor cores (wgmma_proj)
            a = torch.from_numpy(wgmma_proj.reference_terms(a.numpy(), self.act_terms))
        Wk = W.reshape(p.n_out, p.splits, p.chunk)
        part = torch.einsum("rsk,nsk->srn", a, Wk)
        h = x * torch.rsqrt((x * x).mean(1, keepdim=True) + p.eps) * g
        return {"h": h, "front_part": part}


class _Post(Stage):
    """Shared by front_q and front_kv: reduce the partial sums of one row in fixed order."""

    def __init__(self, p: FrontPlan, acquire: bool = True):
        self.p = p
        self.acquire = acquire  # False: the broken variant a relaxed-visibility test catches

    lo = hi = 0  # columns of front_part this stage reduces

    def jobs(self):
        p = self.p
        n = self.hi - self.lo
        # a lead job (its row's 1/rms(x) before its wait, on a CTA of its own from the
        # start) where the grid holds every projection and post job at once (the sm_90a
        # front kind: 246 + 2 x rows on 264 CTAs); fewer CTAs would push projection jobs
        # into a second round
        lead = p.grid >= p.tiles * p.splits + POST_JOBS_PER_ROW * p.rows
        return [Job(r, cost_bytes=p.splits * n * 4 + p.hidden * 2 + 2 * n * 2,
                    cost_flops=p.splits * n + 2 * p.hidden + 8 * n, lead=lead)
                for r in range(p.rows)]

    def flags(self):
        """The front_done flags of the projection jobs whose tiles this stage reduces."""
        S = self.p.splits
        return self.lo // TILE_N * S, self.hi // TILE_N * S

    def reads(self, r):
        p = self.p
        return ([] if p.tagged_parts else [Use("front_done", *self.flags())]) + \
            [Use("front_part", (s * p.rows + r) * p.n_out + self.lo,
                 (s * p.rows + r) * p.n_out + self.hi) for s in range(p.splits)]

    def wait_projection(self, k, io):
        """Every thread polls its share of the projection jobs' flags; after a CTA barrier
        every wave acquires (device scope): the partial sums are then visible to all."""
        lo, hi = self.flags()
        n, nthr = hi - lo, k.W * k.L
        tid = _tid(k)
        for it in range(-(-n // nthr)):
            i = it * nthr + tid
            io.wait("front_done", lo + k.min(i, n - 1), mask=i < n if n % nthr else None)
        io.env.cta_ok()  # barrier: every wave's polls have succeeded (or the CTA failed)
        if self.acquire:
            k.fence("acquire", "device")

    def pieces(self, k, n):
        """[(e, mask)]: this thread's POST_VEC-wide pieces of n columns (e counts from the
        stage's first column); the reduction, the norm weights and the stores share them."""
        per = k.W * k.L * POST_VEC
        tid = _tid(k)
        out = []
        for it in range(-(-n // per)):
            e = it * per + tid * POST_VEC
            out.append((e, e < n if n % per else None))
        return out

    def norm_weights(self, k, g_ptr, count):
        """The thread's pieces of the RMSNorm weight, loaded BEFORE the wait for the
        projection (inputs only): after it, the tail has one L2 round trip (the partial
        sums), not a second one for the weights behind the norm's CTA barrier."""
        return [k.cast(k.load(g_ptr, e, bf16, POST_VEC, mask=m), f32)
                for e, m in self.pieces(k, count)]

    def reduce_row(self, k, io, a, r, lds, slot, lo, hi, more=None):
        """(this thread's [(e, f32x4 y[e:e+4], mask)] over columns [lo, hi) of front_part,
        rs(x_r), more), y = rs * (part[0] + part[1] + ... + part[S-1]) (e counts from lo).
        `more(read)`: the caller's other reads of front_part, each `read(index, n, mask)`,
        issued with these before any sum waits for them (one round trip for all); `more`
        is what it returned, each read's value (f32 vectors of n) in its place."""
        p = self.p
        rs = _row_rs(k, p, a, r, lds, slot)  # inputs only: before the wait
        io.env.phase(0)  # the row's 1/rms(x)
        S = p.splits
        if p.tagged_parts:
            specs = []

            def record(i, n, m):  # a `more` read, polled with the pieces: its place
                specs.append((i, n, m))
                return len(specs) - 1
            extra = more(record) if more else None
            got = self._poll_parts(k, io, r, lo, hi, specs)
            io.env.phase(1)  # every partial sum this thread reads is in
            pieces = self.pieces(k, hi - lo)
            parts = [(e, m, got[j * S:(j + 1) * S]) for j, (e, m) in enumerate(pieces)]
            tail = got[len(parts) * S:]
            more = [tail[j] for j in extra] if more else None
        else:
            self.wait_projection(k, io)
            io.env.phase(1)  # every projection job's partial sums are visible
            parts = [(e, m, [io.load("front_part", (s * p.rows + r) * p.n_out + lo + e,
                                     POST_VEC, mask=m) for s in range(S)])
                     for e, m in self.pieces(k, hi - lo)]
            more = more(lambda i, n, m: io.load("front_part", i, n, mask=m)) if more else None
        out = []
        for e, m, vs in parts:
            y = vs[0]
            for v in vs[1:]:
                y = y + v
            out.append((e, y * rs, m))
        return out, rs, more

    def _poll_parts(self, k, io, r, lo, hi, more):
        """FrontPlan.tagged_parts: row r's partial sums over columns [lo, hi) (reduce_row's
        pieces, each split's) and the reads `more` [(index, n, mask)], every word polled
        together (Mailbox.wait_all), as f32 vectors: the pieces' from one base (the row's
        and this thread's first column), their splits and pieces as constant offsets."""
        p = self.p
        per = k.W * k.L * POST_VEC  # (pieces(): the columns of one piece of every thread)
        base = r * p.n_out + _tid(k) * POST_VEC
        reads = [(base, s * p.rows * p.n_out + lo + e0, POST_VEC, m)
                 for e0, (_, m) in zip(range(0, hi - lo, per), self.pieces(k, hi - lo))
                 for s in range(p.splits)] + [(i, 0, n, m) for i, n, m in more]
        words = io.wait_all("front_part", [(b, o + j, m) for b, o, n, m in reads
                                           for j in range(n)],
                            probe=p.tagged_parts == TAGGED_PROBE)
        out, at = [], 0
        for *_, n, _ in reads:
            out.append(k.vec(*words[at:at + n]) if n > 1 else words[at])
            at += n
        return out

    def norm(self, k, ys, gs, lds, slot, count):
        """RMSNorm of the f32x4 pieces `ys` (masked-off pieces are zeros) times the weight
        pieces `gs` (norm_weights)."""
        ss = None
        for _, y, _ in ys:
            ss = _ss_thread(k, [y], ss)
        total = _cta_sum(k, lds, slot, k.wave_sum(ss))
        rn = k.rsqrt(total * (1.0 / count) + self.p.eps)
        return [(e, y * rn * g, m) for (e, y, m), g in zip(ys, gs)]


class FrontQ(_Post):
    """qr[r] = RMSNorm(q_a[r]) * g_q, q_a = rs(x_r) * sum_s front_part[s, r, :q_lora]."""
    name = "front_q"
    rel_tol = 2.0 ** -8 + 1e-5  # one bf16 rounding (elementwise, relative)

    def __init__(self, p, acquire=True):
        super().__init__(p, acquire)
        self.lo, self.hi = 0, p.q_lora

    def buffers(self):
        p = self.p
        return {"x": Buffer(bf16, (p.rows, p.hidden)),
                "q_a_norm_w": Buffer(bf16, (p.q_lora,)),
                "positions": Buffer(i32, (p.rows,)),
                "block_table": Buffer(i32, (p.rows, p.max_pages)),
                "qr": Buffer(bf16, (p.rows, p.q_lora), output=True)}

    def bytes_moved(self):
        p = self.p
        return {"q_a_norm_w": p.q_lora * 2, "qr": p.rows * p.q_lora * 2}

    def body(self, k, job, io):
        a = _args(k, io, self.buffers())
        qr, ok = self.row_qr(k, io, a, job)
        for e, v, m in qr:
            k.store(a.qr, job * self.p.q_lora + e, k.cast(v, bf16), mask=_and(ok, m))

    def row_qr(self, k, io, a, r):
        """(row r's RMSNorm(q_a) as this thread's f32 pieces [(e, value, piece mask)], ok:
        the rows' check and the CTA's health, which mask the qr output's stores); ix_qr stores
        the same pieces."""
        p = self.p
        lds = k.lds(f"{self.name}_red", f32, 2 * k.W)
        k.barrier()
        valid = _check_rows(k, p, io, a)
        gs = self.norm_weights(k, a.q_a_norm_w, p.q_lora)
        ys, _, _ = self.reduce_row(k, io, a, r, lds, 0, 0, p.q_lora)
        qr = self.norm(k, ys, gs, lds, 1, p.q_lora)
        return qr, io.env.cta_ok() & valid

    def reference(self, env):
        p = self.p
        q_a = _ref_reduce(env, p, 0, p.q_lora)
        return {"q_a": q_a, "qr": _ref_rmsnorm(q_a, _ref_bf16(env["q_a_norm_w"]), p.eps)}


class FrontKV(_Post):
    """The row's MLA cache token: RMSNorm(kv_a[:kv_lora]) * g_kv (fp8 + scales, or bf16) and
    rope(kv_a[kv_lora:]) (bf16), at slot block_table[r, pos // 64] * 64 + pos % 64."""
    name = "front_kv"

    def __init__(self, p, acquire=True):
        super().__init__(p, acquire)
        self.lo, self.hi = p.q_lora, p.n_out
        # fp8: dequantized latent within half an fp8 step of the reference (2^-4 relative)
        self.rel_tol = (2.0 ** -4 if p.kv == "fp8" else 2.0 ** -8) + 1e-5

    def buffers(self):
        p = self.p
        return {"x": Buffer(bf16, (p.rows, p.hidden)),
                "kv_a_norm_w": Buffer(bf16, (p.kv_lora,)),
                "positions": Buffer(i32, (p.rows,)),
                "block_table": Buffer(i32, (p.rows, p.max_pages)),
                "kv_cache": Buffer(u8, (p.cache_pages * PAGE, p.token_bytes), output=True)}

    def bytes_moved(self):
        p = self.p
        return {"kv_a_norm_w": p.kv_lora * 2, "positions": p.rows * 4,
                "block_table": p.rows * 4, "kv_cache": p.rows * p.token_bytes}

    def body(self, k, job, io):
        p = self.p
        a = _args(k, io, self.buffers())
        lds = k.lds("front_kv_red", f32, 2 * k.W)
        k.barrier()
        valid = _check_rows(k, p, io, a)
        pos, slot, _, _ = _row_slot(k, p, a, job)
        gs = self.norm_weights(k, a.kv_a_norm_w, p.kv_lora)
        # the rope part: one pair (2i, 2i+1) per thread i < rope/2; its angle (inputs only)
        # before the wait, its partial sums loaded with the latent's
        tid = _tid(k)
        npair = p.rope // 2
        mr = tid < npair
        freq = _rope_freq(k, p, tid)
        sn, cs_ = _sincos(k, pos, freq)

        def rope_reads(read):
            return [read((s * p.rows + job) * p.n_out + p.q_lora + p.kv_lora + tid * 2, 2, mr)
                    for s in range(p.splits)]
        ys, rs, rope_parts = self.reduce_row(k, io, a, job, lds, 0, p.q_lora,
                                             p.q_lora + p.kv_lora, more=rope_reads)
        cs = self.norm(k, ys, gs, lds, 1, p.kv_lora)
        y2 = rope_parts[0]
        for v in rope_parts[1:]:
            y2 = y2 + v
        y2 = y2 * rs
        x0, x1 = y2[0], y2[1]
        r0 = k.fma(x0, cs_, -(x1 * sn))
        r1 = k.fma(x0, sn, x1 * cs_)
        rope = k.cast(k.vec(r0, r1), bf16)

        ok = io.env.cta_ok() & valid
        tok = k.ptr_add(a.kv_cache, k.cast(slot, i64) * p.token_bytes)

        if p.kv == "bf16":
            for e, v, m in cs:
                k.store(tok, e, k.cast(v, bf16), mask=_and(ok, m))
            k.store(tok, p.kv_lora // 2 + tid, k.bitcast(rope, u32), mask=mr & ok)
            return
        fmax = p.fp8_max
        for e, v, m in cs:
            # amax of the 128-block: its 32 threads are 32 consecutive lanes of one wave
            am = k.max(k.max(k.abs(v[0]), k.abs(v[1])), k.max(k.abs(v[2]), k.abs(v[3])))
            for sh in (1, 2, 4, 8, 16):
                am = k.max(am, k.lane_swap(am, sh))
            am = k.max(am, SCALE_FLOOR)
            est = am * (1.0 / fmax)
            sc = k.bitcast(k.bitcast(est, u32) & 0x7F800000, f32)  # a power of two <= est
            for _ in range(2):  # at most two doublings to the smallest s with s * fmax >= amax
                sc = k.select(sc * fmax < am, sc * 2.0, sc)
            q8 = k.cast(v * (1.0 / sc), p.fp8)  # 1/sc is exact: sc is a power of two
            k.store(tok, e / 4, k.bitcast(q8, u32), mask=_and(ok, m))
            lead = (tid % (BLOCK // POST_VEC)).eq(0)
            blk = e / BLOCK
            k.store(tok, p.kv_lora // 4 + blk, sc, mask=_and(ok, m) & lead)
        k.store(tok, (p.kv_lora + 4 * p.scale_blocks) // 4 + tid, k.bitcast(rope, u32), mask=mr & ok)

    def reference(self, env):
        import torch
        p = self.p
        kv_a = _ref_reduce(env, p, p.q_lora, p.n_out)
        c = _ref_rmsnorm(kv_a[:, :p.kv_lora], _ref_bf16(env["kv_a_norm_w"]), p.eps)
        pos = env["positions"].to(torch.float64)
        d = p.rope
        inv = 1.0 / (p.config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        ang = pos[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        kr = kv_a[:, p.kv_lora:]
        x0, x1 = kr[:, 0::2], kr[:, 1::2]
        rope = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).reshape(p.rows, d)
        out = {"kv_a": kv_a, "kv_c": c, "kv_rope": rope}
        if p.kv == "fp8":
            s = ref_cache_scales(c, p)
            q = (c / s.repeat_interleave(BLOCK, 1)).to(_torch_fp8(p.fp8)).to(torch.float64)
            out["kv_scale"] = s
            out["kv_latent"] = q * s.repeat_interleave(BLOCK, 1)
        return out


# ------------------------------------------------------------------------ float64 references
# Torch, independent of the kernel code: formats decoded with torch's own bf16/fp8 dtypes.

def _torch_fp8(dt):
    import torch
    return {"fp8e4m3fn": torch.float8_e4m3fn, "fp8e4m3fnuz": torch.float8_e4m3fnuz}[as_dtype(dt).name]


def _ref_bf16(t):
    """A float64 tensor holding bf16 BIT PATTERNS (Launch.reference's inputs) -> values."""
    import torch
    return (t.to(torch.int64).to(torch.int32) << 16).view(torch.float32).to(torch.float64)


def _ref_fp8(t, dt):
    import torch
    return t.to(torch.int64).to(torch.uint8).view(_torch_fp8(dt)).to(torch.float64)


def _ref_weights(w, scale, p):
    """Dequantized W [front_out, hidden]: fp8 value * its 128x128 block's scale."""
    W = _ref_fp8(w, p.fp8)
    S = scale.to(W.dtype).repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:p.n_out]
    return W * S


def _ref_rs(x, eps):
    import torch
    return torch.rsqrt((x * x).mean(1, keepdim=True) + eps)


def _ref_rmsnorm(y, g, eps):
    return y * _ref_rs(y, eps) * g


def _ref_reduce(env, p, lo, hi):
    """Columns [lo, hi) of W h = rs(x) * sum_s front_part[s]."""
    x = _ref_bf16(env["x"])
    return env["front_part"].sum(0)[:, lo:hi] * _ref_rs(x, p.eps)


def ref_cache_scales(c, p):
    """The cache scale rule in float64: per 128-block the smallest power of two s with
    s * fmax >= max(amax, 1e-4 as f32) (products by powers of two are exact)."""
    import torch
    am = c.abs().reshape(c.shape[0], -1, BLOCK).amax(-1).clamp_min(SCALE_FLOOR)
    fmax = p.fp8_max
    s = torch.exp2(torch.ceil(torch.log2(am / fmax)))
    for _ in range(2):
        s = torch.where(s * fmax < am, s * 2, s)
        s = torch.where(s * 0.5 * fmax >= am, s * 0.5, s)
    return s


def front_reference(inputs: dict, p: FrontPlan) -> dict:
    """The model's math straight from the inputs (no partial sums): h, q_a | kv_a = Wdq h,
    qr, c, k_rope (float64 numpy); an independent check of the chained stage references."""
    import torch
    env = {n: torch.as_tensor(np.asarray(v), dtype=torch.float64) for n, v in inputs.items()
           if isinstance(v, np.ndarray)}
    x = _ref_bf16(env["x"])
    h = x * _ref_rs(x, p.eps) * _ref_bf16(env["attn_norm_w"])
    y = h @ _ref_weights(env["qkv_a_w"], env["qkv_a_scale"], p).T
    q_a, kv_a = y[:, :p.q_lora], y[:, p.q_lora:]
    return {n: v.numpy() for n, v in dict(
        h=h, q_a=q_a, kv_a=kv_a, qr=_ref_rmsnorm(q_a, _ref_bf16(env["q_a_norm_w"]), p.eps),
        kv_c=_ref_rmsnorm(kv_a[:, :p.kv_lora], _ref_bf16(env["kv_a_norm_w"]), p.eps)).items()}


# ------------------------------------------------------------------------------- host side

def slots_of(p: FrontPlan, positions, block_table) -> np.ndarray:
    """Each row's physical cache slot page*64 + offset (inputs already validated)."""
    pos = np.asarray(positions).astype(np.int64)
    bt = np.asarray(block_table).reshape(p.rows, p.max_pages)
    return bt[np.arange(p.rows), pos // PAGE].astype(np.int64) * PAGE + pos % PAGE


def _host(v):
    if hasattr(v, "detach") and hasattr(v, "cpu"):
        return v.detach().cpu().numpy()
    return np.asarray(v)


def check_inputs(p: FrontPlan, positions, block_table):
    """ValueError naming the row and the bad value: a position outside the cache capacity, a
    block-table entry of -1 (or past the cache's pages) where a row must write, or two rows
    on one cache slot."""
    pos = _host(positions).reshape(-1)
    bt = _host(block_table)
    if pos.shape != (p.rows,):
        raise ValueError(f"front: positions has shape {pos.shape}, expected ({p.rows},)")
    if bt.size != p.rows * p.max_pages:
        raise ValueError(f"front: block_table has shape {bt.shape}, expected ({p.rows}, {p.max_pages})")
    bt = bt.reshape(p.rows, p.max_pages)
    seen = {}
    for r in range(p.rows):
        x = int(pos[r])
        if x < 0:
            raise ValueError(f"front: row {r}: position {x} is negative")
        if x >= p.capacity:
            raise ValueError(f"front: row {r}: position {x} is past the cache capacity of "
                             f"{p.capacity} tokens (a block table of {p.max_pages} pages of {PAGE})")
        page = int(bt[r, x // PAGE])
        if page == -1:
            raise ValueError(f"front: row {r}: block_table[{r}, {x // PAGE}] = -1: position {x} "
                             "has no cache page, and the row must write its token there")
        if not 0 <= page < p.cache_pages:
            raise ValueError(f"front: row {r}: block_table[{r}, {x // PAGE}] = {page} is outside "
                             f"the cache's {p.cache_pages} pages")
        slot = page * PAGE + x % PAGE
        if slot in seen:
            raise ValueError(f"front: rows {seen[slot]} and {r} both write cache slot {slot} "
                             f"(page {page}, offset {x % PAGE})")
        seen[slot] = r


class FrontLaunch(Launch):
    """The front's launch: a Launch that validates positions and the block table before any
    run (check_inputs) and proves the cache access re-based per token (64-bit slot offset)."""

    def __init__(self, p: FrontPlan, stages, **kw):
        self.plan = p
        super().__init__("front", stages, grid=p.grid, waves=p.waves, **kw)

    def accesses(self):
        p = self.plan
        out = []
        for a in super().accesses():
            if a.buffer == "kv_cache":
                a = Access(a.name, "kv_cache", 1, (0, p.token_bytes - 1),
                           rebase_step=p.token_bytes, rebase_count=p.cache_pages * PAGE,
                           int32_rebase=False, buffer_elems=p.cache_pages * PAGE * p.token_bytes)
            out.append(a)
        return out

    def check_inputs(self, inputs: dict):
        check_inputs(self.plan, inputs["positions"], inputs["block_table"])

    def _buffers(self, inputs, *args, **kw):  # every run_* (interp, CUDA, HIP) passes here
        self.check_inputs(inputs)
        return super()._buffers(inputs, *args, **kw)


def front_stages(p: FrontPlan, *, release=True, acquire=True, straight=False) -> list:
    """`release=False` / `acquire=False` drop the projection's release or the consumers'
    acquire fence: broken variants for the relaxed-visibility test, nothing else.
    `straight`: the projection's weight ring unrolled (FrontProj.straight)."""
    proj = FrontProj(p, release)
    proj.straight = straight
    return [proj, FrontQ(p, acquire), FrontKV(p, acquire)]


def front_launch(spec, **kw) -> FrontLaunch:
    """The front launch of a BuildSpec. Keywords: grid, waves, fp8 (override the target's
    format, e.g. e4m3fnuz in the interpreter), cache_pages, splits, chip (the interpreter's
    wave64 MMA: "gfx950" or "gfx942"), tagged_parts (FrontPlan.tagged_parts) (plan()); release /
    acquire (front_stages' broken variants); the rest go to Launch (poll_bound,
    launch_index, launches_per_step, cost)."""
    pk = {n: kw.pop(n) for n in ("grid", "waves", "fp8", "cache_pages", "splits", "chip",
                                 "tagged_parts") if n in kw}
    sk = {n: kw.pop(n) for n in ("release", "acquire") if n in kw}
    t = spec.target_info
    nvidia = spec.target != "interp" and t.vendor == "nvidia"
    kind_shape = nvidia and "waves" not in pk and "grid" not in pk  # (unless the caller sets
    if kind_shape:                                                    # the shape)
        pk["waves"] = FRONT_KIND_NVIDIA_WAVES
        pk["grid"] = FRONT_KIND_NVIDIA_CTAS_PER_SM * t.num_ctas
    p = plan(spec, **pk)
    stages = front_stages(p, **sk, straight=nvidia)
    if kind_shape and "splits" not in pk and wgmma_proj.fits(p.chunk):  # (the measured shape:
        proj = stages[0]                              # one warpgroup a CTA, plan()'s K split)
        proj.act_terms = FRONT_KIND_NVIDIA_ACT_TERMS
        proj.tma_weights = FRONT_KIND_NVIDIA_TMA_WEIGHTS
    return FrontLaunch(p, stages, **kw)


def request_layout(p: FrontPlan, rng, requests=None, *, shuffle=True):
    """positions [R] and block_table [R, max_pages] for `requests` = [(rows, first position)]
    (default: one request of R rows at a random position): rows of a request sit at
    consecutive positions and share its table row; each logical page a row writes maps to a
    distinct physical page (shuffled over the cache), every other entry is -1."""
    if requests is None:
        requests = [(p.rows, int(rng.integers(0, p.capacity - p.rows + 1)))]
    if sum(n for n, _ in requests) != p.rows:
        raise ValueError(f"requests {requests} do not add up to {p.rows} rows")
    pages = rng.permutation(p.cache_pages) if shuffle else np.arange(p.cache_pages)
    nxt = 0
    pos = np.zeros(p.rows, np.int32)
    bt = np.full((p.rows, p.max_pages), -1, np.int32)
    r = 0
    for n, start in requests:
        row = np.full(p.max_pages, -1, np.int32)
        for x in range(start, start + n):
            if 0 <= x < p.capacity and row[x // PAGE] == -1:
                if nxt >= p.cache_pages:
                    raise ValueError(f"the requests need more than the cache's {p.cache_pages} pages")
                row[x // PAGE] = pages[nxt]
                nxt += 1
        for i in range(n):
            pos[r + i] = start + i
            bt[r + i] = row
        r += n
    return pos, bt


def make_inputs(p: FrontPlan, rng, requests=None) -> dict:
    """Seeded inputs scaled as a checkpoint's and a layer's: residual N(0, 1) * 3, RMSNorm
    weights 1 + 0.1 N(0, 1) (bf16), e4m3 weights spread over the format's range (N(0, 1) *
    112, saturating at 448) with fp32 block scales ~1e-2 (0.01 * exp(0.3 N(0, 1))); for an
    e4m3fnuz plan the bytes are converted at load and the scales doubled. The cache holds
    random bytes (every byte but the rows' tokens must survive); qr is NaN-poisoned."""
    R, H, N = p.rows, p.hidden, p.n_out
    cv = numerics.convert
    w = cv(rng.standard_normal((N, H)) * 112.0, "f64", fp8e4m3fn)
    ws = (0.01 * np.exp(0.3 * rng.standard_normal((p.weight_scale_rows, H // BLOCK)))).astype(np.float32)
    if p.fp8.name == "fp8e4m3fnuz":
        w, ws = numerics.fnuz_from_fn_bits(w), ws * np.float32(2)
    pos, bt = request_layout(p, rng, requests)
    return dict(
        x=cv(rng.standard_normal((R, H)) * 3.0, "f64", bf16),
        attn_norm_w=cv(1.0 + 0.1 * rng.standard_normal(H), "f64", bf16),
        qkv_a_w=w, qkv_a_scale=ws,
        q_a_norm_w=cv(1.0 + 0.1 * rng.standard_normal(p.q_lora), "f64", bf16),
        kv_a_norm_w=cv(1.0 + 0.1 * rng.standard_normal(p.kv_lora), "f64", bf16),
        positions=pos, block_table=bt,
        qr=np.full((R, p.q_lora), 0x7FC1, np.uint16),
        kv_cache=rng.integers(0, 256, (p.cache_pages * PAGE, p.token_bytes), dtype=np.uint8))


def decode_cache(p: FrontPlan, cache, slots) -> dict:
    """The tokens at `slots` of a kv_cache image: latent (dequantized for fp8), its raw bits,
    the scales (fp8) and the rope values, as float64 numpy."""
    c = _host(cache).reshape(p.cache_pages * PAGE, p.token_bytes)[np.asarray(slots)]
    out = {}
    if p.kv == "bf16":
        lat = c[:, :2 * p.kv_lora].copy().view(np.uint16)
        out.update(latent=numerics.to_f64(lat, bf16), latent_bits=lat)
        rope = c[:, 2 * p.kv_lora:].copy().view(np.uint16)
    else:
        lat = c[:, :p.kv_lora].copy()
        sc = c[:, p.kv_lora:p.kv_lora + 4 * p.scale_blocks].copy().view(np.float32).astype(np.float64)
        out.update(latent=numerics.to_f64(lat, p.fp8) * np.repeat(sc, BLOCK, 1), latent_bits=lat,
                   scales=sc)
        rope = c[:, p.kv_lora + 4 * p.scale_blocks:].copy().view(np.uint16)
    out["rope"] = numerics.to_f64(rope, bf16)
    return out


def _kind_inputs(launch, spec, rng):
    return make_inputs(launch.plan, rng)


from .kinds import Kind, register  # noqa: E402

register(Kind("front", "the layer's front: RMSNorm(x) -> FP8 q_a|kv_a projection split over K "
              "(bulk mailbox, reduced in fixed order) -> RMSNorm(q_a) = qr, RMSNorm(c) and rope "
              "-> MLA cache token", front_launch, _kind_inputs,
              # waves a CTA (sm_90a: with it the grid is one CTA an SM, the index kinds' shape);
              # tagged_parts (FrontPlan.tagged_parts)
              launch_tunables=("waves", "tagged_parts")))
