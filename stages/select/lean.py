"""SelectPass's lean listing loop (SelectConfig.lean_scan): a lane's consecutive keys
    an iteration, one float compare a key, ballot-counted offsets, store rounds over the kept
    keys only."""
from __future__ import annotations

import functools

from layouts.scores import FIRST_DIGIT_BINS, GROUP_KEYS, GROUP_SHIFT
from monokernel.ir import L2_LINE_BYTES
from monokernel.types import f32, i32, i64, u32

from .config import (EARLY_MAXIMA_ITERATIONS, GROUPS_A_LANE, LEAN_GROUPS, LEAN_REFILL_TURNS,
                     LEAN_SENTINEL, LIST_UNROLL, LOAD_KEYS, SCAN_UNROLL, X_D, X_Q)
from .lanes import (F32_NEG_INF_BITS, _State, _flipped, _i, _lane_any, _lane_masks,
                    _lane_prefix, _pick16, _prefix, _region_loader, _u, keys_and_specials,
                    score_floor)


class LeanScan:
    """SelectPass's lean listing loop (SelectConfig.lean_scan): a lane's consecutive keys
    an iteration, one float compare a key, ballot-counted offsets, store rounds over the kept
    keys only."""

    # -- the lean scan (SelectConfig.lean_scan) ---------------------------------------------
    def _lean_groups(self, k):
        """[(first, end)) iterations of each commit group of the lean copies."""
        n = self._lean_iterations(k)
        g = min(LEAN_GROUPS, n)
        return [(i * n // g, (i + 1) * n // g) for i in range(g)]

    def _lean_piece(self, k, it, j):
        """LDS word of iteration `it`'s 16-byte piece j (keys 4j .. 4j + 3 of the lane's 16)
        of this thread: the pieces j of a wave's lanes side by side, so a wave's LDS read of
        one piece is 512 contiguous bytes (no bank conflict)."""
        T = k.W * k.L
        return ((it * self._lean_pieces + j) * T + k.thread_id()) * LOAD_KEYS

    def _lean_first_position(self, k, sl, it):
        """The first of this thread's consecutive positions in lean iteration `it` (with
        lean_spans: of its wave's span)."""
        n = self._lane_keys
        if self._spans:
            return (sl.lo + k.wave_id() * self._lean_span(k, sl) + it * (n * k.L)
                    + n * k.lane_id())
        return sl.lo + it * (n * k.W * k.L) + n * k.thread_id()

    @property
    def _spans(self) -> bool:
        """lean_spans, checked: each wave lists its own contiguous span of the slice."""
        on = bool(self.lean_spans)
        if on and (self._lean_copies or self._count_tunable("lean_coalesced", 0)):
            raise ValueError(f"{self.name}: lean_spans = {int(on)} takes neither "
                             "lean_copies nor lean_coalesced (both lay an iteration out "
                             "across the CTA's waves)")
        return on

    def span_lists(self) -> tuple:
        """lean_spans' scratch lists (keys, positions) of this pass's list_out: a wave's
        entries at its span's offset in the slice (an entry's index there is at most its
        key's offset, so the lists' room holds them)."""
        return tuple(f"{name}_span" for name in self.list_out)

    def _lean_span(self, k, sl):
        """lean_spans: keys of a wave's span, the CTA's lean iterations of one wave's
        lane_keys * L keys each (whole iterations: a 16-byte load never straddles two waves'
        spans; the default loop's iteration count and key share a wave)."""
        return self._lean_count(k, sl) * (self._lane_keys * k.L)

    def _lean_wave_span(self, k, sl):
        """lean_spans: (lo, hi, iterations) of this wave's span (empty past the slice)."""
        lo = sl.lo + k.wave_id() * self._lean_span(k, sl)
        hi = k.min(sl.hi, lo + self._lean_span(k, sl))
        it_keys = self._lane_keys * k.L
        return lo, hi, (k.max(hi - lo, 0) + (it_keys - 1)) / it_keys

    def _lean_count(self, k, sl):
        """Lean iterations over this slice (runtime)."""
        it_keys = self._lane_keys * k.W * k.L
        return (sl.hi - sl.lo + (it_keys - 1)) / it_keys

    def _lean_copy(self, k, io, sl, lds):
        """Every lane starts the async copies of its keys of the slice (16 consecutive keys
        an iteration, positions lo + it * 16T + 16 * thread), LEAN_GROUPS commit groups, all
        before the wait for message 0: the slice streams into LDS under the exchange.
        Iterations past the slice's end copy nothing (a group may be empty); a piece past
        the row's end is read at the row's last 4 keys (never counted)."""
        c = self.cfg
        n_it = self._lean_count(k, sl)
        src = getattr(io.args, self.scores.name)
        last = c.capacity - LOAD_KEYS
        for lo, hi in self._lean_groups(k):
            for it in k.range(lo, k.min(n_it, hi)):
                p0 = self._lean_first_position(k, sl, it)
                for j in range(self._lean_pieces):
                    k.async_copy(lds["lean"], self._lean_piece(k, it, j), src,
                                 sl.r * c.capacity + k.min(p0 + LOAD_KEYS * j, last), u32,
                                 LOAD_KEYS)
            k.async_commit()

    def _lean_scan(self, k, io, sl, lds, key_lo, run, nan_acc):
        """sel_h1's listing pass with the lean loop (SelectConfig.lean_scan): the list of
        `_append` (every selectable key >= key_lo, in position order) with far fewer
        instructions a key and shorter dependency chains. A lane's 16 consecutive keys an
        iteration, waves then lanes in position order, from registers loaded an iteration
        ahead (or, with lean_copies, from the lane's own async copies in LDS); keep =
        score >= t_lo, the least score whose key is >= key_lo (one float compare: the keys'
        order is the scores' order, NaN never compares true, -0.0 >= +0.0 as their one key
        says; sm_90a compares keep subnormals); the keeps as a 16-bit mask; the lanes'
        exclusive prefix of the masks' counts from one ballot a count bit (independent
        steps, not a chain of lane swaps); the waves' counts through LDS (one CTA barrier an
        iteration, buffers by parity); then rounds over the kept keys only, each lane
        storing its lowest remaining one (its raw score read back from the lane's own LDS
        words). nan_acc (None: no counts) gets the NaN / unselectable counts, taken only in
        a wave-uniform branch where a lane of the wave holds -inf or NaN.

        With lean_spans each wave lists its own span of the slice into the scratch lists
        with no CTA barrier in the loop (the waves drift apart freely), and after it
        `_gather_spans` lays the waves' lists end to end and counts the next digit. Returns
        whether the next digit was counted (lean_spans)."""
        c = self.cfg
        W = k.W
        w = k.wave_id()
        spans = self._spans
        n_it = self._lean_count(k, sl)
        bound = sl.hi
        lk = c.max_slice_keys()
        t_lo = score_floor(k, key_lo)
        neg_inf = k.bitcast(k.const(F32_NEG_INF_BITS, u32), f32)
        offs = k.load(lds["list_at"], 0, i64, 2)
        if spans:  # the scratch lists sit where the lists do in their own regions
            span_lo, bound, n_it = self._lean_wave_span(k, sl)
            start = span_lo - sl.lo
            run.set(start)
            shift = [io.arena[x].data_offset - io.arena[y].data_offset
                     for x, y in zip(self.span_lists(), self.list_out)]
            offs = offs + k.vec(*[k.const(x, i64) for x in shift])
        keys_at, pos_at = [k.ptr_add(io.env.arena, k.extract(offs, e)) for e in range(2)]
        em = lds.get("emit")
        n_lane = self._lane_keys
        count_bits = n_lane.bit_length()  # a lane's count is 0 .. n_lane

        def iteration(it, raws, pick, refill=None, refill_late=False, p0=None):
            if p0 is None:  # (group_skip gives a group's first key, `it` unused)
                p0 = self._lean_first_position(k, sl, it)
            nv = k.max(k.min(bound - p0, n_lane), 0)
            if n_lane < 32:  # nv <= 16: no shift past 31
                valid = _u(k, (k.const(1, i32) << nv) - 1)
            else:
                valid = _u(k, k.select(nv >= 32, k.const(-1, i32),
                                       (k.const(1, i32) << k.min(nv, 31)) - 1))
            def keep(f):
                return f >= t_lo

            def unselectable(f):  # -inf and NaN
                return ~(f > neg_inf)
            any_special = nan_acc is not None and self.lean_any_special
            if nan_acc is None or any_special:
                mask, = _lane_masks(k, raws, [keep])
            else:
                mask, special = _lane_masks(k, raws, [keep, unselectable])
            mask = mask & valid
            if any_special:  # one flag a lane (no mask), the masks in the rare branch only
                with k.if_(k.ballot(_lane_any(k, raws, unselectable)).ne(0)):
                    special, nan = _lane_masks(k, raws, [unselectable,
                                                         lambda f: f.ne(f)])  # NaN only
                    counts = k.popc(nan & valid) | (k.popc(special & valid) << 16)
                    nan_acc.set(nan_acc.get() + _i(k, counts))
            elif nan_acc is not None:  # the counts from masks too, where a wave holds one
                special = special & valid
                with k.if_(k.ballot(special.ne(0)).ne(0)):
                    nan, = _lane_masks(k, raws, [lambda f: f.ne(f)])  # unordered: NaN only
                    counts = k.popc(nan & valid) | (k.popc(special) << 16)
                    nan_acc.set(nan_acc.get() + _i(k, counts))
            excl, tot = _lane_prefix(k, _i(k, k.popc(mask)), count_bits)
            if refill is not None and not refill_late:  # the raws are dead from here on
                refill()
            if W > 1 and not spans:
                par = it & 1
                k.store(em, par * W + w, tot)
                k.barrier()
                woff, rtot = k.const(0, i32), k.const(0, i32)
                for w2 in range(W):
                    x = k.load(em, par * W + w2, i32)
                    woff = woff + k.select(w > w2, x, 0)
                    rtot = rtot + x
            else:
                woff, rtot = k.const(0, i32), tot
            at = k.lane_var(run.get() + woff + excl)
            rest = k.lane_var(mask)
            with k.while_(lambda: k.ballot(rest.get().ne(0)).ne(0)):
                m = rest.get()
                has = m.ne(0)
                if n_lane < 32:
                    jj = k.min(_i(k, k.ctz(m | LEAN_SENTINEL)), n_lane - 1)
                else:  # no bit above a 32-bit mask: an empty one's ctz asked of 1 instead
                    jj = _i(k, k.ctz(k.select(has, m, k.const(1, u32))))
                rest.set(m & (m - 1))
                raw = pick(it, jj)
                i = k.min(at.get(), lk - 1)
                k.store(keys_at, i, _flipped(k, raw)[2], mask=has & io.ok)
                k.store(pos_at, i, p0 + jj, mask=has & io.ok)
                at.set(at.get() + k.cast(has, i32))
            run.set(run.get() + rtot)
            if refill is not None and refill_late:  # (the store rounds read the raws)
                refill()

        if self._lean_copies:
            def pick(it, jj):  # the lane's own copy
                return k.load(lds["lean"], self._lean_piece(k, it, jj >> 2) + (jj & 3), u32)
            groups = self._lean_groups(k)
            for g, (lo, hi) in enumerate(groups):
                k.async_wait(len(groups) - 1 - g)
                for it in k.range(lo, k.min(n_it, hi)):
                    iteration(it, [k.load(lds["lean"], self._lean_piece(k, it, j), u32,
                                          LOAD_KEYS) for j in range(self._lean_pieces)],
                              pick)
            return False

        if self.gmax is not None:
            if n_lane != GROUP_KEYS or not spans:
                raise ValueError(f"{self.name}: group_skip lists whole {GROUP_KEYS}-key groups "
                                 f"a lane in the waves' own spans (lean_lane_keys "
                                 f"{n_lane}, lean_spans {int(spans)})")
            share = self._count_tunable("group_skip_share", 0)
            pays = self._long_row(sl)
            if share:
                share_pays = self._groups_pay(k, sl, lds, share)
                pays = share_pays if pays is None else pays & share_pays
            if pays is not None:  # the groups where they pay (few listed, a long row), else
                # every key
                with k.if_else(pays) as (skip, whole):
                    with skip:
                        self._lean_groups_scan(k, io, sl, lds, iteration, span_lo, bound,
                                               t_lo)
                    with whole:
                        self._lean_loop(k, io, sl, lds, iteration, n_it)
            else:
                self._lean_groups_scan(k, io, sl, lds, iteration, span_lo, bound, t_lo)
            self._gather_spans(k, io, sl, lds, run, start)
            return spans
        self._lean_loop(k, io, sl, lds, iteration, n_it)
        if spans:
            self._gather_spans(k, io, sl, lds, run, start)
        return spans

    def _long_row(self, sl):
        """group_skip_min_keys: uniform i1, the row has at least that many visible keys (the
        group skip's rows); None where every row skips (0)."""
        least = self._count_tunable("group_skip_min_keys", 0)
        return sl.n >= least if least else None

    def _groups_pay(self, k, sl, lds, share):
        """group_skip_share: uniform i1, the row lists at most 1 / share of its keys (its
        keys of first digit >= the threshold digit, the row's cum there in LDS gcum: the
        same on every slice), so few of its groups are flagged and the group skip pays; a
        row listing more (normal scores at 64K keys list half the row: every group flagged)
        takes the plain loop, whose maxima loads and flags are not in its way."""
        if self.refines:
            raise ValueError(f"{self.name}: group_skip_share weighs the first digit's count; "
                             "with refined first digits every row lists a 10-bit bin "
                             "(0.4-2.2% of an indexer row): leave it 0")
        st = _State.load(k, lds["state"], 0)
        b = k.select(st.i(X_D).eq(0), k.const(0, i32), _i(k, st[X_Q]))  # (take-all: every key)
        listed = _i(k, k.load(lds["gcum"], k.min(b, FIRST_DIGIT_BINS - 1), u32))
        return listed * share <= sl.n

    def _lean_loop(self, k, io, sl, lds, iteration, n_it):
        """The lean loop over every key of the slice (or of the wave's span): `iteration`
        on each lane's 16 consecutive keys, loaded an iteration ahead."""
        n_lane = self._lane_keys
        last = self.cfg.capacity - LOAD_KEYS
        stage = lds.get("lean_stage")
        slot = k.thread_id() * n_lane
        if stage is not None:
            def pick(it, jj):  # the lane's own keys, put in LDS by this iteration
                return k.load(stage, slot + jj, u32)
        else:
            pick = None  # below: from the iteration's registers

        ahead = self._count_tunable("lean_prefetch_ahead", 0)
        coalesced = self._coalesced(lds)
        refill_mode = self._count_tunable("lean_refill", 0)
        if refill_mode > LEAN_REFILL_TURNS:
            raise ValueError(f"{self.name}: lean_refill = {refill_mode} must be 0, 1 or 2")

        def step(it, cur, nxt):
            """Iteration `it` on the keys in register set `cur`; the loads of iteration
            `nxt` into `cur` (lean_refill) or, with nxt None, iteration it + 1's into the
            one set, first (lean_refill 0)."""
            raws = [v.get() for v in cur]
            if nxt is None:
                refill = None
                for v, x in zip(cur, self._lean_loads(k, io, sl, it + 1, lds)):
                    v.set(x)
            else:
                def refill():
                    for v, x in zip(cur, self._lean_loads(k, io, sl, nxt, lds)):
                        v.set(x)
            if ahead:
                pa = self._lean_first_position(k, sl, it + ahead)
                self.scores.prefetch_line(k, io, sl.r, k.min(pa, last),
                                          n_lane * 4, pa < sl.hi)
            if coalesced:  # the wave's keys through LDS: a lane's consecutive keys
                k.wave_sync()  # the last iteration's store rounds have read their words
                for j, raw in enumerate(raws):
                    k.store(stage, self._coalesced_word(k, j), raw)
                k.wave_sync()
                raws = [k.load(stage, slot + LOAD_KEYS * j, u32, LOAD_KEYS)
                        for j in range(self._lean_pieces)]
            elif stage is not None:
                for j, raw in enumerate(raws):
                    k.store(stage, slot + LOAD_KEYS * j, raw)
            iteration(it, raws, pick or functools.partial(_pick16, k, raws), refill,
                      refill_late=pick is None and not coalesced)

        with k.if_(sl.lo < sl.hi):
            first = sl.lean_early or self._lean_loads(k, io, sl, 0, lds)
            ring = [k.lane_var(x) for x in first]
            if refill_mode < LEAN_REFILL_TURNS:
                for it in k.range(0, n_it):
                    step(it, ring, it + 1 if refill_mode else None)
            else:
                # two register sets taking turns, each refilled with the keys two iterations
                # on (an odd count gets one iteration past the slice: no key valid, nothing
                # listed or counted; a conditional second turn let ptxas sink its loads to
                # its end)
                other = [k.lane_var(x) for x in self._lean_loads(k, io, sl, 1, lds)]
                for it in k.range(0, n_it + (n_it & 1), 2):
                    step(it, ring, it + 2)
                    step(it + 1, other, it + 3)

    def _group_iterations(self, k) -> int:
        """group_skip: the most iterations of GROUPS_A_LANE x L maxima a wave's span takes
        (a span is whole lean iterations of GROUP_KEYS x L keys, the longest slice's)."""
        lean_its = -(-self.cfg.max_slice_keys() // (GROUP_KEYS * k.W * k.L))
        return -(-lean_its // GROUPS_A_LANE)

    def _maxima_early(self, k) -> bool:
        """group_maxima_early, where a wave's span takes at most EARLY_MAXIMA_ITERATIONS
        loads of maxima (the registers they hold across the fold, the LDS slots of a whole
        span's flags); else the loop of maxima, then keys, an iteration."""
        return (bool(self.group_maxima_early)
                and self._group_iterations(k) <= EARLY_MAXIMA_ITERATIONS)

    def _group_maxima_loads(self, k, io, sl) -> list:
        """group_maxima_early: the maxima of every group iteration of the wave's span (a
        16-byte load a lane an iteration, `_group_iterations` of them, past the span's
        groups clamped into the row and never flagged), issued with no use: sel_h1 issues
        them before its fold so they arrive under it."""
        L = k.L
        span_lo, _, _ = self._lean_wave_span(k, sl)
        g_lo = span_lo >> GROUP_SHIFT  # (a span starts a whole number of iterations in)
        long_row = self._long_row(sl)  # (a shorter row never reads them: none loaded)
        return [self._maxima_at(k, io, sl, g_lo + it * GROUPS_A_LANE * L
                                + GROUPS_A_LANE * k.lane_id(), long_row)
                for it in range(self._group_iterations(k))]

    def _maxima_at(self, k, io, sl, g, mask=None):
        """The maxima of row groups g .. g + GROUPS_A_LANE - 1 (past the row's last whole
        load clamped to it: such groups lie past the span and are never flagged)."""
        last_g = self.cfg.capacity // GROUP_KEYS - GROUPS_A_LANE
        return self.gmax.load4(k, io, sl.r, k.min(g, last_g), mask)

    def _lean_groups_scan(self, k, io, sl, lds, iteration, span_lo, bound, t_lo):
        """SelectConfig.group_skip: the wave's span [span_lo, bound) in iterations of
        GROUPS_A_LANE x L aligned 16-key groups: each lane loads its groups' maxima (one
        16-byte load), flags those not below t_lo (every group where the row holds a NaN or
        -inf score, LDS `unsel` from its refined bin 0: the maxima pass over those, and the
        NaN / unselectable counts must see them; a fix-up's +inf always), and the wave writes
        the flagged groups' numbers into its LDS slots in position order (the flags' counts'
        exclusive prefix over the lanes); then rounds of L flagged groups, a group a lane,
        each `iteration`'s masks, counts and store rounds on the group's 16 keys (a lane
        without a group: no valid key). The lists come out as the lean loop's: the flagged
        groups hold every key at or above t_lo, in position order.
        With group_maxima_early every iteration's maxima are in registers already
        (`_group_maxima_loads`, issued before the fold): the wave flags all of its span's
        groups into its slots first, then lists them in one run of rounds, one round trip
        (the keys') after the decision instead of two an iteration."""
        c, L = self.cfg, k.L
        lane = k.lane_id()
        slots, base = lds["groups"], k.wave_id() * self._group_slots(k)
        g_lo = span_lo >> GROUP_SHIFT  # (a span starts a whole number of iterations in)
        n_groups = (k.max(bound - span_lo, 0) + (GROUP_KEYS - 1)) >> GROUP_SHIFT
        per_it = GROUPS_A_LANE * L
        last = c.capacity - LOAD_KEYS
        if self.gmax.marks_unselectable:  # (their groups' maxima are +inf: always flagged)
            t_flag = t_lo
        else:
            neg_inf = k.bitcast(k.const(F32_NEG_INF_BITS, u32), f32)
            t_flag = k.select(k.load(lds["unsel"], 0, u32).ne(0), neg_inf, t_lo)

        def flag(gl, mx, at):
            """The lane's flagged groups of maxima `mx` (its first group gl in the span)
            into the slots from `at`, in position order; the wave's count of them."""
            flags = k.const(0, u32)
            for e in range(GROUPS_A_LANE):
                hit = ((gl + e) < n_groups) & ~(k.bitcast(k.extract(mx, e), f32) < t_flag)
                flags = flags | (k.cast(hit, u32) << e)
            # a lane flags 0 .. GROUPS_A_LANE groups
            excl, tot = _lane_prefix(k, _i(k, k.popc(flags)), GROUPS_A_LANE.bit_length())
            for e in range(GROUPS_A_LANE):
                rank = excl + _i(k, k.popc(flags & ((1 << e) - 1)))
                k.store(slots, at + rank, gl + e, mask=((flags >> e) & 1).ne(0))
            return tot

        def list_flagged(base, tot):
            k.wave_sync()  # the lanes read each other's slots
            for r0 in k.range(0, tot, L):
                j = r0 + lane
                has = j < tot
                grel = k.load(slots, base + k.min(j, tot - 1), i32)
                first = span_lo + (grel << GROUP_SHIFT)
                at = k.select(has, first, span_lo)  # (an aligned address for a lane without)
                raws = [self.scores.load4(k, io, sl.r, k.min(at + LOAD_KEYS * jj, last), None)
                        for jj in range(GROUP_KEYS // LOAD_KEYS)]
                # a lane without a group starts at the span's bound: no valid key
                iteration(None, raws, functools.partial(_pick16, k, raws),
                          p0=k.select(has, first, bound))
            k.wave_sync()  # every lane has read its slot before the slots' next stores

        if self._maxima_early(k):
            maxima = sl.gmax_early or self._group_maxima_loads(k, io, sl)
            tot = k.const(0, i32)
            for it, mx in enumerate(maxima):  # (past the span's groups: none flagged)
                tot = tot + flag(it * per_it + GROUPS_A_LANE * lane, mx, base + tot)
            list_flagged(base, tot)
            return
        for it in k.range(0, (n_groups + (per_it - 1)) / per_it):
            gl = it * per_it + GROUPS_A_LANE * lane  # the lane's first group in the span
            list_flagged(base, flag(gl, self._maxima_at(k, io, sl, g_lo + gl), base))

    def _group_slots(self, k) -> int:
        """group_skip: LDS slots a wave's flagged groups take (an iteration's, or with
        group_maxima_early its whole span's)."""
        its = self._group_iterations(k) if self._maxima_early(k) else 1
        return its * GROUPS_A_LANE * k.L

    def _gather_spans(self, k, io, sl, lds, run, start):
        """lean_spans, after every wave's loop: the waves' entry counts through LDS (one CTA
        barrier, which also orders their scratch stores before the reads back), then each
        wave copies its scratch entries (at `start`, its span's offset) to its place in the
        slice's list, after the lists of the waves before it (position order, as the
        default's), and counts the next digit of the keys it copies into LDS hist (integer
        atomics: the default's counts, in another order). `run` ends as the list's length.
        The waves' destinations are disjoint, so they copy concurrently; the copy's stores
        are word stores (a wave's place starts at any entry)."""
        W, L = k.W, k.L
        w = k.wave_id()
        em = lds.get("emit")
        own = run.get() - start
        if W > 1:
            k.store(em, w, own)
            k.barrier()
            off, total = k.const(0, i32), k.const(0, i32)
            for u in range(W):
                x = k.load(em, u, i32)
                off = off + k.select(w > u, x, 0)
                total = total + x
        else:  # the lanes read each other's scratch stores
            k.wave_sync()
            off, total = k.const(0, i32), own
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)
        base = sl.list_base()
        load_key, load_pos = (_region_loader(io, name, base + start)
                              for name in self.span_lists())
        U = LIST_UNROLL
        with k.if_(own > 0):
            for i0 in k.range(0, own, LOAD_KEYS * L * U):
                idx = [i0 + u * LOAD_KEYS * L + LOAD_KEYS * k.lane_id() for u in range(U)]
                keys = [load_key(i, mask=i < own) for i in idx]
                poss = [load_pos(i, mask=i < own) for i in idx]
                for i, key, pv in zip(idx, keys, poss):
                    valid = k.vec(*[i + e for e in range(LOAD_KEYS)]) < own
                    self._count_digits(k, lds["hist"], key, d,
                                       valid & _prefix(k, key, d).eq(Q))
                    for e in range(LOAD_KEYS):
                        m = k.extract(valid, e)
                        at = base + off + i + e
                        io.store(self.list_out[0], at, k.extract(key, e), mask=m)
                        io.store(self.list_out[1], at, k.extract(pv, e), mask=m)
        run.set(total)

    def _coalesced(self, lds) -> bool:
        """lean_coalesced, where the loop has its LDS staging to pass the keys through."""
        return bool(self._count_tunable("lean_coalesced", 0)) and "lean_stage" in lds

    def _coalesced_word(self, k, j):
        """Word of the LDS staging for this lane's coalesced load j: the key's offset in the
        iteration (the wave's block of lane_keys * L keys, load j's 4 L of them, the lane's
        4), so that lane t's consecutive keys are words t * lane_keys .. of its wave's block."""
        n, L = self._lane_keys, k.L
        return k.wave_id() * (n * L) + j * (LOAD_KEYS * L) + LOAD_KEYS * k.lane_id()

    def _lean_loads(self, k, io, sl, it, lds):
        """Lean iteration `it`'s score loads of this lane (4-vectors at clamped positions:
        entries past hi are read, never counted): its consecutive keys, or with
        lean_coalesced the wave's keys in whole 16-byte pieces side by side (load j of lane
        t: the iteration's keys at `_coalesced_word`)."""
        last = self.cfg.capacity - LOAD_KEYS
        if self._coalesced(lds):
            it0 = sl.lo + it * (self._lane_keys * k.W * k.L)

            def position(j):
                return it0 + self._coalesced_word(k, j)
        else:
            p0 = self._lean_first_position(k, sl, it)

            def position(j):
                return p0 + LOAD_KEYS * j
        return [self.scores.load4(k, io, sl.r, k.min(position(j), last), None)
                for j in range(self._lean_pieces)]

    def _prefetch_slice_lines(self, k, io, sl):
        """lean_prefetch_early: the waves but wave 0 ask the L2 for every line of the slice
        [lo, hi), lines spread over their threads (lo is whole segments, so whole lines)."""
        c, L = self.cfg, k.L
        keys = L2_LINE_BYTES // 4
        if c.segment % keys:
            raise ValueError(f"segment {c.segment} is not whole {L2_LINE_BYTES}-byte lines")
        T = (k.W - 1) * L
        u = k.thread_id() - L
        lines = (sl.hi - sl.lo + (keys - 1)) / keys
        with k.if_(k.wave_id() > 0):
            for j in range(-(-c.max_slice_keys() // (keys * T))):
                line = u + j * T
                self.scores.prefetch_line(k, io, sl.r, sl.lo + k.min(line, lines - 1) * keys,
                                          L2_LINE_BYTES, line < lines)

    @staticmethod
    def _scan_positions(k, base, unroll: int = SCAN_UNROLL):
        """The first of a lane's 4 consecutive positions in each of an iteration's
        `unroll` rounds (lanes, then waves, then rounds in position order)."""
        T = k.W * k.L
        return [base + (u * 4 * T) + 4 * k.thread_id() for u in range(unroll)]

    def _scan_loads(self, k, io, sl, base, ps=None):
        """An iteration's score loads (from `base`, or at positions `ps`): unmasked, at a
        clamped position (a lane mask each would be a live SGPR pair on AMD): entries past
        hi are read but never counted."""
        last = self.cfg.capacity - 4
        ps = self._scan_positions(k, base, self.scan_rounds) if ps is None else ps
        return [self.scores.load4(k, io, sl.r, k.min(p, last), None) for p in ps]

    def _rare_specials(self, k, raw, pv, hi, nan_acc):
        """The ordered keys of a round's 4 scores a lane (SelectConfig.rare_specials): the
        special cases (-inf, NaN: key 0) and the NaN / unselectable counts (into nan_acc
        unless None) only where a lane of the wave holds one, behind a wave-uniform branch."""
        key, special = keys_and_specials(k, raw)
        anyone = special[0] | special[1] | special[2] | special[3]
        out = k.lane_var(key)
        with k.if_(k.ballot(anyone).ne(0)):
            exact = k.select(special, k.vec(*[k.const(0, u32)] * 4), key)
            out.set(exact)
            if nan_acc is not None:
                nan_acc.set(nan_acc.get() + self._nan_counts(k, raw, exact, pv, hi))
        return out.get()

    @staticmethod
    def _nan_counts(k, raw, key, pv, hi):
        """A lane's NaNs (low half) and unselectable keys (high half) among 4 keys at
        positions pv < hi, in integer arithmetic only: LLVM sinks these sums to the end of
        the unrolled rounds, where compare results would each hold an SGPR pair on AMD."""
        valid = _u(k, (pv - hi) >> 31)  # all ones below hi (an arithmetic shift)
        nan = (0x7F800000 - (raw & 0x7FFFFFFF)) >> 31  # |bits| past +inf's
        unsel = ((key | (0 - key)) >> 31) ^ 1  # key 0
        cnt = _i(k, valid & (nan | (unsel << 16)))
        return k.extract(cnt, 0) + k.extract(cnt, 1) + k.extract(cnt, 2) + k.extract(cnt, 3)
