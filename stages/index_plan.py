"""The long-context indexer's plan (stages/index.py): IndexPlan (every number the index
stages use, from the build spec), plan(), the constants the stages share, and the host-side
plan helpers (groups_of, score_runs: the scoring's run map on the host).

Split counts of ix_proj (proj_splits): a wave's loads of an m-tile at most
mma_tile.LOADS_IN_FLIGHT (all in flight at once); QS the largest q_lora split that fits with
heads * QS jobs of at least Q_MIN_BLOCKS 128-blocks in one round of the grid, KS the smallest
hidden split that fits with a key job at most KEY_JOB_Q_BYTES such q jobs' bytes. On sm_90a
(KEY_JOBS_IN_ROUND) the round holds the key jobs too, before the loads' bound. GLM-5: on
sm_90a (132 CTAs) 64 q jobs of 128 KB, on gfx950 / gfx942 (256 / 304) 256 of 32 KB; 24 key
jobs of 48 KB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layouts.scores import ScoresLayout
from monokernel import numerics
from monokernel.atoms import atom as get_atom
from monokernel.atoms.nvidia import wgmma_e4m3
from monokernel.types import dtype as as_dtype
from spec.config import FP8_SCALE_BLOCK, KEY_PAGE_TOKENS

from .index_tiling import SCORE_ATOMS, SM90, KeyTiling, tiling
from . import mma_tile


HD = 128  # index head dim
PAGE = KEY_PAGE_TOKENS
PAGE_SHIFT = PAGE.bit_length() - 1  # a key position's page: pos >> PAGE_SHIFT
PAGE_BYTES = PAGE * (HD + 4)  # 8448
PAGE_WORDS = PAGE_BYTES // 4  # 2112
PAGE_ROWS = PAGE_BYTES // HD  # a page as rows of one key's bytes (TMA boxes): 64 keys, 2 of scales
SCALE_WORD0 = PAGE * HD // 4  # 2048: first scale word of a page
BLOCK = FP8_SCALE_BLOCK
# The q partial-sum jobs in one round of the grid (proj_splits): each issues its weight loads
# before it waits for qr, so a CTA's second q job's would wait for its first. H100, the fused
# index r8 at 512K (W1 / W2): 128 jobs of 64 KB against 256 of 32 KB -0.6 / -1.8 us in one
# process (bench/NOTES.md v36; v13-v14 on the H200 -1.0 .. -3.3, then 12 bytes of spills)
Q_MIN_BLOCKS = 2  # 128-blocks of q_lora a q job takes at least (32 KB of W_qb_idx)
KEY_JOB_Q_BYTES = 1.5  # a key job's bytes at most this many q jobs of Q_MIN_BLOCKS blocks
# Chips whose q jobs share their one round with the key jobs (proj_splits' key_jobs_in_round):
# 128 q + 24 key jobs on 132 CTAs put 20 q jobs in a second round, whose heads' ix_q ended
# ~1.3 us after ix_key and held every scoring job back (bench/NOTES.md v58); 64 q jobs of 128
# KB (32 16-byte loads a lane, the ring refilled) + 24 in one round, H100, A/B in one process
# (v59), index_scoring r8 128K W1 / W2 0.972 / 0.980, 512K 0.985 / 0.998, with one_poller
# 0.954 / 0.951, 0.969 / 0.986 against one_poller alone 0.969 / 0.971, 0.982 / 0.984; the
# fused index r8 512K W1 / W2 0.995 / 0.993 (one round). AMD: unmeasured, unchanged
KEY_JOBS_IN_ROUND = ("sm_90a",)
KEY_WORDS = HD // 4  # u32 words of a key's (or a q head's) HD fp8 bytes; its scale's bits follow
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
    # the scoring also counts every score's refined first digit (top 10 bits) per (job, row)
    # into `score_fine` [score_jobs, rows, 1024] (layouts/scores.py; SelectConfig.fine_digits)
    fine_digits: bool = False
    # with fine_digits: each job's first-digit counts a row (its refined counts summed by 16)
    # into `score_rows` [score_jobs, rows, 64], for the fused selection's fold
    # (SelectConfig.row_parts), and none per segment (`score_hist` unwritten)
    row_parts: bool = False
    # sm_90a: each score's aligned 16-key group maximum a row into `score_gmax` [rows,
    # capacity / GROUP_KEYS] (layouts/scores.py), for a selection that skips the groups
    # below its threshold: NaNs passed over, -inf as it is (a row holding either scans
    # every group), a fix-up's rescored key's group +inf, a row's last group an upper bound
    # (the keys past its bound count)
    group_max: bool = False

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
    def segment_shift(self):  # a key position's segment: pos >> segment_shift (check())
        return self.segment.bit_length() - 1
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
    def head_weight_coef(self):
        """The head weights' constant factor heads^-0.5 * 128^-0.5 (f32): a scoring wave's
        weight is (ix_nb's W_w h * s_q) * coef (IndexScore._head_weight)."""
        return float(np.float32(self.heads ** -0.5 * HD ** -0.5))
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
        if self.segment & (self.segment - 1):
            raise ValueError(f"index: a segment of {self.segment} keys; segments are powers "
                             "of two (the histogram's segment is a shift of the key)")
        if self.cache_pages < 1 or self.cache_pages * PAGE_BYTES > 2**31 - 1:
            raise ValueError(f"index: {self.cache_pages} cache pages overflow int32 byte offsets")
        if self.chip not in (*SCORE_ATOMS, SM90):
            raise ValueError(f"index: no scoring tiling for chip {self.chip!r}")
        if self.wgmma and self.waves % 4:
            raise ValueError(f"index: wgmma scoring needs whole warpgroups, got {self.waves} warps")
        if self.row_parts and not self.fine_digits:
            raise ValueError("index: row_parts sums the scoring's refined counts: it needs "
                             "fine_digits")
        if self.group_max and self.chip != SM90:
            raise ValueError(f"index: group_max takes the 16-key groups of sm_90a's head-sum "
                             f"layout; chip {self.chip!r} has none")
        self.scores_layout  # the selection's limits
        return self


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _mtile_loads(atom_name: str, waves: int, tile_m: int, blocks: int, w_bytes: int) -> int:
    """16-byte weight loads a lane issues for one m-tile of a projection tile of `tile_m`
    rows over `blocks` 128-blocks (stages/mma_tile.py's work split)."""
    sp = mma_tile.WaveSplit.of(tile_m, 16, waves)
    return -(-blocks // sp.kparts) * mma_tile.tiling(atom_name, 1, 1).loads_per_block_of(w_bytes)


def proj_splits(cfg, atom_name: str, waves: int, grid: int,
                key_jobs_in_round: bool = False) -> tuple:
    """(q_splits, k_splits) of ix_proj (module doc): every weight load of a wave's m-tile in
    flight at once (at most mma_tile.LOADS_IN_FLIGHT 16-byte loads a lane). q: the largest
    split of q_lora that fits, gives jobs of at least Q_MIN_BLOCKS blocks and keeps the
    heads * q_splits jobs within the grid (one round: each job's weight loads are issued
    before its wait for qr, which a second round's could not be); else the smallest such
    split that fits; key: the smallest split of hidden whose W_k and W_w loads fit and whose
    job is at most KEY_JOB_Q_BYTES q jobs of Q_MIN_BLOCKS blocks. `key_jobs_in_round`
    (KEY_JOBS_IN_ROUND): the round holds the q jobs and the key jobs, and that comes first:
    the largest split of jobs of at least Q_MIN_BLOCKS blocks that keeps them all in the
    grid, its loads past the bound if need be (the ring refills), else the rule above."""
    H = cfg.index_heads
    qb, kb = cfg.q_lora_rank // BLOCK, cfg.hidden // BLOCK
    lim = mma_tile.LOADS_IN_FLIGHT
    wt = -(-H // 16) * 16
    fit = [d for d in _divisors(qb) if _mtile_loads(atom_name, waves, HD, qb // d, 1) <= lim]
    min_blocks = min(Q_MIN_BLOCKS, qb)
    big = [d for d in fit if qb // d >= min_blocks]
    one_round = [d for d in big if H * d <= grid]
    qs = one_round[-1] if one_round else (big[0] if big else (fit[0] if fit else qb))
    key_bytes = KEY_JOB_Q_BYTES * HD * min_blocks * BLOCK
    ks = next((d for d in _divisors(kb)
               if _mtile_loads(atom_name, waves, HD, kb // d, 1) <= lim and
               _mtile_loads(atom_name, waves, wt, kb // d, 2) <= lim and
               (HD + 2 * H) * (cfg.hidden // d) <= key_bytes), kb)
    if key_jobs_in_round:
        with_keys = [d for d in _divisors(qb) if qb // d >= min_blocks and H * d + ks <= grid]
        if with_keys:
            qs = with_keys[-1]
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
        qs, ks = proj_splits(cfg, atom_name, waves, grid, chip in KEY_JOBS_IN_ROUND)
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


def score_entries(p: IndexPlan, positions, block_table, share: bool = False) -> list:
    """The scoring plan's entries in lane order: [(first row, rows, first segment, end
    segment)], one a run (its segments [0, segs)); with `share` (IndexScore.share_pages,
    stages/index_share.py) the super groups after them, each (first row, runs x rows, 0, F)
    with its runs' own entries starting at F."""
    pos = np.asarray(positions).reshape(-1)
    bt = np.asarray(block_table)
    S = p.segment
    gs = groups_of(pos, block_table)
    own = [[f, n, 0, int(pos[f + n - 1]) // S + 1] for f, n in gs]
    supers = []
    i = 0
    while share and i < len(gs):
        f, n = gs[i]
        j = i + 1
        while j < len(gs) and gs[j][1] == n and pos[gs[j][0]] == pos[f] and \
                bt[gs[j][0] + n - 1, 0] == bt[f + n - 1, 0]:
            j += 1
        first_seg = int(pos[f]) // S
        if j - i > 1 and first_seg > 0:
            supers.append((f, n * (j - i), 0, first_seg))
            for e in own[i:j]:
                e[2] = first_seg
        i = j
    return [tuple(e) for e in own] + supers


def score_runs(p: IndexPlan, positions, block_table, share: bool = False,
               tail_rows: bool = False, tails_last: bool = False) -> list:
    """The run map: per scoring job j, [(first row, rows, first segment, end segment)] it
    scores (the kernel's formula; `share`: with the super entries, score_entries, split by
    index_share's cost model: segment_cost a segment, tail_cost after a run's own entry, by
    its rows with `tail_rows`, IndexScore.tail_rows; `tails_last`: the super entries first
    in the split's order, IndexScore.tails_last). A row's
    scores are at scores[r, 0 .. pos[r]], its histograms at score_hist[r, 0 .. pos[r] // S]."""
    from .index_share import segment_cost, tail_cost
    J = p.score_jobs
    entries = score_entries(p, positions, block_table, share)
    n_own = len(groups_of(positions, block_table))
    cost, prefix, C = [None] * len(entries), [None] * len(entries), 0
    order = list(range(len(entries)))
    if share and tails_last:
        order = order[n_own:] + order[:n_own]
    for e in order:
        f, n, s0, s1 = entries[e]
        pairs = (n + 1) // 2
        seg = segment_cost(p, pairs, pairs == p.pairs) if share else pairs
        prefix[e] = C
        cost[e] = (s1 - s0, seg)
        C += (s1 - s0) * seg + (tail_cost(p, e < n_own, n, tail_rows) if share else 0)
    runs = []
    for j in range(J):
        mine = []
        for (f, n, s0, _), P, (segs, seg) in zip(entries, prefix, cost):
            den = seg * J
            lo = min(-(-max(j * C - P * J, 0) // den), segs)
            hi = min(-(-max((j + 1) * C - P * J, 0) // den), segs)
            if lo < hi:
                mine.append((f, n, s0 + lo, s0 + hi))
        runs.append(mine)
    return runs
