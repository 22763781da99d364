"""SelectPass's exchange rounds: message q published, message q-1 consumed (the
    row's summed histograms, the threshold digit, the new state), and a final decision's
    placement among the row's slices."""
from __future__ import annotations

import contextlib

from layouts.scores import FINE_DIGIT_BINS, FINE_DIGIT_BITS, FIRST_DIGIT_BINS, FIRST_DIGIT_BITS, \
    REFINED_BINS
from monokernel.types import i32, u32

from .config import (DEFER_MIN_TOPKS, DEFER_SHIFT, FINE_MISMATCH, FIN_B, FIN_COUNT, FIN_GO, FIN_HAS_HI,
                     FIN_N, FIN_T, FIN_T_ABOVE, LOAD_KEYS, NEXTRA, RDY_SOLO, UNROLL, X_ABOVE, X_BASE, X_D, X_DEFER, X_DONE,
                     X_NAN, X_NANS, X_NEED, X_NLIST, X_Q, X_SOLO, X_TIEBASE, X_TOTAL, X_UNSEL, X_UNSELS)
from .lanes import (_State, _barrier, _cta_suffix_sums, _i, _last, _pick, _scan, _suffix_sums,
                    _threshold, _u, _wave0, initial_state)


class Exchange:
    """SelectPass's exchange rounds: message q published, message q-1 consumed (the
    row's summed histograms, the threshold digit, the new state), and a final decision's
    placement among the row's slices."""

    # -- publish message q ----------------------------------------------------------------
    def _publish(self, k, io, sl, lds):
        """Wave 0: the cum histogram (unless done) and the state -> message q; release;
        announce with the tagged pair. With SelectConfig.cta_publish every wave first turns
        its share of LDS hist into suffix sums in place, and wave 0 copies them out as
        vectors: one release, by the wave that announces."""
        c = self.cfg
        q = self.q
        B = c.bins(q)
        S = c.max_slices
        mw = c.msg_words(q)
        msg = c.msg(q)
        hist = lds["hist"]
        cta = self._publishes_by_cta(k)
        if cta:
            with k.if_(~_State.load(k, lds["state"], 0).done):
                _cta_suffix_sums(k, hist, B, lambda bb, v, m: k.store(hist, bb, v, mask=m),
                                 lds["pub_waves"])
            _barrier(k)
        with _wave0(k):
            st = _State.load(k, lds["state"], 0)
            mb = (sl.r * S + sl.s) * mw
            if q == 1:
                cnt = k.load(lds["cnt"], 0, u32, 2)
                st[X_NAN] = k.extract(cnt, 0)
                st[X_UNSEL] = k.extract(cnt, 1)
                if self.refines:  # the list: keys above the 10-bit prefix, then at it
                    st[X_ABOVE] = _u(k, st.i(X_NLIST) - self._hist_total(k, hist, B, cta))
            with k.if_(~st.done):
                if cta:
                    V = LOAD_KEYS  # u32 words of a 16-byte access
                    for ch in range(-(-B // (V * k.L))):
                        i = (ch * k.L + k.lane_id()) * V
                        at = k.min(i, B - V)
                        io.store(msg, mb + at, k.load(hist, at, u32, V), mask=i < B)
                else:
                    _suffix_sums(k, hist, B,
                                 lambda bb, v, m: io.store(msg, mb + bb, v, mask=m))
            for j, v in enumerate(st.vecs()):
                io.store(msg, mb + c.state_word + 4 * j, v)
            if self.release:
                k.fence("release", "device")
            self._announce(k, io, sl, st)

    def _hist_total(self, k, hist, B, cum):
        """Wave 0: the keys LDS hist counts (its suffix sums' bin 0 when `cum`)."""
        if cum:
            return _i(k, k.load(hist, 0, u32))
        tot = k.uniform_var(0, i32)
        for ch in range((B + k.L - 1) // k.L):
            b = ch * k.L + k.lane_id()
            m = b < B
            g = _i(k, k.load(hist, k.min(b, B - 1), u32, mask=m))
            tot.set(tot.get() + k.wave_sum(k.select(m, g, 0)))
        return tot.get()

    def _announce(self, k, io, sl, st):
        """Wave 0, message q released: its tagged pair (done + 1, and RDY_SOLO on rdy1 for a
        row that leaves the rounds: solo, or by the tail finish)."""
        c = self.cfg
        q = self.q
        flag = st[X_DONE] + 1
        if q == 1 and c.leaves_rounds:  # (read by sel_h2 on)
            flag = flag + st[X_SOLO] * RDY_SOLO
        io.publish(c.rdy(q), sl.r * c.max_slices + sl.s, flag)

    # -- consume message q-1: the decision -------------------------------------------------
    def _consume(self, k, io, sl, lds, solo=None):
        """Leave in LDS `state` this slice's state after deciding on message q-1 (`solo`:
        uniform i1, the row finishes solo: no placement among the slices)."""
        if self.folds:
            self._fold_first(k, io, sl, lds)
            return
        c = self.cfg
        p = self.q - 1
        S = c.max_slices
        mw = c.msg_words(p)
        msg, rdy = c.msg(p), c.rdy(p)

        def wait_all(polled=False):  # (polled: the row's check polled them, `_row_is_solo`)
            if not polled:
                self._wait_row_pairs(k, io, sl, rdy)
            if self.acquire:
                k.fence("acquire", "device")
        with _wave0(k):
            if self.one_wait or self.pairs_seen:  # every slice's pair (its own among them),
                # one acquire
                wait_all(polled=self.pairs_seen)
                st = self._load_msg_state(k, io, msg, (sl.r * S + sl.s) * mw + c.state_word)
            else:  # its own first: a final decision needs no other slice's message
                io.wait(rdy, sl.r * S + sl.s)
                if self.acquire:
                    k.fence("acquire", "device")
                st = self._load_msg_state(k, io, msg, (sl.r * S + sl.s) * mw + c.state_word)
                with k.if_(~st.done):
                    wait_all()
            st.store_lds(lds["state"])
            if self.finishes or self.tail_finishes:
                k.store(lds["fin"], FIN_GO, k.const(0, i32))
            io.env.phase(0)  # the messages this decision reads are in
        _barrier(k)
        st = _State.load(k, lds["state"], 0)
        with k.if_(~st.done):
            self._global_cum(k, io, sl, lds)
            io.env.phase(1)  # the row's cum histogram is summed
            with _wave0(k):
                self._decide(k, io, sl, lds, solo)
            _barrier(k)
            if self.refines:
                self._refine_first(k, io, sl, lds)

    def _wait_row_pairs(self, k, io, sl, rdy):
        """Wave 0: poll pairs `rdy` of every slice of this job's row (a lane a slice, several
        rounds of lanes past L slices). Returns each lane's OR of the values it polled (0 on
        a lane past the row's slices)."""
        S, L = self.cfg.max_slices, k.L
        got = k.const(0, u32)
        for grp in range((S + L - 1) // L):
            s2 = grp * L + k.lane_id()
            m = s2 < sl.sc
            v = io.wait(rdy, sl.r * S + k.min(s2, S - 1), mask=m)
            got = got | k.select(m, v, 0)
        return got

    def _fold_first(self, k, io, sl, lds):
        """sel_h1 deciding the first digit without message 0 (SelectConfig.
        fold_first_digits): sel_h0's wait and input checks, the row's first-digit cum summed
        from every segment of the row into LDS gcum (what `_global_cum` sums from the row's
        messages) and the own slice's into `own_cum`, then the decision."""
        c = self.cfg
        if self.ready is not None:
            with _wave0(k):
                self.ready.wait(k, io)
            _barrier(k)
        io.env.phase(0)  # the first digits are ready
        if self.gmax is not None and self._maxima_early(k):  # to arrive under the fold
            sl.gmax_early = self._group_maxima_loads(k, io, sl)
        pages_checked = self._check_inputs(k, io, sl)
        initial_state(k, c).store_lds(lds["state"])
        self._row_first_digits(k, io, sl, lds)
        pages_checked()
        io.env.phase(1)  # the row's cum histogram is summed
        with _wave0(k):
            self._decide(k, io, sl, lds)
        _barrier(k)
        if self.refines:
            self._refine_first(k, io, sl, lds)

    def _refine_first(self, k, io, sl, lds):
        """sel_h1 after deciding the first digit b (SelectConfig.fine_digits, all waves): the
        row's 16 sub-bins of b summed over the fine parts (a 16-byte load a part a thread,
        four threads a part; the lanes of one quarter summed by lane swaps, then one LDS add a
        word a wave), their suffix sums, and the decision on them: the prefix becomes the 10
        bits (b, f) with f the last sub-bin whose cum holds `need`, need less the keys above
        it. A row that takes every key (no first digit decided) is left as it is. Sub-bins
        that do not add up to b's count in the first digits are an input error
        (FINE_MISMATCH): a wrong split would select wrong keys silently."""
        c = self.cfg
        F, V = FINE_DIGIT_BINS, LOAD_KEYS
        Q4 = F // V  # 16-byte loads a part
        fc = lds["fine_cum"]
        T = k.W * k.L
        t = k.thread_id()
        with _wave0(k):
            for ch in range(-(-F // k.L)):
                i = ch * k.L + k.lane_id()
                k.store(fc, k.min(i, F - 1), k.const(0, u32), mask=i < F)
        st = _State.load(k, lds["state"], 0)
        refine = st.i(X_D).eq(FIRST_DIGIT_BITS)  # (0: the row takes every key)
        b = st.i(X_Q)
        unsel = lds.get("unsel")  # group_skip: whether the row holds an unselectable score
        if unsel is not None:  # (a row taking every key scans every group)
            with _wave0(k):
                k.store(unsel, 0, k.select(refine, k.const(0, u32), k.const(1, u32)),
                        mask=k.lane_id().eq(0))
        _barrier(k)
        with k.if_(refine):
            J = c.fine_parts
            items = J * Q4
            cq = t % Q4  # (T is a multiple of Q4: a thread keeps its quarter)
            zero4 = k.vec(k.const(0, u32), 0, 0, 0)
            acc = k.lane_var(zero4)
            bad = k.lane_var(k.const(0, u32)) if unsel is not None else None
            for it in range(-(-items // T)):
                item = t + it * T
                m = item < items
                j = k.min(item / Q4, J - 1)
                idx = (j * c.rows + sl.r) * REFINED_BINS + b * F + V * cq
                acc.set(acc.get() + k.select(m, self.fine.read4(k, io, idx, m), 0))
                if bad is not None:  # the part's bin 0 (-inf and NaN), beside its sub-bins
                    m0 = m & cq.eq(0)
                    w0 = k.extract(self.fine.read4(k, io, (j * c.rows + sl.r) * REFINED_BINS,
                                                   m0), 0)
                    bad.set(bad.get() | k.select(m0, w0, 0))
            if bad is not None:
                k.atomic("add", unsel, 0, k.const(1, u32),
                         mask=k.lane_id().eq(0) & k.ballot(bad.get().ne(0)).ne(0), scope="cta")
            a = [k.extract(acc.get(), e) for e in range(V)]
            swap = Q4
            while swap < k.L:  # the lanes of one quarter (lane % Q4) summed
                a = [x + k.lane_swap(x, swap) for x in a]
                swap *= 2
            for e in range(V):
                k.atomic("add", fc, V * cq + e, a[e], mask=k.lane_id() < Q4, scope="cta")
        _barrier(k)
        with _wave0(k):
            with k.if_(refine):
                _suffix_sums(k, fc, F, lambda bb, v, m: k.store(fc, bb, v, mask=m))
        _barrier(k)
        gcum = lds["gcum"]
        coarse = _i(k, k.load(gcum, b, u32)) - k.select(
            (b + 1) < FIRST_DIGIT_BINS, _i(k, k.load(gcum, k.min(b + 1, FIRST_DIGIT_BINS - 1),
                                                 u32)), 0)
        io.env.fail(refine & _i(k, k.load(fc, 0, u32)).ne(coarse), FINE_MISMATCH)
        with _wave0(k):
            with k.if_(refine):
                need = st.i(X_NEED)
                _, f, _, _, fa = _threshold(k, fc, F, need)
                k.store(lds["state"], X_Q, _u(k, (b << FINE_DIGIT_BITS) | f))
                k.store(lds["state"], X_D, _u(k, st.i(X_D) + FINE_DIGIT_BITS))
                k.store(lds["state"], X_NEED, _u(k, need - fa))
        _barrier(k)

    def _row_first_digits(self, k, io, sl, lds):
        """All waves: LDS gcum = the cum of the sum of the row's segment histograms (the
        nseg segments its slices tile), own_cum = the same over this slice's segments, read
        in bands of `fold_bins` bins from the top (with row_parts the row's total from the
        scoring's fine_parts per-job counts instead, and no own_cum: refined digits take a
        slice's keys above the prefix from its list) until the row holds K keys at or above the
        band read last (the threshold digit, and the bin above it, then lie in what was
        read): an unread bin's cum is that band's, >= K, so the threshold search (the last
        bin with cum >= need) finds the bin it finds from every bin.
        A thread holds a 4-bin group of T / (bins / 4) segment groups' running sums,
        segment_unroll 16-byte loads in flight; the groups meet in LDS by atomic adds
        (integers: any order), and wave 0 turns both into suffix sums."""
        c = self.cfg
        B = FIRST_DIGIT_BINS
        V = LOAD_KEYS  # bins (u32 words) of a 16-byte load
        R = self._count_tunable("fold_bins", V)
        if R % V or B % R:
            raise ValueError(f"{self.name}: fold_bins = {R} must be a multiple of {V} "
                             f"dividing {B}")
        T = k.W * k.L
        t = k.thread_id()
        gcum, own = lds["gcum"], lds["own_cum"]
        for i in range((B + T - 1) // T):
            idx = t + i * T
            for h in (gcum, own):
                k.store(h, k.min(idx, B - 1), k.const(0, u32), mask=idx < B)
        _barrier(k)
        Bq = R // V
        G = max(1, T // Bq)
        cq, grp = t % Bq, t / Bq
        live = grp < G
        seg = c.segment
        g_lo = sl.lo / seg
        g_hi = (sl.hi + (seg - 1)) / seg
        U = self._count_tunable("segment_unroll")
        U_long = self.segment_unroll_long and self._count_tunable("segment_unroll_long")
        zero4 = k.vec(k.const(0, u32), 0, 0, 0)
        total = k.const(0, i32)
        acc, mine = k.lane_var(zero4), k.lane_var(zero4)
        go = None
        parts = c.row_parts  # the row's total from the scoring's per-job counts
        if parts and not self.refines:
            raise ValueError(f"{self.name}: row_parts leaves own_cum unread, which only "
                             "refined first digits allow (their X_ABOVE is the list's)")
        for band in range(B // R):
            lo = B - (band + 1) * R
            with contextlib.nullcontext() if go is None else k.if_(go):
                acc.set(zero4)
                mine.set(zero4)
                if parts:  # the row's parts alone: with refined digits own_cum is not read
                    # (sel_h1's publish sets X_ABOVE from its list), so it stays zero
                    J = c.fine_parts
                    Uj = min(U, -(-J // G))  # (as many loads as a thread has parts)
                    for j0 in k.range(0, J, G * Uj):
                        got = []
                        for u in range(Uj):
                            j = j0 + grp + G * u
                            m = live & (j < J)
                            idx = (k.min(j, J - 1) * c.rows + sl.r) * B + lo + V * cq
                            got.append((m, self.fine.read_rows4(k, io, idx, m)))
                        for m, v in got:
                            acc.set(acc.get() + k.select(m, v, 0))
                else:  # every segment of the row: its total and the own slice's
                    def fold(U):
                        for g0 in k.range(0, sl.nseg, G * U):
                            got = []
                            for u in range(U):
                                g = g0 + grp + G * u
                                m = live & (g < sl.nseg)
                                idx = (sl.r * c.segments + k.min(g, c.segments - 1)) * B \
                                    + lo + V * cq
                                got.append((g, m, self.hist.read4(k, io, idx, m)))
                            for g, m, v in got:
                                acc.set(acc.get() + k.select(m, v, 0))
                                mine.set(mine.get()
                                         + k.select(m & (g >= g_lo) & (g < g_hi), v, 0))
                    if U_long:  # (a row longer than one iteration of U: U_long at once)
                        with k.if_else(sl.nseg > G * U) as (long_row, short_row):
                            with long_row:
                                fold(U_long)
                            with short_row:
                                fold(U)
                    else:
                        fold(U)
                for h, a in ((gcum, acc.get()), (own, mine.get())):
                    for e in range(V):
                        k.atomic("add", h, lo + V * cq + e, k.extract(a, e), mask=live,
                                 scope="cta")
                _barrier(k)
            if band < B // R - 1:  # the row's keys in the bands read so far, from this
                # band's bins (a wave past the barrier may be adding into lower ones already)
                for ch in range(-(-R // k.L)):
                    b = lo + ch * k.L + k.lane_id()
                    m = b < lo + R
                    g = _i(k, k.load(gcum, k.min(b, B - 1), u32, mask=m))
                    total = total + k.wave_sum(k.select(m, g, 0))
                go = total < c.topk
        with _wave0(k):
            for h in (gcum, own):
                _suffix_sums(k, h, B, lambda bb, v, m, h=h: k.store(h, bb, v, mask=m))
        _barrier(k)

    def _load_msg_state(self, k, io, msg, idx0):
        return _State(k, vecs=[io.load(msg, idx0 + 4 * j, 4) for j in range(NEXTRA // 4)])

    def _global_cum(self, k, io, sl, lds):
        """LDS gcum[b] = sum over the row's slices of their cum[b] (all waves)."""
        c = self.cfg
        p = self.q - 1
        Bp = max(4, c.bins(p))
        S = c.max_slices
        mw = c.msg_words(p)
        msg = c.msg(p)
        gcum = lds["gcum"]
        t = k.thread_id()
        T = k.W * k.L
        for i in range((Bp + T - 1) // T):
            idx = t + i * T
            k.store(gcum, k.min(idx, Bp - 1), k.const(0, u32), mask=idx < Bp)
        _barrier(k)
        Bq = Bp // 4
        PH = max(1, T // Bq)
        items = Bq * PH
        for it in range((items + T - 1) // T):
            item = t + it * T
            live = item < items
            cq = item % Bq
            j = item / Bq
            zero4 = k.vec(k.const(0, u32), 0, 0, 0)
            acc = k.lane_var(zero4)
            U = min(UNROLL, S)
            for g in k.range(0, sl.sc, PH * U):
                for u in range(U):
                    s2 = g + j * U + u
                    ok = live & (s2 < sl.sc)
                    idx = (sl.r * S + k.min(s2, S - 1)) * mw + 4 * cq
                    v = io.load(msg, idx, 4)
                    acc.set(acc.get() + k.select(ok, v, 0))
            a = acc.get()
            for e in range(4):
                k.atomic("add", gcum, 4 * cq + e, k.extract(a, e), mask=live, scope="cta")
        _barrier(k)

    def _decide(self, k, io, sl, lds, solo=None):
        """Wave 0: threshold digit, new state, and (when final, unless the row is `solo`)
        this slice's placement. On message 0 it also decides whether the row finishes solo:
        its lists will hold the keys of first digit >= the threshold digit (key 0 excepted),
        Gcum[b] of them (at most that when b = 0, where key 0 is counted), the same count
        on every slice."""
        c = self.cfg
        p = self.q - 1
        Bp = c.bins(p)
        S = c.max_slices
        mw = c.msg_words(p)
        msg = c.msg(p)
        st = _State.load(k, lds["state"], 0)
        takeall, b, has_hi, gb, ga = _threshold(k, lds["gcum"], Bp, st.i(X_NEED))
        new, done = self._advance(k, st, p, takeall, b, gb, ga)
        if p == 0 and c.solo:
            new[X_SOLO] = k.select(gb <= c.solo_max_candidates, k.const(1, u32), 0)
        crowded = None
        # a long row: the tail finish (tail_min_keys, the same choice in every job of the row)
        keyed_tail = c.tail_row(sl.n) if p == 0 and c.tail_by_keys else None
        if p == 0 and c.defers:  # a crowded threshold bin: sel_h2 builds the lists
            crowded = (gb - ga) > k.max(sl.n >> DEFER_SHIFT, DEFER_MIN_TOPKS * c.topk)
            defer = ~takeall & crowded
            if keyed_tail is not None:  # (a tail row buckets sel_h1's list: never deferred)
                defer = defer & ~keyed_tail
            new[X_DEFER] = k.select(defer, k.const(1, u32), 0)
        if keyed_tail is not None:
            new[X_SOLO] = k.select(keyed_tail, k.const(1, u32), 0)
        elif p == 0 and c.tail_rows:  # few candidates a slice: the tail finish (sel_h1
            # buckets them); the threshold bin's count is the same on every slice, so is the
            # choice
            tail = ~takeall & ((gb - ga) <= sl.sc * c.tail_max_per_slice)
            if crowded is not None:  # (a deferred row has no list of sel_h1's to bucket)
                tail = tail & ~crowded
            new[X_SOLO] = k.select(tail, k.const(1, u32), 0)
        if self.finishes or self.tail_finishes:  # few candidates left in the row, every
            # slice's list complete (a bucketed finish: any number of them)
            go = ~done if self.tail_finishes else ~done & ((gb - ga) <= c.finish_max)
            if self.q == 2 and c.defers:  # a deferred row's lists are sel_h2's own
                go = go & st[X_DEFER].eq(0)
            fin = lds["fin"]
            k.store(fin, FIN_GO, k.select(go, k.const(1, i32), 0))
            k.store(fin, FIN_COUNT, k.const(0, i32))
            k.store(fin, FIN_B, b)
            k.store(fin, FIN_HAS_HI, k.select(has_hi, k.const(1, i32), 0))
            # (a tail finish's threshold is an unsigned minimum: from the largest key)
            k.store(fin, FIN_T, k.const(-1 if self.tail_finishes else 0, i32))
            k.store(fin, FIN_T_ABOVE, k.const(0, i32))
            k.store(fin, FIN_N, gb - ga)
        own = (sl.r * S + sl.s) * mw
        none_above = takeall | ~has_hi
        if self.folds:  # (message 0's own cum, summed here)
            own_hi = k.load(lds["own_cum"], k.min(b + 1, Bp - 1), u32)
        else:
            own_hi = io.load(msg, own + k.min(b + 1, Bp - 1))
        hi_own = k.select(none_above, 0, _i(k, own_hi))
        new[X_ABOVE] = _u(k, st.i(X_ABOVE) + hi_own)
        nst = new
        nst.store_lds(lds["state"])
        if p == 0:
            return
        with k.if_(done if solo is None else done & ~solo):
            self._placement(k, io, sl, lds, nst, takeall, b, has_hi)

    def _advance(self, k, st, p, takeall, b, gb, ga):
        """(new state, done: uniform i1 or None on the first digit) after deciding digit p
        at bin b of the row's suffix sums (gb = Gcum[b], ga = Gcum[b + 1] or 0)."""
        bits = self.cfg.digits[p]
        need = st.i(X_NEED)
        d = st.i(X_D)
        Q = st[X_Q]
        new = st.copy()
        new[X_Q] = k.select(takeall, Q, (Q << bits) | _u(k, b))
        new[X_D] = _u(k, k.select(takeall, d, d + bits))
        need2 = k.select(takeall, need, need - ga)
        new[X_NEED] = _u(k, need2)
        if p == 0:  # never final on the first digit (the scoring's bin 0 may hold key 0)
            done = None
            new[X_DONE] = k.const(0, u32)
        else:
            done = takeall | gb.eq(need) | (d + bits).eq(32)
            new[X_DONE] = k.select(done, k.const(1, u32), 0)
        return new, done

    def _placement(self, k, io, sl, lds, st, takeall, b, has_hi):
        """Wave 0, decision final: base, tie base and totals from every slice's counts."""
        c = self.cfg
        p = self.q - 1
        Bp = c.bins(p)
        msg = c.msg(p)
        need = st.i(X_NEED)
        lo_i = k.select(takeall, 0, b)
        hi_i = k.min(b + 1, Bp - 1)
        use_hi = ~takeall & has_hi

        def counts(s2, act, mb):  # (ties, keys above) of slice s2 from its message
            c_lo = _i(k, io.load(msg, mb + lo_i, mask=act))
            c_hi = _i(k, io.load(msg, mb + hi_i, mask=act & use_hi))
            ab0 = _i(k, io.load(msg, mb + c.state_word + X_ABOVE, mask=act))
            return lambda: (c_lo - c_hi, ab0 + c_hi)
        self._place(k, io, sl, lds, need, counts)

    def _place(self, k, io, sl, lds, need, counts):
        """Wave 0: the state's base, tie base and totals (in LDS) from every slice's (ties,
        keys above) at the final prefix, `counts(s2, act, mb)()` for the lanes' slices s2 (mb:
        the first word of s2's message q-1; the call loads, the thunk it returns adds), the row's `need` ties at that prefix, and the
        NaN counts of message q-1."""
        c = self.cfg
        p = self.q - 1
        S = c.max_slices
        mw = c.msg_words(p)
        msg = c.msg(p)
        L = k.L
        carry_eq = k.uniform_var(0, i32)
        carry_sel = k.uniform_var(0, i32)
        nans = k.uniform_var(0, i32)
        unsel = k.uniform_var(0, i32)
        base = k.uniform_var(0, i32)
        tieb = k.uniform_var(0, i32)
        for grp in range((S + L - 1) // L):
            s2 = grp * L + k.lane_id()
            act = s2 < sl.sc
            mb = (sl.r * S + k.min(s2, S - 1)) * mw
            got = counts(s2, act, mb)
            nan = _i(k, io.load(msg, mb + c.state_word + X_NAN, mask=act))
            uns = _i(k, io.load(msg, mb + c.state_word + X_UNSEL, mask=act))
            eq, above = got()
            incl_eq = _scan(k, eq)
            excl_eq = carry_eq.get() + incl_eq - eq
            taken = k.min(k.max(need - excl_eq, 0), eq)
            sel = above + taken
            incl_sel = _scan(k, sel)
            excl_sel = carry_sel.get() + incl_sel - sel
            mine = s2.eq(sl.s)
            base.set(base.get() + _pick(k, excl_sel, mine))
            tieb.set(tieb.get() + _pick(k, excl_eq, mine))
            nans.set(nans.get() + k.wave_sum(nan))
            unsel.set(unsel.get() + k.wave_sum(uns))
            carry_eq.set(carry_eq.get() + _last(k, incl_eq))
            carry_sel.set(carry_sel.get() + _last(k, incl_sel))
        stp = lds["state"]
        k.store(stp, X_BASE, _u(k, base.get()))
        k.store(stp, X_TIEBASE, _u(k, tieb.get()))
        k.store(stp, X_TOTAL, _u(k, carry_sel.get()))
        k.store(stp, X_NANS, _u(k, nans.get()))
        k.store(stp, X_UNSELS, _u(k, unsel.get()))
