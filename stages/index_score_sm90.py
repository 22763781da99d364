"""The Hopper scoring of one row group (stages/index_score.py: IndexScore on sm_90a).

A warpgroup takes 64 keys (one page) a step as the register A operand of wgmma
m64nNk32 e4m3, the group's queries staged in shared memory as B; `WgmmaGroup` holds what a
group's key loop needs (its steps, this warp's place in its warpgroup and quad) and builds
the step's parts (page lookup, key loads, the A operands, the chain, the epilogue), which
`run` hands to one of IndexScore's pipelines:

    plain        one chain of every pair a step (N = 2 x pairs x heads) or, for groups of
                 fewer pairs, a chain a pair; optionally the warpgroups taking turns at the
                 tensor cores (IndexScore.turns)
    halves       the all-pairs chain split in two, alternating with each other's epilogue
                 (IndexScore.pipeline_min_pairs)
    alternate    rows-2 builds: step s's chain issued before step s-1's epilogue
                 (IndexScore.alternate_one_pair)
    split        16 warps: two page streams, a page's pairs split over a warpgroup pair
                 (IndexScore.split_pairs)
    SS           keys staged in shared memory for the SS wgmma (IndexScore.ss_keys)

Every alternative but the plain one is off by default; bench/NOTES.md v7-v10 has their
measurements. The order of the DSL calls here is the kernel's: the default code objects are
byte-identical to the closures this class replaced.
"""
from __future__ import annotations

import math

from layouts.scores import GROUP_MAX_REGION, group_max_word
from monokernel.atoms.base import DESC_SHIFT, SW128_ATOM_BYTES, desc_units, swizzled
from monokernel.ir import MBARRIER_BYTES
from monokernel.atoms.nvidia import MMA_M16N8K16_BF16, wgmma_e4m3
from monokernel.types import bf16, f32, i32, i64, u8, u32, u64

from .index_dsl import BF16_HIGH, BF16_SHIFT, _lane
from .index_plan import PAGE, PAGE_SHIFT, PAGE_WORDS, SCALE_WORD0
from .index_tiling import HEAD_DIM, LANE_BYTES, VECTOR_BYTES, KeyTiling
from .index_plan import PAGE_BYTES, PAGE_ROWS

KEY_WORDS = HEAD_DIM // 4  # 4-byte words of a cached indexer key
WARPGROUP_WARPS = 4  # warps of a wgmma warpgroup (128 threads)
WARPGROUP_SHIFT = WARPGROUP_WARPS.bit_length() - 1
# a warp's share of a page's prefetch (IndexScore.l2_ahead): 2112 bytes, a 16-byte multiple
WARP_PAGE_BYTES = PAGE_BYTES // WARPGROUP_WARPS
# IndexPlan.group_max's swaps: the lanes holding one row's scores of a warp's 16 keys differ
# in these lane bits. The head-sum D (lane = 4 g + t: keys g and g + 8, column 2t + col):
# bits 2, 3, 4; a one-pair chain after its quad butterfly (key g + 8 (t >> 1 & 1), row
# t & 1: `_wg_lane_key`): bits 1 .. 4
HEAD_SUM_GROUP_BITS = (4, 8, 16)
# IndexScore.turn_split: the turns of an all-pairs step (the chain's two parts, the head sum)
SPLIT_STEP_TURNS = 3
BUTTERFLY_GROUP_BITS = (2, 4, 8, 16)


class WgmmaGroup:
    """One group's key loop on sm_90a (module doc). `st`: the IndexScore building it."""

    def __init__(self, st, k, io, gi, g, hist, stage):
        self.st, self.k, self.io, self.gi, self.g, self.hist, self.stage = \
            st, k, io, gi, g, hist, stage
        p, T = st.p, st.t
        self.p, self.T, self.at, self.a = p, T, T.atom, io.args
        self.MP = p.max_pages
        self.btrow = g[6]
        self.key_lo, self.nblocks, self.P = st._key_steps(k, g, self.at.m)
        w = k.wave_id()
        self.wg, self.ww = w >> WARPGROUP_SHIFT, w & (WARPGROUP_WARPS - 1)
        self.nwg = k.W // WARPGROUP_WARPS
        self.lane = _lane(k)
        self.g8, self.t4 = self.lane >> 2, self.lane & 3
        self.kf = st._wg_lane_key(self.ww, self.g8, self.t4)
        self.rf = self.t4 & 1
        self.NH = stage["NH"]
        self.my_n = (self.nblocks - self.wg + self.nwg - 1) / self.nwg
        self.turns = st._taking_turns(k)
        if self.turns:
            self.n_all = (self.nblocks + self.nwg - 1) / self.nwg  # warpgroup 0's steps
            self.own = k.const(st.TURN_BARRIERS[0], i32) + self.wg
            self.other = k.const(st.TURN_BARRIERS[1], i32) - self.wg
        self.narrow_map = [(i, h, rho, jj) for i, (h, rho, jj) in enumerate(st._slot_map)]
        self.mma_sum = st.bf16_head_sum
        # chains of several pairs sum on the tensor cores (`sums`): only builds of 2+ pairs
        self.mma_chains = self.mma_sum and p.pairs > 1
        self.split = self._turn_split()
        # IndexPlan.group_max on the all-pairs chain: the lane's two rows' maxima of the
        # step, carried to the next step's chain (`_wide_gmax_deferred`); None: swapped and
        # stored at once
        self.held_gmax = None
        # ... and on the one-pair chains (`_narrow_gmax_deferred`): the lane's score of the
        # last chain, its row, whether the row is the group's (1 / 0) and the chain's first
        # key, held for the swaps after the next chain's issue; None: swapped at once
        self.held_narrow = None

    def _turn_split(self):
        """IndexScore.turn_split, checked: the all-pairs chain's K chunks in its first turn,
        or None. (Builds without an all-pairs head-sum chain, rows 2, have nothing to split.)"""
        split, st = self.st.turn_split, self.st
        if split is None:
            return None
        chunks = self.T.chunks
        if isinstance(split, bool) or not isinstance(split, int) or not 1 <= split < chunks:
            raise ValueError(f"ix_score: turn_split {split!r}; the K chunks of a chain's first "
                             f"turn, 1 .. {chunks - 1}")
        if not st.turns:
            raise ValueError("ix_score: turn_split takes turns (ix_score.turns=1)")
        if not self.turns:
            raise ValueError(f"ix_score: turn_split takes two warpgroups a CTA taking turns; "
                             f"this build has {self.k.W} waves")
        if st.head_sum_on_sync or not self.mma_sum:
            raise ValueError("ix_score: turn_split takes the head sum on wgmma (head_sum mma, "
                             "sum_mma wgmma): its third turn")
        return split if self.mma_chains else None

    # -- a step's parts --------------------------------------------------------------------
    def warp_key(self, h, base=None):
        """The lane's key h (0 / 1) of a step's 64: its warp's 16 keys, accumulator row g8 or
        g8 + 8 (the keys whose bytes it loads, and the head-sum D's rows); `base` + it, summed
        left to right (the order the kernel's code objects were measured with)."""
        if base is None:
            return self.ww * 16 + self.g8 + 8 * h
        return base + self.ww * 16 + self.g8 + 8 * h

    def step_key(self, t):
        """Step t's first key (this warpgroup's t-th page of the group's range)."""
        return self.key_lo + (self.wg + t * self.nwg) * PAGE

    def locate(self, t):
        """Step t's cache page from the block table (past the end: the last step again)."""
        k = self.k
        if self.turns:  # (a warpgroup with no step of its own reads block 0's page)
            return k.load(self.a.block_table, self.btrow * self.MP + (self.key_lo >> PAGE_SHIFT) +
                          k.min(self.wg + t * self.nwg, self.nblocks - 1), i32)
        b0 = self.key_lo + (self.wg + k.min(t, self.my_n - 1) * self.nwg) * PAGE
        return k.load(self.a.block_table, self.btrow * self.MP + (b0 >> PAGE_SHIFT), i32)

    def pipeline(self, *args, **kw):
        """IndexScore._pipeline with this group's L2 warming (IndexScore.l2_ahead)."""
        return self.st._pipeline(self.k, *args, warm=self.warm if self.st.l2_ahead else None,
                                 **kw)

    def warm(self, pages):
        """Each warp asks the L2 for its quarter of every page (keys and scales: a page is
        PAGE_BYTES contiguous bytes), one bulk prefetch from its first lane."""
        k = self.k
        for page in pages:  # (in i64: a cache of 2**31 bytes has 254K pages)
            k.prefetch_l2(self.a.index_cache, k.cast(page, i64) * PAGE_BYTES +
                          k.cast(self.ww * WARP_PAGE_BYTES, i64), WARP_PAGE_BYTES,
                          mask=self.lane.eq(0))

    def key_loads(self, page, h):
        """(word offset, words) of the lane's loads of its key h in the cache: its 32 lane
        bytes in loads of min(piece, 16) bytes, in lane-byte order (KeyTiling.key_byte with
        the tiling's piece)."""
        piece = self.T.piece
        size = min(piece, VECTOR_BYTES)
        base = page * PAGE_WORDS + self.warp_key(h) * KEY_WORDS + self.t4 * (piece // 4)
        offs = [KeyTiling.key_byte(0, b, piece) // 4 for b in range(0, LANE_BYTES, size)]
        return [(base if o == 0 else base + o, size // 4) for o in offs]

    def key_vectors(self, page, h):
        """The lane's lane bytes [0, 16) and [16, 32) of its key h as two 4-word vectors
        (`key_loads`: two 16-byte loads, or, with 4-byte pieces, eight word loads each the
        wgmma A register it feeds: no register moves between the loads and the chain)."""
        k, a = self.k, self.a
        words = []
        for off, n in self.key_loads(page, h):
            v = k.load(a.index_cache, off, u32, n, nontemporal=True)
            if n == 4:
                words.append(v)
            else:
                words += [v] if n == 1 else [v[i] for i in range(n)]
        if len(words) == 2:
            return words
        return [k.vec(*words[i:i + 4]) for i in range(0, len(words), 4)]

    def load(self, t, page):
        """The lane's 32 key bytes of each of its two keys (nontemporal, straight into
        registers), then the key scale of the key it scores after the quad's butterfly (the
        bf16 head sum: of both its keys, rows g8 and g8 + 8 of its warp's 16)."""
        k, a = self.k, self.a
        out = []
        for h in range(2):
            out += self.key_vectors(page, h)
        if self.mma_chains:
            for h in range(2):
                out.append(k.load(a.index_cache, self.warp_key(h, page * PAGE_WORDS + SCALE_WORD0),
                                  f32, nontemporal=True))
            return out
        out.append(k.load(a.index_cache, page * PAGE_WORDS + SCALE_WORD0 + self.kf, f32,
                          nontemporal=True))
        return out

    # -- the async key ring (IndexScore.async_keys) ------------------------------------------
    KEY_VECTORS = 4  # 16-byte key vectors a lane copies a step: 2 keys x 32 bytes

    def _ring(self):
        """The lane-private LDS ring of (depth + 1) steps: per slot, the lane's 4 key vectors
        then its scales, each slot-major then lane-minor (16-byte vectors of consecutive
        lanes adjacent: no bank conflict in the reads)."""
        if getattr(self, "_ring_lds", None) is None:
            k, st = self.k, self.st
            self.ring_slots = st.narrow_ring_depth + 1
            self.ring_scales = 2 if self.mma_chains else 1
            T = k.W * k.L
            words = self.ring_slots * T * (4 * self.KEY_VECTORS + self.ring_scales)
            self._ring_lds = k.lds("ix_keyring", u32, words)
            self._ring_tid = k.wave_id() * k.L + self.lane
        return self._ring_lds

    def _ring_vec(self, slot, v):
        T = self.k.W * self.k.L
        return ((slot * self.KEY_VECTORS + v) * T + self._ring_tid) * 4

    def _ring_scale(self, slot, j):
        T = self.k.W * self.k.L
        return self.ring_slots * self.KEY_VECTORS * T * 4 + \
            (slot * self.ring_scales + j) * T + self._ring_tid

    def issue_async(self, t, page, slot):
        """`load`'s words of step t (page `page`) copied into ring slot `slot`: one group."""
        k, a = self.k, self.a
        ring = self._ring()
        v = 0
        if self.T.piece < VECTOR_BYTES:
            raise ValueError(f"ix_score: async_keys copies 16-byte vectors; key_piece "
                             f"{self.T.piece} is narrower")
        for h in range(2):
            for off, n in self.key_loads(page, h):
                k.async_copy(ring, self._ring_vec(slot, v), a.index_cache, off, u32, n)
                v += 1
        if self.mma_chains:
            for h in range(2):
                k.async_copy(ring, self._ring_scale(slot, h), a.index_cache,
                             self.warp_key(h, page * PAGE_WORDS + SCALE_WORD0), u32)
        else:
            k.async_copy(ring, self._ring_scale(slot, 0), a.index_cache,
                         page * PAGE_WORDS + SCALE_WORD0 + self.kf, u32)
        k.async_commit()

    def read_async(self, slot):
        """Ring slot `slot` in registers, as `load` returns a step's words."""
        k = self.k
        ring = self._ring()
        out = [k.load(ring, self._ring_vec(slot, v), u32, 4) for v in range(self.KEY_VECTORS)]
        out += [k.load(ring, self._ring_scale(slot, j), f32) for j in range(self.ring_scales)]
        return out

    def operands(self, cur):
        """The wgmma A operands (one a 32-byte MMA chunk) from a step's loaded words."""
        k, T = self.k, self.T
        kw = [k.vec(*[cur[2 * h][i] for i in range(4)], *[cur[2 * h + 1][i] for i in range(4)])
              for h in range(2)]
        return [k.bitcast(k.vec(*[kw[h][wi] for (h, wi) in T.a_words[c]]), self.at.a_dtype,
                          4 * len(T.a_words[c])) for c in range(T.chunks)]

    def turn_begin(self):
        if self.turns:
            self.k.named_barrier(self.own, self.k.W)

    def turn_end(self):
        if self.turns:
            self.k.named_barrier(self.other, self.k.W, arrive=True)

    def issue(self, atom, A, ra, descs="descs", split=None):
        """One wgmma per MMA chunk, B = the staged query columns from row ra on (`descs`:
        the stage's staging in the tiling's K order, or "descs_ss" in key-byte order, for A
        read from keys in shared memory as they lie in the cache), committed as one group
        (`split`: chunks [0, split) and the rest as two groups, each its own turn); the
        result is pending until a wgmma_wait retires the group."""
        k, st = self.k, self.st
        off = st._b_rows_offset(k, ra)
        cuts = [0, self.T.chunks] if split is None else [0, split, self.T.chunks]
        acc = None
        for lo, hi in zip(cuts, cuts[1:]):
            self.turn_begin()
            k.wgmma_fence()
            if acc is None:
                acc = k.vec(*[k.const(0.0, f32)] * atom.c_slots)
            for c in range(lo, hi):
                acc = k.wgmma(atom, A[c], k.const(self.stage[descs][c], u64) + off, acc)
            k.wgmma_commit()
            self.turn_end()
        return acc

    def chain(self, atom, A, ra, descs="descs", under=None, split=None):
        """`issue`, then `under()` (work that needs no result of this chain: the deferred
        group maxima's swaps and stores, hidden while the tensor cores run), then the wait."""
        acc = self.issue(atom, A, ra, descs, split)
        if under is not None:
            under()
        self.k.wgmma_wait(0)
        self.st._cyc.mark("chain")
        return acc

    def finish(self, acc, smap, pp, b0, sc, valid=None):
        """Pair pp's scores from the accumulator slots `smap` lists for it: relu, head
        weights, the quad's butterfly, the key scale, the store."""
        k, st, p, NH = self.k, self.st, self.p, self.NH
        ra = self.gi + 2 * pp
        wv = []
        for rho in range(2):
            b = ((k.min(ra + rho, p.rows - 1)) * 4 + self.t4) * NH
            parts = [k.load(self.stage["wl"], b + c4, f32, min(4, NH - c4))
                     for c4 in range(0, NH, 4)]
            wv.append([x[i] if x.n > 1 else x for x in parts for i in range(x.n)])
        relu = self._bf16_relu(acc, smap) if self.mma_sum else None
        vals = [None] * 4
        for i, h, rho, jj in smap:  # one fma a head (not a rounded product, then a sum)
            q = 2 * h + rho
            r = relu[i] if relu is not None else k.max(acc[i], 0.0)
            vals[q] = r * wv[rho][jj] if vals[q] is None else k.fma(r, wv[rho][jj], vals[q])
        for m in (2, 1):
            half = len(vals) // 2
            bit = (self.lane & m).ne(0)
            keep = [k.select(bit, vals[half + i], vals[i]) for i in range(half)]
            send = [k.select(bit, vals[i], vals[half + i]) for i in range(half)]
            vals = [keep[i] + k.lane_swap(send[i], m) for i in range(half)]
        ok = k.const(True, "i1") if valid is None else valid
        row_rel, kpos = 2 * pp + self.rf, b0 + self.kf
        score = st._scaled(k, vals[0], sc)
        st._store(k, self.io, self.hist, self.g, self.gi, row_rel, kpos, b0, score, ok)
        if p.group_max:  # a lane's one score; the lanes of its row differ in lane bits 1-4
            row, in_group, _ = st._store_mask(self.g, self.gi, row_rel, kpos, ok)
            if self.held_narrow is None:
                rows = [(row, in_group, [score])]
                self._group_max(rows, self._group_partials(rows), b0, BUTTERFLY_GROUP_BITS)
            else:
                flag = k.select(in_group, k.const(1, i32), k.const(0, i32))
                for v, x in zip(self.held_narrow, (score, row, flag, b0)):
                    v.set(x)
        st._cyc.mark("epilogue")

    def _bf16_relu(self, acc, smap):
        """{slot: relu(acc[slot]) rounded to bf16, as f32}: the bf16 head sum's precision on
        the FMA epilogue (one-pair chains: `sums`), a cvt a pair of slots and two unpacks."""
        k = self.k
        slots = sorted(i for i, _, _, _ in smap)
        out = {}
        for i in slots[::2]:
            if i + 1 not in slots:
                raise ValueError(f"ix_score: accumulator slot {i} has no pair slot {i + 1}")
            pk = k.relu_bf16x2(acc[i], acc[i + 1])
            out[i] = k.bitcast(pk << BF16_SHIFT, f32)
            out[i + 1] = k.bitcast(pk & BF16_HIGH, f32)
        return out

    def finish_mma(self, acc, atom, ra, b0, scales):
        """The bf16 head sum (IndexScore.head_sum "mma") of a chain `atom` whose columns are
        rows ra .. ra + atom.n / HP - 1 (`head_sum`), then a lane's stores (`store_sums`)."""
        self.store_sums(self.head_sum(acc, atom, ra), atom, ra, b0, scales)

    def head_sum(self, acc, atom, ra):
        """relu and bf16 pairs in one cvt a pair of accumulators, which are in place the A
        chunks of the head-sum wgmma (m64n8k16); its B, the staged block-diagonal weights
        from K = ra x HP on, sums each row's heads into D's column of that row. Returns D's
        slots (waited for)."""
        k, st, p = self.k, self.st, self.p
        sa = st.SUM_ATOM
        A2 = [k.bitcast(k.vec(*[k.relu_bf16x2(acc[i], acc[j]) for i, j in regs]), bf16,
                        sa.a_slots) for regs in st._acc_to_sum_a(atom)]
        if st.head_sum_on_sync:
            return self._head_sum_sync(A2, ra)
        ck = st.SUM_CORE_K
        lbo_units = sa.b_smem.lbo >> DESC_SHIFT  # descriptor units a core matrix of K (ck)
        d0 = k.const(self.stage["sum_desc"], u64) + k.cast(ra * (p.heads_pad // ck * lbo_units), u64)
        per_run, naccs = self._sum_accumulators(sa.k, len(A2))
        ds = [k.vec(*[k.const(0.0, f32)] * sa.c_slots) for _ in range(naccs)]
        if self.split is not None:  # the step's third turn (IndexScore.turn_split)
            self.turn_begin()
        for c, a2 in enumerate(A2):
            j = (c // per_run) % naccs
            if c < naccs * per_run and c % per_run == 0:
                # an accumulator's zeros are register writes its first wgmma must follow:
                # a fence each (ptxas otherwise injects one, advisory C7519)
                k.wgmma_fence()
            ds[j] = k.wgmma(sa, a2, d0 + c * (sa.k // ck) * lbo_units, ds[j])
        k.wgmma_commit()
        if self.split is not None:
            self.turn_end()
        k.wgmma_wait(0)
        return self._added(ds, sa.c_slots)

    def _sum_accumulators(self, chunk_k, chunks):
        """(K chunks a run, accumulators) of the head sum (IndexScore.sum_accs): a run is
        lcm(HP, chunk_k) / chunk_k chunks, whole rows, and shares an accumulator."""
        per_run = math.lcm(self.p.heads_pad, chunk_k) // chunk_k
        return per_run, min(self.st.head_sum_accs, -(-chunks // per_run))

    @staticmethod
    def _added(ds, slots):
        """The accumulators' slots, added in order (one accumulator: its slots)."""
        d = [ds[0][i] for i in range(slots)]
        for other in ds[1:]:
            d = [d[i] + other[i] for i in range(slots)]
        return d

    def _head_sum_sync(self, A2, ra):
        """The head sum on each warp's mma.sync m16n8k16 (IndexScore.sum_mma "sync"): the
        packed chunks are, per warp, its 16 keys' A fragments (the m64n8k16 A of lane L is
        the m16n8k16 A of lane L % 32, rows 16 (L // 32) on: checked below); B's fragments
        are words of the staged block-diagonal weights (`_stage_sum_weights`' layout); the
        accumulators as `sum_accs` says, a row's chunks in one. D's lane layout is the
        m64n8k16's (`_sum_slots`)."""
        k, st, p = self.k, self.st, self.p
        sa, ma = st.SUM_ATOM, MMA_M16N8K16_BF16
        ar, ac, mr, mc = sa.a_rows(), sa.a_cols(), ma.a_rows(), ma.a_cols()
        warp = ma.group  # lanes of a warp, which holds ma.m keys of the warpgroup's sa.m
        for L in range(ar.shape[0]):
            for s in range(sa.a_slots):
                if (int(ar[L, s]) - ma.m * (L // warp), int(ac[L, s])) != \
                        (int(mr[L % warp, s]), int(mc[L % warp, s])):
                    raise ValueError(f"{sa.name} A slot {s} of lane {L} is not {ma.name}'s")
        br, bc = ma.b_rows(), ma.b_cols()
        for L in range(br.shape[0]):  # B slots (0, 1), (2, 3): K rows 2t, 2t + 1, 2t + 8, 2t + 9
            for s in range(ma.b_slots):
                if (int(br[L, s]), int(bc[L, s])) != (2 * (L & 3) + (s & 1) + 8 * (s >> 1), L >> 2):
                    raise ValueError(f"{ma.name}: B slot {s} of lane {L} is not where "
                                     "_head_sum_sync loads it")
        word = u32.bits // 8
        ck, lbo_words = st.SUM_CORE_K, sa.b_smem.lbo // word
        row_words = ck * sa.b_smem.elem_bytes // word  # a core matrix's row: ck bf16 of K
        lane = self.lane
        if ck != 8:  # K rows 2t + 8, 2t + 9 are then the next core matrix's
            raise ValueError(f"ix_score: sum_mma 'sync' reads core matrices of 8 K rows, "
                             f"not {ck}")
        g, t = lane >> 2, lane & 3
        kbase = ra * p.heads_pad  # K of the chain's first column in the staged B
        ws = self.stage["sum_lds"]
        per_run, naccs = self._sum_accumulators(ma.k, len(A2))
        ds = [k.vec(*[k.const(0.0, f32)] * ma.c_slots) for _ in range(naccs)]
        for c, a2 in enumerate(A2):
            kk = kbase + c * ma.k + 2 * t  # even: the word holds K rows kk, kk + 1
            w0 = (kk / ck) * lbo_words + g * row_words + (kk % ck) / 2
            b = k.bitcast(k.vec(k.load(ws, w0, u32), k.load(ws, w0 + lbo_words, u32)),
                          bf16, ma.b_slots)
            j = (c // per_run) % naccs
            ds[j] = k.mma(ma, a2, b, ds[j])
        return self._added(ds, ma.c_slots)

    def store_sums(self, d, atom, ra, b0, scales, valid=None):
        """A lane's 2 keys x 2 rows of the head-sum D (`head_sum`): scaled, stored, counted."""
        k, st = self.k, self.st
        self.store_scores(lambda i, hk: st._scaled(k, d[i], scales[hk]), atom, ra, b0, valid)

    def scale_sums(self, d, scales):
        """D's slots times their keys' scales: the lane's scores."""
        k, st = self.k, self.st
        return [st._scaled(k, d[i], scales[hk]) for i, (hk, _) in enumerate(st._sum_slots())]

    def store_scores(self, score, atom, ra, b0, valid=None):
        """A lane's 2 keys x 2 rows of scores stored and counted: score(slot, key half) is
        D's slot `slot` scaled (built where the store needs it)."""
        k, st, p = self.k, self.st, self.p
        nrows = atom.n // p.heads_pad
        cols = {}
        for i, (hk, col) in enumerate(st._sum_slots()):
            n, ok = self._sum_row(col, ra, nrows)
            ok = ok if valid is None else ok & valid
            key = self.warp_key(hk, b0)
            sc = score(i, hk)
            st._store(k, self.io, self.hist, self.g, self.gi, n - self.gi, key, b0, sc, ok)
            if p.group_max:
                _, in_group, _ = st._store_mask(self.g, self.gi, n - self.gi, key, ok)
                cols.setdefault(col, (n, in_group, []))[2].append(sc)
        if cols:
            rows = [cols[c] for c in sorted(cols)]
            if self.held_gmax is None:
                self._group_max(rows, self._group_partials(rows), b0, HEAD_SUM_GROUP_BITS)
            else:
                for v, m in zip(self.held_gmax, self._group_partials(rows)):
                    v.set(m)
        st._cyc.mark("epilogue")

    def _sum_row(self, col, ra, nrows):
        """(row, whether the chain has it) of the lane's head-sum D column `col` (0 / 1) in a
        chain of rows ra .. ra + nrows - 1."""
        n = self.t4 * 2 + col
        return n, (n >= ra) & (n < ra + nrows)

    def _group_partials(self, rows):
        """IndexPlan.group_max, a lane's part: for each of `rows` ([(row, row ok?, [score])],
        the lane's own scores of one row or of two: the head-sum D's columns 2t, 2t + 1) the
        maximum of its scores, stored or not. A key past the row's bound (only in the group
        holding the bound) adds its score too: the maximum is then an upper bound, which is
        all a skip needs (a group is scanned, never wrongly passed), and the loop keeps no
        per-score predicate for it (SASS of the fused r8 two-step loop: 8 selects, on the
        epilogue's critical path, and 2 predicate saves to registers; 501 -> 483
        instructions). A NaN is passed over (max.f32 returns the other operand) and a -inf
        taken as it is: a row holding an unselectable score scans every group (the
        selection knows it from the row's refined first digits, whose bin 0 holds exactly
        those)."""
        k = self.k
        maxima = []
        for _, _, scores in rows:
            m = scores[0]
            for sc in scores[1:]:
                m = k.max(m, sc)
            maxima.append(m)
        return maxima

    def _group_max(self, rows, maxima, b0, lane_bits, mask=None):
        """IndexPlan.group_max: `rows`' maxima over this warp's 16 keys of the step at b0 (one
        aligned group) from the lanes' `maxima` (`_group_partials`), by swaps over the
        `lane_bits` in which the lanes holding the rows' other keys differ, stored (where
        `mask`). Two rows are reduce-scattered over the first bit (a lane keeps one row,
        sends the other: one swap where two would carry both), so a lane stores one row's
        word, and the lanes with none of the remaining bits set store."""
        k, p = self.k, self.p
        bits = list(lane_bits)
        (row, row_ok, _), m = rows[0], maxima[0]
        if len(rows) == 2:
            bit = bits.pop(0)
            second = (self.lane & bit).ne(0)
            keep = k.select(second, maxima[1], maxima[0])
            send = k.select(second, maxima[0], maxima[1])
            m = k.max(keep, k.lane_swap(send, bit))
            row = k.select(second, rows[1][0], row)
            row_ok = k.select(second, rows[1][1], row_ok)
        elif len(rows) != 1:
            raise ValueError(f"ix_score: group maxima of {len(rows)} rows a lane (1 or 2)")
        for bit in bits:
            m = k.max(m, k.lane_swap(m, bit))
        store = row_ok & (self.lane & sum(bits)).eq(0)
        # this warp's group: the step's first (b0: whole pages) and the warp's place in it
        self.io.store(GROUP_MAX_REGION, group_max_word(p.capacity, row, b0) + self.ww, m,
                      mask=store if mask is None else store & mask)

    def _wide_gmax_deferred(self):
        """The all-pairs chain with IndexPlan.group_max's swaps and stores a step behind:
        step t's chain is issued, then step t - 1's maxima (carried, the lane's two rows')
        are swapped and stored while it runs on the tensor cores, then step t's wait and
        epilogue. Measured on an H100 (bench/NOTES.md v40), the swaps in the epilogue made
        each step ~256 clocks longer (a dependent chain of three swaps after the head sum's
        wait, two warps a scheduler): under the chain that latency is hidden. The carried
        maxima come from selects (not registers a wgmma wrote, which would draw ptxas's
        injected wait, C7517); the last step's follow the loop."""
        held, stores = self._held_group_maxima()
        self.pipeline(self.my_n, self.locate, self.load, self._wide_step(held, stores))
        stores(self.my_n - 1)

    def _wide_step(self, held=None, stores=None, split=None):
        """compute(t, cur) of an all-pairs step whose group maxima (`_held_group_maxima`'s
        held, stores; None: none carried) go a step behind: step t's chain issued (`split`:
        in two turns), step t - 1's maxima stored under it, then its wait and head sums."""
        def compute(t, cur):
            under = None if stores is None else (lambda: stores(t - 1, t > 0))
            acc = self.chain(self.wide, self.operands(cur), self.gi, under=under, split=split)
            self.held_gmax = held
            self.sums(acc, self.wide, self.wide_maps, 0, self.step_key(t), cur)
            self.held_gmax = None
        return compute

    def _held_group_maxima(self):
        """(held, stores) of the all-pairs chain's maxima a step behind: the lane's two rows'
        maxima carried (lane variables `store_scores` sets through held_gmax), and
        stores(t, mask) swapping and storing them as step t's."""
        st, k = self.st, self.k
        cols = sorted({col for _, col in st._sum_slots()})
        nrows = self.wide.n // self.p.heads_pad
        held = [k.lane_var(k.const(-math.inf, f32)) for _ in cols]
        any_key = k.const(0, i32)  # (`_store_mask`: the row condition takes no key)

        def stores(t, mask=None):
            rows = []
            for col in cols:  # store_scores' rows of the all-pairs chain
                n, ok = self._sum_row(col, self.gi, nrows)
                _, in_group, _ = st._store_mask(self.g, self.gi, n - self.gi, any_key, ok)
                rows.append((n, in_group, None))
            self._group_max(rows, [v.get() for v in held], self.step_key(t),
                            HEAD_SUM_GROUP_BITS, mask)
        return held, stores

    def _narrow_gmax_deferred(self):
        """The one-pair chains (IndexPlan.group_max) with their maxima's swaps and store a
        chain behind, as `_wide_gmax_deferred` does on the all-pairs chain: a chain is
        issued, then the last chain's lane score (held with its row, whether the row is the
        group's, and its step's first key) is swapped over lane bits 1-4 and stored while
        the tensor cores run, then the wait and the epilogue, which holds its own score for
        the next. The first chain's flush stores nothing (no row held); the last chain's
        follows the loop. At once, the four dependent swaps sit after the butterfly's, on
        the epilogue's critical path (bench/NOTES.md v42: W2's one-pair groups, the score
        tail +2.5 us with the skip against W1's +1.5)."""
        st, k = self.st, self.k
        self.held_narrow = (k.lane_var(k.const(-math.inf, f32)), k.lane_var(k.const(0, i32)),
                            k.lane_var(k.const(0, i32)), k.lane_var(k.const(0, i32)))
        self.pipeline(self.my_n, self.locate, self.load, self.compute,
                      depth=st.narrow_ring_depth, prefetch=st.narrow_prefetch, narrow=True)
        self._narrow_gmax_flush()
        self.held_narrow = None

    def _narrow_gmax_flush(self):
        """`_narrow_gmax_deferred`'s swaps and store of the held chain's maximum."""
        score, row, row_ok, b0 = [v.get() for v in self.held_narrow]
        rows = [(row, row_ok.ne(0), [score])]
        self._group_max(rows, self._group_partials(rows), b0, BUTTERFLY_GROUP_BITS)

    def sums(self, acc, atom, maps, pp0, b0, cur, valid=None):
        """A chain's scores: pairs pp0, pp0 + 1, ... (its `maps`), FMAs (`finish`) or, for
        the bf16 head sum, the tensor cores (`finish_mma`) on chains of several pairs; a
        one-pair chain keeps the FMAs on the same bf16 values (measured on the H200, the
        head-sum wgmma of one pair costs more than its ~100-instruction epilogue: W2's
        one-pair groups took 112 us against 101 at 512K x 8, bench/NOTES.md v11)."""
        if self.mma_chains and len(maps) > 1:
            if valid is not None:
                raise ValueError("ix_score: a masked step is a one-pair chain's (pages_per_step)")
            self.finish_mma(acc, atom, self.gi + 2 * pp0, b0, cur[4:6])
            return
        # the key the lane scores after the butterfly (kf): its scale is the first or second
        # loaded one where both keys' scales are loaded (`load`)
        sc = self.k.select(((self.t4 >> 1) & 1).ne(0), cur[5], cur[4]) if self.mma_chains \
            else cur[4]
        for q, smap in enumerate(maps):
            self.finish(acc, smap, pp0 + q, b0, sc, valid)

    # -- steps of each path ----------------------------------------------------------------
    def compute(self, t, cur):
        """A pair at a time: N = 2 rows x heads."""
        b0 = self.step_key(t)
        A = self.operands(cur)
        # (with the maxima a chain behind: the last chain's swapped and stored under this one)
        under = None if self.held_narrow is None else self._narrow_gmax_flush
        for pp in self.k.range(self.P):
            acc = self.chain(self.at, A, self.gi + 2 * pp, under=under)
            self.sums(acc, self.at, [self.narrow_map], pp, b0, cur)

    def compute_two(self, t, cur):
        """Two pages a step, a pair at a time (IndexScore.pages_per_step = 2): both pages'
        chains issued, one wait, both epilogues; the second page's scores masked where the
        warpgroup has an odd page count (its load repeated the last page)."""
        k = self.k
        n = len(cur) // 2
        pages = [(2 * t, cur[:n]), (2 * t + 1, cur[n:])]
        A = [self.operands(c) for _, c in pages]
        second = (2 * t + 1) < self.my_n
        for pp in k.range(self.P):
            ra = self.gi + 2 * pp
            accs = [self.issue(self.at, a, ra) for a in A]
            k.wgmma_wait(0)
            self.st._cyc.mark("chain")
            for (tp, c), acc, valid in zip(pages, accs, (None, second)):
                self.sums(acc, self.at, [self.narrow_map], pp, self.step_key(tp), c, valid)

    def narrow_pipeline(self):
        """Groups of fewer pairs than the plan (and every group of a rows-2 build): a chain a
        pair, one page a step or two (IndexScore.pages_per_step)."""
        st, k = self.st, self.k
        if st.tma_keys:
            if st.narrow_pages != 1 or st.async_keys:
                raise ValueError("ix_score: tma_keys takes the one-page steps (pages_per_step "
                                 "1, not with async_keys)")
            return self.narrow_tma()
        if st.narrow_pages == 1 and st.async_keys:
            return st._pipeline_async(k, self.my_n, self.locate, self.issue_async,
                                      self.read_async, self.compute, depth=st.narrow_ring_depth,
                                      prefetch=st.narrow_prefetch)
        if st.narrow_pages == 1 and self.p.group_max and st.defer_narrow_gmax:
            return self._narrow_gmax_deferred()
        if st.narrow_pages == 1:
            return self.pipeline(self.my_n, self.locate, self.load, self.compute,
                                 depth=st.narrow_ring_depth, prefetch=st.narrow_prefetch,
                                 narrow=True)
        if st.async_keys:
            raise ValueError("ix_score: async_keys takes the one-page steps of groups of "
                             "fewer pairs; this build takes two pages a step (pages_per_step 2)")
        if st.narrow_pages != 2 or st.prefetch_pages:
            raise ValueError(f"ix_score: pages_per_step {st.pages_per_step!r}; 1 or 2 (2: not "
                             "with prefetch_pages)")
        if st.narrow_depth is not None or st.narrow_prefetch is not type(st).narrow_prefetch:
            raise ValueError("ix_score: narrow_depth / narrow_prefetch set the one-page steps "
                             "of groups of fewer pairs; this build takes two pages a step "
                             "(pages_per_step 2)")
        self.pipeline((self.my_n + 1) >> 1,
                      lambda t: [self.locate(2 * t), self.locate(2 * t + 1)],
                      lambda t, pg: self.load(2 * t, pg[0]) + self.load(2 * t + 1, pg[1]),
                      self.compute_two)

    # -- keys through TMA into LDS slots (IndexScore.tma_keys) -------------------------------
    SLOT_BYTES = -(-PAGE_BYTES // SW128_ATOM_BYTES) * SW128_ATOM_BYTES  # a page, 1024-aligned

    def _tma_ring(self):
        """Every warpgroup's tma_slots page slots (1024-byte aligned: the 128B swizzle) and
        their mbarriers, allocated once a kernel."""
        k, st = self.k, self.st
        if not isinstance(st.tma_slots, int) or isinstance(st.tma_slots, bool) or \
                not 2 <= st.tma_slots <= 8:
            raise ValueError(f"ix_score: tma_slots {st.tma_slots!r}; 2 .. 8 pages in flight")
        if getattr(st, "_tma_lds", None) is None or st._tma_lds[0] is not k:
            n = self.nwg * st.tma_slots
            st._tma_lds = (k, k.lds("ix_tma_slots", u8, n * self.SLOT_BYTES,
                                    align=SW128_ATOM_BYTES),
                           k.mbarrier("ix_tma_bars", n))
        return st._tma_lds[1], st._tma_lds[2]

    def narrow_tma(self):
        """The one-pair chains with their pages in LDS: the warpgroup's warp 0 (lane 0)
        issues step t's page (keys and scales: one TMA box of PAGE_ROWS rows) into slot t mod
        S, completing on the slot's mbarrier; every warp waits for the slot's phase (use n of
        a slot: parity n & 1), the chain reads A from the slot through the swizzled
        descriptor (chunk c at + 32 c bytes), the scale from the slot's scale rows; once the
        warpgroup's four warps are past the chain (a named barrier), step t + S's page goes
        into the slot. The mbarriers are set up and invalidated a job (a persistent CTA
        runs many), every copy issued is waited for."""
        st, k = self.st, self.k
        ring, bars = self._tma_ring()
        S = st.tma_slots
        c = lambda v: k.const(v, i32)  # noqa: E731
        first = self.wg * S  # this warpgroup's first slot
        bar = [k.ptr_add(bars, (first + d) * MBARRIER_BYTES) for d in range(S)]
        slot = [k.ptr_add(ring, (first + d) * self.SLOT_BYTES) for d in range(S)]
        issuer = self.ww.eq(0)
        wg_bar = c(st.TMA_BARRIERS[0]) + self.wg
        atom = wgmma_e4m3(self.at.n, a_smem=True, a_sw128=True)
        ring0 = k.lds_offset("ix_tma_slots")
        a_desc0 = k.opaque(atom.a_smem_descriptor(ring0), u64)
        my_n = self.my_n

        # the issuer's block-table entries a ring ahead: entry d holds the page slot d takes
        # next (step t + S when slot d is refilled with step t), loaded at the refill before,
        # so the refill (and the warpgroup's barrier behind it) never waits for a table load
        entries = [k.uniform_var(c(0), i32) for _ in range(S)]

        def issue(t, d, first_round=False):
            with k.if_(issuer & (t < my_n)):
                page = self.locate(t) if first_round else entries[d].get()
                entries[d].set(self.locate(t + S))
                k.mbar_arrive_tx(bar[d], PAGE_BYTES)
                k.tma_load_rows(slot[d], st.TMA_MAP, page * PAGE_ROWS, bar[d])

        def scale(d, key):
            """The scale of page key `key` (per lane) in slot d: byte SCALE_WORD0 * 4 + 4 key
            of the page's rows, at its swizzled place."""
            at_byte = (first + d) * self.SLOT_BYTES + SCALE_WORD0 * u32.bytes + \
                key * f32.bytes + ring0
            word = (swizzled(at_byte) - ring0) >> int(math.log2(u32.bytes))
            return k.bitcast(k.load(ring, word, u32), f32)

        def scales(d):
            if self.mma_chains:
                return [scale(d, self.warp_key(h)) for h in range(2)]
            return [scale(d, self.kf)]

        def descriptors(d):
            off = k.cast((first + d) * desc_units(self.SLOT_BYTES), u64)
            return [a_desc0 + off + desc_units(ch * atom.K) for ch in range(self.T.chunks)]

        with k.if_(issuer):
            for d in range(S):
                k.mbar_init(bar[d], 1)
        k.named_barrier(wg_bar, 4)
        for d in range(S):
            issue(c(d), d, first_round=True)
        if st.tma_overlap:
            self._tma_overlapped(S, bar, wg_bar, issue, scales, descriptors, atom)
        else:
            self._tma_in_turn(S, bar, wg_bar, issue, scales, descriptors, atom)
        k.named_barrier(wg_bar, 4)
        with k.if_(issuer):
            for d in range(S):
                k.mbar_inval(bar[d])

    def _tma_overlapped(self, S, bar, wg_bar, issue, scales, descriptors, atom):
        """Step s's chain issued from its slot, then step s - 1's epilogue while it runs (as
        `_pipeline_alternate`, with the keys in LDS: no key registers, so the two steps'
        accumulators fit beside each other): at step s, wait(0) retires chain s - 1 (no
        group in flight as its accumulators are read), the warpgroup's barrier frees slot
        s - 1, which takes step s - 1 + S's page; one chain in flight through the epilogue.
        Only one-pair groups (P = 1); wider groups take `_tma_in_turn`."""
        k, st = self.k, self.st
        my_n = self.my_n
        acc = k.lane_var(k.vec(*[k.const(0.0, f32)] * atom.c_slots))
        nsc = 2 if self.mma_chains else 1
        held = [k.lane_var(k.const(0.0, f32)) for _ in range(nsc)]
        with k.if_else(self.P.eq(1)) as (one, more):
            with one:
                for t0 in k.range(0, my_n + 1, S):
                    for d in range(S):
                        s = t0 + d
                        pd = (d - 1) % S
                        k.wgmma_wait(0)  # step s - 1's chain, the one reading slot pd
                        prev = acc.get()
                        prev_sc = [v.get() for v in held]
                        k.named_barrier(wg_bar, 4)  # every warp's chain s - 1 retired
                        with k.if_(s >= 1):
                            issue(s - 1 + S, pd)
                        with k.if_(s < my_n):
                            k.mbar_wait(bar[d], (t0 / S) & 1)
                            for v, x in zip(held, scales(d)):
                                v.set(x)
                            acc.set(self.issue(atom, descriptors(d), self.gi, "descs_ss"))
                        with k.if_((s >= 1) & (s <= my_n)):
                            cur = [None] * 4 + prev_sc
                            self.sums(prev, self.at, [self.narrow_map], 0, self.step_key(s - 1),
                                      cur)
                            st._cyc.count("steps")
                k.wgmma_wait(0)
            with more:
                self._tma_in_turn(S, bar, wg_bar, issue, scales, descriptors, atom)

    def _tma_in_turn(self, S, bar, wg_bar, issue, scales, descriptors, atom):
        """Each step's chains, waited for, then their epilogues, pair after pair."""
        k, st = self.k, self.st
        my_n = self.my_n
        for t0 in k.range(0, my_n, S):
            for d in range(S):
                t = t0 + d
                with k.if_(t < my_n):
                    k.mbar_wait(bar[d], (t0 / S) & 1)
                    A = descriptors(d)
                    cur = [None] * 4 + scales(d)
                    b0 = self.step_key(t)
                    for pp in k.range(self.P):
                        acc = self.chain(atom, A, self.gi + 2 * pp, "descs_ss")
                        self.sums(acc, self.at, [self.narrow_map], pp, b0, cur)
                    st._cyc.count("steps")
                    k.named_barrier(wg_bar, 4)  # the warpgroup's chains on slot d retired
                    issue(t + S, d)

    def compute_wide(self, t, cur):
        """Every pair of the group in ONE chain (N = 2 x pairs x heads): a wgmma's A
        operand comes from registers once per instruction, so the narrow N = 64 chains ran
        at about a quarter of the tensor rate (H200: 4 pairs took 4x one pair's time,
        ~18 us per pair at 512K keys, with or without batching the four chains)."""
        b0 = self.step_key(t)
        acc = self.chain(self.wide, self.operands(cur), self.gi)
        self.sums(acc, self.wide, self.wide_maps, 0, b0, cur)

    def _wide_deferred(self):
        """The all-pairs chain with its stores a step behind (IndexScore.defer_stores): step
        t's chain is issued, then step t - 1's head sums (carried, 4 registers a lane) are
        scaled, stored and counted while it runs on the tensor cores, then step t's wait and
        head sum; the last step's stores follow the loop."""
        st, k, sa = self.st, self.k, self.st.SUM_ATOM
        zero = k.const(0.0, f32)
        # the scaled scores are carried, not D's slots: a register an FMA wrote, where ptxas
        # waits for every wgmma before a read of one a wgmma wrote (advisory C7517)
        held = [k.lane_var(zero) for _ in range(sa.c_slots)]

        def stores(t, valid=None):
            self.store_scores(lambda i, _: held[i].get(), self.wide, self.gi,
                              self.step_key(t), valid)

        def compute(t, cur):
            acc = self.issue(self.wide, self.operands(cur), self.gi)
            stores(t - 1, t > 0)
            k.wgmma_wait(0)
            st._cyc.mark("chain")
            scores = self.scale_sums(self.head_sum(acc, self.wide, self.gi), cur[4:6])
            for x, v in zip(held, scores):
                x.set(v)

        self.pipeline(self.my_n, self.locate, self.load, compute)
        stores(self.my_n - 1)

    def issue_one(self, cur):
        """One pair's chain on keys `cur`, not waited for (`_pipeline_alternate`)."""
        return self.issue(self.at, self.operands(cur), self.gi)

    def finish_one(self, t, acc, scales):
        self.finish(acc, self.narrow_map, 0, self.step_key(t), scales[0])

    def issue_half(self, h, cur):
        """Pairs [h * hp, h * hp + hp) of step `cur`'s keys: one chain, not waited for."""
        return self.issue(self.half, self.operands(cur), self.gi + 2 * self.hp * h)

    def finish_half(self, h, t, acc, sc):
        b0 = self.step_key(t)
        for q in range(self.hp):
            self.finish(acc, self.half_maps[q], self.hp * h + q, b0, sc)

    # -- the path ----------------------------------------------------------------------------
    def run(self):
        st, k, p = self.st, self.k, self.p
        self.wide = st._wide_atom()
        self.wide_maps = st._wide_slot_maps(self.wide) if self.wide is not None else None
        self.half = st._half_atom()
        if self.half is not None:
            self.hp = p.pairs // 2
            self.half_maps = st._wide_slot_maps(self.half)
        if self.mma_sum and (st._ss_on() or self.half is not None or st.alternate_one_pair):
            raise ValueError("ix_score: head_sum 'mma' takes the plain, split or turns "
                             "pipelines (not ss_keys, pipeline_min_pairs, alternate_one_pair)")
        if st.split_pairs and self.wide is not None and self.nwg == 4 and p.pairs % 2 == 0:
            return self._run_split()
        if self.turns:
            return self._run_turns()
        if st._ss_on():
            return self._run_ss()
        my_n, P = self.my_n, self.P
        with k.if_(my_n > 0):
            if self.wide is None:
                self._one_pair_builds()
            else:
                with k.if_else(P.eq(p.pairs)) as (all_pairs, fewer):
                    with all_pairs:
                        if self.half is None and st.defer_stores and self.mma_chains:
                            self._wide_deferred()
                        elif self.half is None and p.group_max and self.mma_chains:
                            self._wide_gmax_deferred()
                        elif self.half is None:
                            self.pipeline(my_n, self.locate, self.load, self.compute_wide)
                        else:
                            st._pipeline_halves(k, my_n, self.locate, self.load,
                                                self.issue_half, self.finish_half,
                                                self.half.c_slots)
                    with fewer:
                        self.narrow_pipeline()

    def _one_pair_builds(self):
        """Builds of one row pair (rows 2): every group has one pair. (Builds of more
        pairs keep chain, wait, epilogue for their smaller groups: the alternating
        ring there made the fused `index` kernel spill at rows 4 and 8.)"""
        st, k = self.st, self.k
        if st.alternate_one_pair:
            st._pipeline_alternate(k, self.my_n, self.locate, self.load, self.issue_one,
                                   self.finish_one, self.at.c_slots)
        else:
            self.narrow_pipeline()

    def _run_split(self):
        """Four warpgroups: two page streams, each page's pairs split over a warpgroup pair
        (N = pairs x heads each: half the accumulators, twice the key reads); groups of
        fewer pairs: a page a warpgroup, a chain a pair."""
        st, k, p = self.st, self.k, self.p
        streams, stream, hf = self.nwg // 2, self.wg >> 1, self.wg & 1
        hp = p.pairs // 2
        split_atom = wgmma_e4m3(hp * 2 * p.heads_pad)
        split_maps = st._wide_slot_maps(split_atom)
        my_s = (self.nblocks - stream + streams - 1) / streams

        def locate_s(t):
            b0 = self.key_lo + (stream + k.min(t, my_s - 1) * streams) * PAGE
            return k.load(self.a.block_table, self.btrow * self.MP + (b0 >> PAGE_SHIFT), i32)

        def compute_split(t, cur):
            b0 = self.key_lo + (stream + t * streams) * PAGE
            acc = self.chain(split_atom, self.operands(cur), self.gi + 2 * hp * hf)
            self.sums(acc, split_atom, split_maps, hp * hf, b0, cur)

        with k.if_else(self.P.eq(p.pairs)) as (all_pairs, fewer):
            with all_pairs:
                with k.if_(my_s > 0):
                    self.pipeline(my_s, locate_s, self.load, compute_split)
            with fewer:
                with k.if_(self.my_n > 0):
                    self.narrow_pipeline()

    def _run_turns(self):
        """The pipeline with the warpgroups' turns: every step's chains are turns, an idle
        step (past a warpgroup's own steps) still takes them, so both take the same turns
        in every group (IndexScore._turns_open / _turns_close hand the job's first and
        last turn)."""
        st, k, p = self.st, self.k, self.p
        if st._ss_on() or self.half is not None or st.alternate_one_pair or \
                st.pages_per_step not in (None, 1):
            raise ValueError("ix_score: turns take the plain pipeline (not with ss_keys, "
                             "pipeline_min_pairs, alternate_one_pair or pages_per_step)")

        def taking_turns(comp, chains):
            def idle():
                for _ in k.range(chains):
                    self.idle_turn()
            self.pipeline(self.my_n, self.locate, self.load, comp, self.n_all, idle)

        with k.if_(self.n_all > 0):
            if self.wide is None:
                taking_turns(self.compute, self.P)
            else:
                with k.if_else(self.P.eq(p.pairs)) as (all_pairs, fewer):
                    with all_pairs:
                        if self.split is None:
                            taking_turns(self.compute_wide, 1)
                        else:
                            self._wide_split_turns(taking_turns)
                    with fewer:
                        taking_turns(self.compute, self.P)

    def idle_turn(self):
        """A turn taken with nothing issued (both warpgroups take the same turns)."""
        self.turn_begin()
        self.turn_end()

    def _wide_split_turns(self, taking_turns):
        """The all-pairs loop in three turns a step (IndexScore.turn_split): the chain's two
        parts, then the head sum. Warpgroup 1 takes one idle turn first and 0 one last, so
        the turns run 0: part 1 (t), 1: head sum (t - 1), 0: part 2 (t), 1: part 1 (t), 0:
        head sum (t), 1: part 2 (t), ...: each warpgroup's head sum reaches the tensor cores
        between the other's two parts, while the other's first part covers its relu-bf16
        packing. With IndexPlan.group_max the maxima's swaps and stores go a step behind,
        under the chain's second part (`_wide_gmax_deferred`'s reason)."""
        k = self.k
        with k.if_(self.wg.eq(1)):
            self.idle_turn()
        held, stores = self._held_group_maxima() if self.p.group_max else (None, None)
        taking_turns(self._wide_step(held, stores, self.split), SPLIT_STEP_TURNS)
        with k.if_(self.wg.eq(0)):
            self.idle_turn()
        if stores is not None:
            with k.if_(self.my_n > 0):
                stores(self.my_n - 1)

    def _run_ss(self):
        """SS paths: all the plan's pairs split over the warpgroups (where they split),
        one-pair groups a page a warpgroup; other groups keep the register path."""
        st, k, p, P = self.st, self.k, self.p, self.P
        split = p.pairs > 1 and p.pairs % self.nwg == 0
        ss_paths = ([(p.pairs, True)] if split else []) + [(1, False)]
        for n_pairs, split_pairs in ss_paths:
            with k.if_(P.eq(n_pairs)):
                st._group_ss(k, self.io, self.gi, self.g, self.hist, self.stage, self.key_lo,
                             self.nblocks, self.finish, split_pairs)
        others = P.ne(1) & (P.ne(p.pairs) if split else k.const(True, "i1"))
        with k.if_(others & (self.my_n > 0)):
            self.pipeline(self.my_n, self.locate, self.load, self.compute)
