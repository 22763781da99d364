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

Modules (the stages in launch order, and what they share):

    stages/index_plan.py   IndexPlan, plan(), proj_splits, the constants; groups_of, score_runs
                           (score_entries: the plan with shared pages)
    stages/index_dsl.py    the DSL helpers the stages share (lanes, rope, Hadamard, quantize,
                           wait_flags, the stage-body reloads)
    stages/index_proj.py   ix_qr, ix_proj, ix_q, ix_key: the projections and the cache append
    stages/index_score.py  ix_score; wait_scored, scored_reads (for the scores' consumers)
    stages/index_share.py  ix_score's plan with shared pages scored once (share_pages, sm_90a)
    this module            the launch kinds `index_scoring` and `index` (index_stages, the
                           fused selection, inputs); it re-exports the names above
"""
from __future__ import annotations

import numpy as np

from layouts.scores import ScoresLayout

from .index_tiling import SM90
from .launch import Launch
# every name other modules and the tests import from stages.index (re-exported)
from .index_plan import (HD, PAGE, PAGE_BYTES, PAGE_WORDS, SCALE_WORD0, BLOCK,  # noqa: F401
                         Q_MIN_BLOCKS, KEY_JOB_Q_BYTES, QW, NW0, DEPTH,  # noqa: F401
                         SCALE_FLOOR, DEFAULT_WAVES,  # noqa: F401
                         INTERP_GRID, GPU_SEGMENT, INTERP_SEGMENT, INTERP_CAPACITY,  # noqa: F401
                         IndexPlan, _divisors, _mtile_loads, proj_splits, plan,  # noqa: F401
                         groups_of, score_runs)  # noqa: F401
from .index_dsl import (_CUR_LANE, _lane, _tid, _rope_freqs, _sincos, _scan,  # noqa: F401
                        ordered_digit, stage_body, reloaded, local_io, rotate,  # noqa: F401
                        quantize, pack_words, wait_flags)  # noqa: F401
from .index_proj import IndexProj, IndexQ, IndexKey, IndexQR  # noqa: F401
from .index_score import IndexScore, wait_scored, scored_reads  # noqa: F401


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
    fine = bool(kw.pop("fine_digits", False))
    group_max = bool(kw.pop("group_max", False))
    p = plan(spec, **pk)
    if fine or group_max:  # (the scoring's share of the selection's aids: its cost, alone)
        from dataclasses import replace
        p = replace(p, fine_digits=fine, group_max=group_max).check()
    return IndexLaunch("index_scoring", p, index_stages(p), **kw)


INTERP_TOPK_CONTEXT = 2048 + 2 * PAGE  # keys the interpreter's `index` cache holds past K

# The fused index on NVIDIA refines the scoring's first digits (IndexPlan.fine_digits) and
# folds them into sel_h1 (SelectConfig.fold_first_digits) by default: the indexer's rows put
# 10-75% of their keys in the 6-bit threshold bin, which the coarse plan lists only after a
# second scan (the fold without them was slower in the fused index, v28). Measured on an
# H100 (bench/NOTES.md v31): r8 W1 / W2 125.3-126.0 / 155.3-155.8 -> 117.4-117.9 / 148.3-149.0
# us (one call, twice), r4 103.6 / 111.6 -> 99.1 / 106.1, r2 98.0 / 99.3 -> 95.3 / 94.9 (one
# call). Either stays a launch tunable.
FINE_DIGITS_ON_NVIDIA = True
# ... and its fold sums the scoring's per-job first digits (IndexPlan.row_parts: the scoring
# keeps no segment histograms). H100, 512K keys, one call (bench/NOTES.md v33): r8 W1 / W2
# 116.1-117.4 / 149.4-149.8 -> 111.0-111.3 / 143.3-144.2 us; with IndexScore.share_pages
# and fixup_ballot too (their sm_90a defaults) 110.1 / 121.3. A launch tunable (row_parts).
ROW_PARTS_ON_NVIDIA = True
# ... and sel_h1 skips the 16-key groups whose maximum is below its threshold (IndexPlan.
# group_max: the scoring writes each group's maximum; SelectConfig.group_skip, over the
# spans loop, lean_spans): sel_h1 18.98 -> 14.34 us, the scoring +1.5 .. +2.9. Fused r8 at
# 512K, defaults vs the skip in one process (bench/NOTES.md v40-v42), W1 / W2: H100 0.987 /
# (not timed), H200 0.993 / 0.979, H100 0.988 / 0.994 (the maxima as upper bounds, this
# form); with the one-pair chains' maxima deferred too, the old defaults against these
# 1.002-1.022 / 1.028 (v43); top-k exact at rows 2 / 8 in each call. Launch tunables
# (group_max, lean_spans). Timed at rows 8 only (top-k exact at rows 2 too): fewer rows
# are left as they were measured (the scan of every group) until timed.
GROUP_SKIP_ON_NVIDIA = True
GROUP_SKIP_MIN_ROWS = 8
# ... the selection finishing each row after two exchanged digits (SelectConfig.tail_finish,
# after the refined first digits: sel_h1 buckets its 10-bit prefix's candidates by the next
# digit, sel_out finishes the row from message 1; no sel_h2 or sel_h3). H100, one process
# each: 512K r8 W1 104.45 / 105.04 -> 101.93 / 102.26 us (bench/NOTES.md v47), and (v50) W1 /
# W2 at 64K 0.974 / 0.927, at 512K 0.975 / 0.971 (the same tail chosen per row by key count
# 1.003 / 0.980 / 0.994 / 0.992: no better); top-k exact in every timed run and through
# check_topk (the defaults' digests, v47). Rows 4 (v51, H100, one round each): W1 / W2 at 64K
# 64.32 / 60.26 -> 59.06 / 58.64 us (0.918 / 0.973), at 512K 88.92 / 88.59 -> 85.07 / 85.65
# (0.957 / 0.967), check_topk 4 of 4 exact; with the group skip too only 0.975-0.981. On at
# rows TAIL_FINISH_MIN_ROWS and more (rows 2 untimed). A launch tunable (tail_finish) either
# way.
TAIL_FINISH_ON_NVIDIA = True
TAIL_FINISH_MIN_ROWS = 4


def index_launch(spec, **kw) -> IndexLaunch:
    """Kind `index`: the front (stages.front: RMSNorm, q_a | kv_a, qr, the MLA cache), the
    indexer (qr from the front's partial sums, the key/weight projections from x * g with
    the front's rs, cache append, scoring) and the exact top-k of its scores (stages.select,
    fused after the scoring: topk [rows, index_topk] int32 slots, topk_diag [rows, 4]) in
    one persistent kernel. Keywords as index_scoring_launch plus the front's (splits) and the
    selection's (select_digits, lean_lists, finish_max, tail_finish, tail_min_keys (the
    tail finish for rows of at least that many keys, the rounds for shorter ones),
    cta_publish, fold_first_digits, lean_spans, fine_digits, row_parts, group_max);
    fine_digits None: on where the chip is sm_90a (FINE_DIGITS_ON_NVIDIA), with fold_first_digits None then on too; row_parts (the
    fold sums the scoring's per-job first digits, SelectConfig.row_parts) needs both; None:
    on where both are and the chip is sm_90a (ROW_PARTS_ON_NVIDIA); group_max (the scoring's
    group maxima, sel_h1 skipping the groups below its threshold) None: on where fine_digits
    is, the chip is sm_90a and the rows are GROUP_SKIP_MIN_ROWS or more, unless lean_spans
    is 0 (GROUP_SKIP_ON_NVIDIA), with lean_spans None then on too; tail_finish (the selection
    finishing each row after two exchanged digits) None: with TAIL_FINISH_ON_NVIDIA (on), on
    where fine_digits is, the chip is sm_90a and the rows are TAIL_FINISH_MIN_ROWS or more."""
    from .front import FrontQ, front_stages, plan as front_plan
    fk = {n: kw.pop(n) for n in ("splits", "cache_pages", "tagged_parts") if n in kw}
    digits = kw.pop("select_digits", None)
    lean = kw.pop("lean_lists", None)
    finish = kw.pop("finish_max", None)
    tail = kw.pop("tail_finish", None)
    tail_keys = kw.pop("tail_min_keys", None) or None
    publish = kw.pop("cta_publish", None)
    fold = kw.pop("fold_first_digits", None)
    spans = kw.pop("lean_spans", None)
    fine = kw.pop("fine_digits", None)
    row_parts = kw.pop("row_parts", None)
    group_max = kw.pop("group_max", None)
    pk = {n: kw.pop(n) for n in ("grid", "waves", "chip", "segment", "score_jobs", "k_splits",
                                 "q_splits") if n in kw}
    chip = pk.get("chip") or (spec.target if spec.target != "interp" else "gfx950")
    if fine is None:  # (measured on NVIDIA only: gfx950 unmeasured, gfx942's LDS cannot hold it)
        fine = chip == SM90 and FINE_DIGITS_ON_NVIDIA
    fine = bool(fine)
    if fold is None and fine and chip == SM90:
        fold = True  # (measured with the refined digits: -1.7 .. -3.3 us more, v31)
    if row_parts is None:  # (sm_90a only: fine and fold are on by default only there)
        row_parts = chip == SM90 and fine and bool(fold) and ROW_PARTS_ON_NVIDIA
    row_parts = bool(row_parts)
    if tail is None and tail_keys is None:  # (measured with the refined digits, at rows 8)
        tail = (chip == SM90 and fine and not finish and TAIL_FINISH_ON_NVIDIA
                and spec.rows >= TAIL_FINISH_MIN_ROWS)
    if group_max is None:  # (the skip reads its spans' groups: lean_spans, unless turned off)
        group_max = (chip == SM90 and fine and (spans is None or bool(spans))
                     and GROUP_SKIP_ON_NVIDIA and spec.rows >= GROUP_SKIP_MIN_ROWS)
    group_max = bool(group_max)
    if group_max and spans is None:
        spans = True
    if row_parts and not (fine and fold):
        raise ValueError(f"index: row_parts = 1 sums the scoring's refined first digits in "
                         f"sel_h1's fold: it needs fine_digits and fold_first_digits (here "
                         f"{int(fine)} and {int(bool(fold))})")
    fp8 = "fp8e4m3fnuz" if chip == "gfx942" else "fp8e4m3fn"
    fw = pk.get("waves") or (4 if chip == SM90 and spec.target == "interp" else None)
    if "cache_pages" not in fk:  # every page of a row's context mapped (the scoring reads them)
        cap = -(-spec.config.max_context // PAGE)
        # interp: room for a context past the selection's K = 2048 keys (check_topk --through
        # index checks rows that have more keys than they select)
        interp_pages = -(-(INTERP_TOPK_CONTEXT) // PAGE)
        fk["cache_pages"] = 4 * spec.rows + (interp_pages if spec.target == "interp" else cap)
    fp = front_plan(spec, grid=pk.get("grid"), waves=fw, fp8=fp8, **fk)
    # the scoring's segment stays the plan's (GPU_SEGMENT): a job takes whole segments, so a
    # row of few segments leaves most scoring jobs idle (capacity / 32 had 32 of 132 jobs
    # score every key of a 512K x 8 launch, 4x the others' time: bench/NOTES.md v7)
    p = plan(spec, capacity=fp.capacity, cache_pages=fp.cache_pages, segment=pk.pop("segment", None),
             **{**pk, "grid": fp.grid, "waves": fp.waves})
    from dataclasses import replace
    p = replace(p, source="front", front=fp, fine_digits=fine, row_parts=row_parts,
                group_max=group_max).check()
    # front_q's qr output is written by ix_qr, which the q heads wait for (IndexQR)
    front = [reloaded(st) for st in front_stages(fp) if not isinstance(st, FrontQ)]
    cfg = select_config(p, spec, digits=digits, lean_lists=lean, finish_max=finish,
                        cta_publish=publish, fold_first_digits=fold, lean_spans=spans,
                        tail_finish=tail, tail_min_keys=tail_keys)
    L = IndexLaunch("index", p, front + [IndexQR(p)] + index_stages(p) + fused_select(p, cfg),
                    **kw)
    L.select_cfg = cfg
    return L


def select_config(p: IndexPlan, spec, *, digits=None, lean_lists=None, finish_max=None,
                  cta_publish=None, fold_first_digits=None, lean_spans=None, tail_finish=None,
                  tail_min_keys=None):
    """The exact top-k of the launch's own scores (stages.select, DESIGN.md section 7): the
    scoring's layout (rows, capacity, segment), each row's keys 0..positions[r] through its
    block-table row, K = the config's index_topk; up to grid / rows slice jobs a row; the
    radix plan `digits` (None: the selection's default); `lean_lists` (None: off, not
    measured in the fused launch); `finish_max` (None or 0: no row finish); `cta_publish`,
    `fold_first_digits`, `lean_spans` (None: SelectConfig's defaults). With the plan's
    `fine_digits` (IndexPlan.fine_digits, launch tunable fine_digits): the scoring's refined
    first digits from its score_jobs parts, plan FINE_DIGITS unless `digits` is given, no
    deferred lists."""
    from . import select as sel
    more = {} if digits is None else {"digits": digits}
    if finish_max:
        more["finish_max"] = int(finish_max)
    if lean_lists is not None:
        more["lean_lists"] = bool(lean_lists)
    if tail_min_keys:  # (the tail or the rounds by a row's key count: SelectConfig)
        more["tail_min_keys"] = int(tail_min_keys)
    for name, v in (("cta_publish", cta_publish), ("fold_first_digits", fold_first_digits),
                    ("lean_spans", lean_spans), ("tail_finish", tail_finish)):
        if v is not None:
            more[name] = bool(v)
    options = sel.measured_options(p.wgmma)
    if p.group_max:  # sel_h1 skips the groups below its threshold (the scoring's maxima)
        more["group_skip"] = True
    if p.fine_digits:  # the scoring's refined first digits: no row is crowded, none deferred
        options.update(defer_fat_bins=False, count_from_list=True)
        more.update(fine_digits=True, fine_parts=p.score_jobs, row_parts=p.row_parts)
        more.setdefault("digits", sel.FINE_DIGITS)
    return sel.SelectConfig(ScoresLayout(p.rows, p.capacity, p.segment),
                            max_slices=max(1, min(sel.MAX_SLICES, p.grid // p.rows)),
                            topk=spec.config.index_topk, bt_width=p.max_pages, positions=True,
                            names=sel.Names(n_keys="positions"), **options, **more)


def fused_select(p: IndexPlan, cfg) -> list:
    """The selection after the scoring: it reads the plain `scores` and `score_hist` once
    every `score_done` pair is in (wait_scored), as the stages.select package documents."""
    from . import select as sel
    ready = sel.Ready(lambda r: scored_reads(p), lambda k, io: wait_scored(k, io, p))
    return sel.select_stages(cfg, scores="plain", hist="plain", ready=ready,
                             fine="plain" if cfg.fine_digits else None,
                             gmax="plain" if cfg.group_skip else None)


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
              _index_inputs, launch_tunables=("waves", "select_digits", "q_splits",
                                              "k_splits", "lean_lists", "finish_max",
                                              "tail_finish", "tail_min_keys", "cta_publish",
                                              "fold_first_digits", "lean_spans",
                                              "fine_digits", "row_parts", "group_max",
                                              "tagged_parts")))
register(Kind("index_scoring", "the indexer from h and qr: index projections (q heads, key "
              "LayerNorm, rope, Hadamard, FP8), the key cache append, and the scores of every "
              "visible key with first-digit histograms (index = front + this)",
              index_scoring_launch, _kind_inputs, launch_tunables=("waves", "q_splits",
                                                                   "k_splits", "fine_digits",
                                                                   "group_max")))
