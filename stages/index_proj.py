"""The index projections (stages/index.py): the stages that turn qr and h into the FP8 q
heads (ix_qb), the new keys (the paged cache, ix_nb) and the head weights. Stages (each
job's work is declared; the scheduler places jobs):

    ix_qr[r]     (kind index only, in front_q's place) qr = RMSNorm(q_a) from the front's
                 partial sums (front_q's math and helpers) into the front's qr output and
                 ix_qr (plain), then the row's pair in ix_qrdone, which the q-head projection
                 jobs wait for.
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
                 pair in ix_pdone. Split counts: proj_splits (stages/index_plan.py).
    ix_q[h]      q head h for all rows: waits for its QS pairs (threads in parallel; barrier;
                 acquire), sums the partials in split order (the same bits on every run and
                 schedule), rope, Hadamard, quantize -> ix_qb (plain: 32 fp8 words and the
                 scale's bits a (head, row)), then its pair in ix_qdone: a scoring job waits
                 for the `heads` pairs once and loads its query operands straight into
                 registers.
    ix_key[0]    its input loads first (positions, rope angles, LayerNorm weights, the
                 rows' 1/rms(x) from the front), then waits for the KS key jobs' pairs (not
                 for the q heads) and sums their partials in split order, a row's loads in
                 one round trip: the head weights W_w h (x 1/rms(x)), then the new key
                 (LayerNorm, rope, Hadamard, quantize) -> the cache and ix_nb (bulk: a row's
                 key words, scale bits, then its head weights; the scoring multiplies in s_q
                 and the constant factors).
"""
from __future__ import annotations

from types import SimpleNamespace

from layouts.regions import BulkBuffer, PlainBuffer, TaggedPairs
from monokernel.atoms import atom as get_atom
from monokernel.ir import BULK_ALIGN, L2_LINE_BYTES
from monokernel.types import bf16, f32, i32, u8, u32, u64

from .base import Buffer, Job, Stage, Use
from .index_plan import HD, KEY_WORDS, PAGE, PAGE_BYTES, PAGE_WORDS, SCALE_WORD0, BLOCK, QW, NW0, IndexPlan
from .index_dsl import (_lane, stage_body, rotate, quantize, pack_words, wait_flags, wave_rows,
                        lane_rope_freqs, rope_angles, publish_done)
from . import mma_tile

RS_BATCH_ROWS = 4  # rows whose x loads ix_key keeps in flight together for their 1/rms(x)
# (8 rows x 3 16-byte loads a thread would hold 96 registers; 4 rows: half, two barriers)


# ------------------------------------------------------------------------------------ stages

class _ProjStage(Stage):
    """What the projection stages share: their plan, the f32 tolerance of their outputs
    against float64, and arena accesses through the one arena pointer (local_io's flat
    mode: fewer SGPRs held in the fused `index` kernel)."""
    rel_tol = 1e-5
    flat_mailbox = True

    def __init__(self, p: IndexPlan):
        self.p = p


class IndexProj(_ProjStage):
    """Partial sums of the three index projections on the tensor cores (module doc,
    stages/mma_tile.py): job h * q_splits + s: W_qb_idx rows of head h over q_lora split s ->
    ix_qpart; job q_jobs + s: W_k (128 rows) then W_w (heads rows) over hidden split s,
    sharing the split's staged activations -> ix_kpart. Each job then releases and publishes
    its ix_pdone pair."""
    name = "ix_proj"
    # --tune ix_proj.l2_prefetch=1: a q job fed by the front asks the L2 for its whole weight
    # block before it waits for qr. Measured no gain on the H200 (index 512K x 8 W1 129.1 vs
    # 129.4 us, W2 164.7 vs 165.5: bench/NOTES.md v13): off
    TUNABLES = ("l2_prefetch", "one_poller")
    l2_prefetch = False
    # kind index: a q job's wait for the rows' qr pairs by wave 0's lanes alone, then the
    # CTA's agreement and every wave's acquire (wait_flags' CTA form), not by every wave:
    # the 64 q jobs' 8 waves poll the front's ix_qrdone lines while the front's last jobs
    # publish there (IndexScore.one_poller's question, which won in index_scoring: bench/
    # NOTES.md v59). Off until timed (--tune ix_proj.one_poller=1)
    one_poller = False

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

    def prefetch(self, k, job, args):
        """The job's weight rows asked of the L2, a line a thread (Launch.prefetch_next: while
        the CTA's job before it runs; most q jobs are a CTA's second of this stage, whose
        loads otherwise start only after the first one's wait for qr): a q job's head block
        of W_qb_idx, a key job's split of W_k and W_w. (The block scales, 4 bytes a 128 x 128
        block, are left to the job's own loads.)"""
        p = self.p
        line = L2_LINE_BYTES
        with k.if_else(job < p.q_jobs) as (qj, kj):
            with qj:
                h, s = job / p.q_splits, job % p.q_splits
                k.prefetch_rows_l2(args.ix_wq, (h * HD) * p.q_lora + s * p.qchunk, HD, p.qchunk,
                                   p.q_lora, line, line=True)
            with kj:
                s = job - p.q_jobs
                KC, fb, wb = p.kchunk, p.fp8.bytes, bf16.bytes
                k.prefetch_rows_l2(args.ix_wk, s * KC * fb, HD, KC * fb, p.hidden * fb, line,
                                   line=True)
                k.prefetch_rows_l2(args.ix_ww, s * KC * wb, p.heads, KC * wb, p.hidden * wb,
                                   line, line=True)

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
                # the weights: the same bytes every launch (a pdl launch's first job may ask
                # the L2 for them before its wait: `prefetch`)
                "ix_wq": Buffer(p.fp8, (p.heads * HD, p.q_lora), constant=True),
                "ix_wk": Buffer(p.fp8, (HD, p.hidden), constant=True),
                "ix_ws": Buffer(f32, (p.weight_scales,), constant=True),
                "ix_ww": Buffer(bf16, (p.heads, p.hidden), constant=True)}

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
            return [Use("ix_qr", 0, p.rows * p.q_lora), Use("ix_qrdone", 0, p.rows)]
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
        publish_done(k, io, "ix_pdone", job)

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
                    wait_flags(k, io, 0, R, "ix_qrdone", each_wave=not self.one_poller)
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

        if self.l2_prefetch and p.source == "front":
            # the head's 128 rows x QC bytes asked of the L2 now: the wait for qr (the front's
            # whole projection) is long, and only a wave's first m-tile of these weights is in
            # registers when it starts; after it the rest are L2 hits
            per_thread = max(1, (k.W * k.L) // HD)
            piece = QC // per_thread if QC % (per_thread * BULK_ALIGN) == 0 else QC
            k.prefetch_rows_l2(a.ix_wq, (h * HD) * p.q_lora + k0, HD, QC, p.q_lora, piece)

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


class IndexQ(_ProjStage):
    """q head h for all rows: the head's q_splits partial sums in split order, rope,
    Hadamard, quantize -> ix_qb (plain: 32 fp8 words and the scale's bits a (head, row)),
    published by the head's pair in ix_qdone (index_dsl.publish_done)."""
    name = "ix_q"

    def jobs(self):
        p = self.p
        return [Job(h, cost_bytes=p.rows * HD * (4 * p.q_splits + 1) + 8 * p.q_splits,
                    cost_flops=p.rows * HD * 64) for h in range(p.heads)]

    def regions(self):
        p = self.p
        return [PlainBuffer("ix_qb", u32, (p.heads, p.rows, QW)),
                TaggedPairs("ix_qdone", (p.heads,), u32)]

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
        return [Use("ix_qb", h * R * QW, (h + 1) * R * QW), Use("ix_qdone", h, h + 1)]

    @stage_body
    def body(self, k, hq, io):
        p = self.p
        a = io.args
        R, NQ = p.rows, p.heads * HD
        wait_flags(k, io, hq * p.q_splits, p.q_splits)
        io.env.phase(0)  # the head's partial sums are in
        ne = HD // k.L
        lane = _lane(k)
        # (the positions and rope angles after the wait, in the loop: formed before it they
        # were held across it, and the sm_90a build with the pipelined scoring chains, which
        # test_index_score_pipeline pins at zero spills, spilled 172 bytes)
        freqs = lane_rope_freqs(k, p, ne, a.ix_rope_freq)
        for r in k.range(k.wave_id(), R, k.W):
            xv = None
            for s in range(p.q_splits):  # the fixed split order: the same bits every run
                v = io.load("ix_qpart", (s * R + r) * NQ + hq * HD + lane * ne, ne)
                xv = v if xv is None else xv + v
            xs = [xv[t] for t in range(ne)] if ne > 1 else [xv]
            angles = rope_angles(k, k.max(k.load(a.positions, r, i32), 0), freqs)
            q8, sc = quantize(k, p, rotate(k, p, xs, angles))
            word, widx, wl = pack_words(k, q8)
            io.store("ix_qb", (hq * R + r) * QW + widx, word, mask=wl)
            io.store("ix_qb", (hq * R + r) * QW + KEY_WORDS, k.bitcast(sc, u32), mask=lane.eq(0))
        io.env.phase(1)  # wave 0's rows are rotated, quantized and stored
        publish_done(k, io, "ix_qdone", hq)

    def reference(self, env):
        from .index_ref import proj_reference
        return proj_reference(self.p, env)


class IndexKey(_ProjStage):
    """The head weights W_w h (x 1/rms(x) from the front), then the new keys (LayerNorm,
    rope, Hadamard, FP8) -> ix_nb (and the keys to the paged cache), one release. The q
    scales and the constant factors are the scoring's (IndexScore._head_weight): ix_key waits
    for nothing but the key jobs' partial sums, not for the q heads, so it is off the q
    path (bench/NOTES.md v14)."""
    name = "ix_key"
    TUNABLES = ("scales_first",)
    # The rows' x loads (their 1/rms(x)) before the other input loads, as v36 issued them:
    # v37's form (the inputs first) put ix_key's phase 0 at 11.5 us instead of 4.6 on the
    # H100 (index r8 W1 timeline), and the q-head job queued behind ix_key then set ix_q's
    # last end. Measured in bench/NOTES.md v38.
    scales_first = False
    # (rows_at_once, a wave's rows' page and partial sums in one round trip after the wait,
    # measured no change on the H100 (v38: at rows 8 a wave owns one row) and gfx942's rows-8
    # build cannot fit two: removed)

    def jobs(self):
        p = self.p
        # from the front, the rows' 1/rms(x) come first, before any wait: a CTA of its own
        return [Job(0, cost_bytes=p.rows * (p.k_splits * (HD + p.heads) * 4 + HD * 2),
                    cost_flops=p.rows * HD * 64, lead=p.source == "front")]

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
                Use("ix_kpart", 0, p.k_splits * p.rows * (HD + p.heads))]

    def writes(self, j):
        p = self.p
        return [Use("ix_nb", 0, p.rows * p.nb_words)]

    @stage_body
    def body(self, k, job, io):
        p = self.p
        # Under the front's weight stream one dependent round trip of this job costs ~2-3.5
        # us (H100, bench/NOTES.md v37): the input loads are issued first, together, and
        # waited for only where the chain already waits. The rows' positions, rope
        # frequencies and LayerNorm weights go out with the rows' x (their 1/rms(x), each
        # row an L2 round trip and CTA barriers, computed while the projection jobs run);
        # each row's cache page after the wait, with its partial sums
        norm, mine, rs_of = self._before_wait(k, io)
        io.env.phase(0)  # the rows' 1/rms(x)
        wait_flags(k, io, p.q_jobs, p.k_splits)
        io.env.phase(1)  # the key jobs' partial sums are in
        for row in mine:  # rows one at a time (_row_sums)
            heads, key = self._row_sums(k, io, row, rs_of)
            self._store_head_weights(k, io, row, heads)
            self._new_key(k, io, row, norm, key)
        io.env.phase(2)  # wave 0's head weights and new keys are stored
        io.release("ix_nb")

    def _before_wait(self, k, io):
        """(LayerNorm pieces, the wave's rows, their 1/rms(x)): inputs only (body)."""
        if self.scales_first:
            rs_of = self._row_scales(k, io)
            norm, freqs, mine = self._row_inputs(k, io)
        else:
            norm, freqs, mine = self._row_inputs(k, io)
            rs_of = self._row_scales(k, io)
        for row in mine:  # the loads have long arrived: math only
            row.angles = rope_angles(k, row.pc, freqs)
        return norm, mine, rs_of

    def _row_sums(self, k, io, row, rs_of):
        """(the row's head-weight sums, its key elements' sums), with its cache page
        (`row.page`): every load of the row issued before its first store (a store to the
        arena may alias them, so later loads would wait for it), one round trip a row. Rows
        one at a time: gfx942's rows-8 build (2 rows a wave) holding both rows' 3 x 24
        loads went past 256 VGPRs."""
        p = self.p
        ne = HD // k.L
        row.page = k.load(io.args.block_table, row.r * p.max_pages + (row.pc >> 6), i32)
        rs = rs_of(row.r)  # once a row
        return (self._head_sums(k, io, row.r, rs),
                self._kpart_sum(k, io, row.r, rs, _lane(k) * ne, ne))

    def _row_inputs(self, k, io):
        """(the lane's LayerNorm weight and bias pieces, its rope frequencies, the rows this
        wave owns: [row, live, position, clamped position]): the loads, issued, not yet
        waited for."""
        p = self.p
        a = io.args
        ne = HD // k.L
        e0 = _lane(k) * ne
        norm = (k.load(a.ix_kn, e0, f32, ne), k.load(a.ix_kn, HD + e0, f32, ne))
        freqs = lane_rope_freqs(k, p, ne, a.ix_rope_freq)
        mine = []
        for r, live in wave_rows(k, p.rows):
            pos = k.load(a.positions, r, i32)
            mine.append(SimpleNamespace(r=r, live=live, pos=pos, pc=k.max(pos, 0)))
        return norm, freqs, mine

    def _kpart_sum(self, k, io, r, rs, col, n=1, mask=None, heads=False):
        """Row r's sum over the key jobs' partials of ix_kpart's key columns [col, col + n)
        (`heads`: of its head columns, which follow the HD key columns), in split order (the
        same bits on every run), times the row's 1/rms(x) `rs` where the front feeds x (None
        from the buffers: h is normalized)."""
        p = self.p
        R, PW_ = p.rows, HD + p.heads
        v = None
        for s in range(p.k_splits):
            row0 = (s * R + r) * PW_ + HD if heads else (s * R + r) * PW_
            x = io.load("ix_kpart", row0 + col, n, mask=mask)
            v = x if v is None else v + x
        return v if rs is None else v * rs

    def _head_sums(self, k, io, r, rs):
        """W_w h (x 1/rms(x)) of row r: a lane a head, a block of L heads at a time."""
        H = self.p.heads
        lane = _lane(k)
        return [self._kpart_sum(k, io, r, rs, k.min(h0 + lane, H - 1), mask=(h0 + lane) < H,
                                heads=True) for h0 in range(0, H, k.L)]

    def _store_head_weights(self, k, io, row, heads):
        """The row's head weights -> ix_nb after its key words; the scoring multiplies in s_q
        and the constants."""
        p = self.p
        H = p.heads
        lane = _lane(k)
        for h0, wsum in zip(range(0, H, k.L), heads):
            h = h0 + lane
            io.store("ix_nb", row.r * p.nb_words + NW0 + k.min(h, H - 1), k.bitcast(wsum, u32),
                     mask=(h < H) & row.live)

    def _new_key(self, k, io, row, norm, v):
        """The row's new key from its partial sums `v`: LayerNorm, rope, Hadamard, FP8 ->
        ix_nb and the paged cache slot of the row's position (a wave a row)."""
        p = self.p
        a = io.args
        lane = _lane(k)
        ne = HD // k.L
        eps = float(p.config.index_eps)
        r = row.r
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
        g, b = norm
        ys = [k.fma(ds[t] * rstd, g[t] if ne > 1 else g, b[t] if ne > 1 else b)
              for t in range(ne)]
        q8, sc = quantize(k, p, rotate(k, p, ys, row.angles))
        word, widx, wl = pack_words(k, q8)
        io.store("ix_nb", r * p.nb_words + widx, word, mask=wl & row.live)
        io.store("ix_nb", r * p.nb_words + KEY_WORDS, k.bitcast(sc, u32),
                 mask=lane.eq(0) & row.live)
        pc = row.pc
        ok = io.ok & (row.pos >= 0) & (row.page >= 0) & row.live
        base = row.page * PAGE_WORDS
        k.store(a.index_cache, base + (pc & (PAGE - 1)) * 32 + widx, word, mask=wl & ok)
        k.store(a.index_cache, base + SCALE_WORD0 + (pc & (PAGE - 1)), sc,
                mask=lane.eq(0) & ok)

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
        from .front import _rows_rs
        red = k.lds("ix_rs_red", f32, RS_BATCH_ROWS * k.W)
        rsl = k.lds("ix_rs", f32, p.rows)
        for r0 in range(0, p.rows, RS_BATCH_ROWS):
            if r0:
                k.barrier()  # the previous batch has read `red`
            rows = list(range(r0, min(p.rows, r0 + RS_BATCH_ROWS)))
            for r, rs in zip(rows, _rows_rs(k, p.front, io.args, rows, red)):
                k.store(rsl, r, rs, mask=k.wave_id().eq(0) & _lane(k).eq(0))
        if k.W > 1:
            k.barrier()
        return lambda r: k.load(rsl, r, f32)

    def reference(self, env):
        from .index_ref import key_reference
        return key_reference(self.p, env)


def _front_q():
    from .front import FrontQ
    return FrontQ


class IndexQR(_front_q()):
    """From the front (kind `index`, in front_q's place): qr[r] = RMSNorm(q_a[r]) * g_q with
    q_a = rs(x_r) * sum_s front_part[s, r, :q_lora] (front_q's math and helpers), rounded to
    bf16 once, stored twice: to the front's `qr` output (masked as front_q masks it) and to
    the plain region `ix_qr`, then the row's pair in `ix_qrdone` that the q-head projection
    jobs wait for (an output buffer is no region a later stage can wait on). One job a row
    instead of front_q's and its own: front_q's 8 jobs, each reading the row's x and
    partial sums again, held the CTAs that the q-head jobs then waited for (H100 timeline,
    bench/NOTES.md v37)."""
    name = "ix_qr"

    def __init__(self, p: IndexPlan):
        super().__init__(p.front)
        self.ip = p

    def regions(self):
        ip = self.ip
        return [PlainBuffer("ix_qr", bf16, (ip.rows, ip.q_lora)),
                TaggedPairs("ix_qrdone", (ip.rows,), u32)]

    def writes(self, r):
        q = self.ip.q_lora
        return [Use("ix_qr", r * q, (r + 1) * q), Use("ix_qrdone", r, r + 1)]

    @stage_body
    def body(self, k, job, io):
        from .front import _and
        q = self.p.q_lora
        a = io.args
        qr, ok = self.row_qr(k, io, a, job)
        for e, v, m in qr:
            v16 = k.cast(v, bf16)
            io.store("ix_qr", job * q + e, v16, mask=m)
            k.store(a.qr, job * q + e, v16, mask=_and(ok, m))
        publish_done(k, io, "ix_qrdone", job)
