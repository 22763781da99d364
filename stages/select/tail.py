"""SelectPass's tail finish (SelectConfig.tail_finish; the package doc's "Tail finish"):
sel_out, deciding on message 1, finishes the row from every slice's list, whose keys its
lanes loaded while the messages were still being summed."""
from __future__ import annotations

from monokernel.types import i32, u32

from ..cycles import CycleTally

from .config import (FIN_COUNT, FIN_LONGEST, FIN_N, FIN_T, FIN_T_ABOVE, LOAD_KEYS,
                     TAIL_LIST_AHEAD, TAIL_RANK_CHAINS, TAIL_RANK_GROUP, TAIL_TALLIES, X_D,
                     X_DONE, X_NEED, X_NLIST, X_Q)
from . import config as _config
from .lanes import (_State, _barrier, _cta_suffix_sums, _cta_threshold, _i, _last, _prefix,
                    _read_threshold, _scan, _u, _wave0)


class _Lists:
    """A lane's share of its row's lists: G = T / S consecutive lanes read one slice's list,
    lane u its 4-key groups u, u + G, ... (group i's keys are entries 4 (u + G i) ..).
    `first` holds the first TAIL_LIST_AHEAD groups, loaded unmasked inside the list's room
    (entries past its length are read, never used). Lane u = 0 of a slice zeroes the
    slice's counts (constant stores: nothing waits on the loads; the CTA barriers of the cum
    sum and the decision come before they are counted into)."""

    def __init__(self, k, io, cfg, sl, lds):
        S, T = cfg.max_slices, k.W * k.L
        if S > T:
            raise ValueError(f"tail_finish: {S} slices a row exceed the CTA's {T} threads "
                             "(a slice's list needs a lane at least)")
        self.k, self.io, self.cfg, self.sl = k, io, cfg, sl
        self.G = G = T // S
        t = k.thread_id()
        self.s = t / G
        self.u = t - self.s * G
        act = self.s < sl.sc
        ss = k.min(self.s, S - 1)
        mb = (sl.r * S + ss) * cfg.msg_words(1) + cfg.state_word
        self.n = k.select(act, _i(k, io.load(cfg.msg(1), mb + X_NLIST, mask=act)), 0)
        self.base = (sl.r * S + ss) * cfg.max_slice_keys()
        self.first = [self.group(i) for i in range(TAIL_LIST_AHEAD)]
        self.lead = act & self.u.eq(0)
        zero = k.const(0, i32)
        for name in ("fin_ab", "fin_gt", "fin_eq"):
            k.store(lds[name], ss, zero, mask=self.lead)

    def longest(self, k, fin):
        """All waves: the row's longest list (LDS atomic max of the slices' lengths, a CTA
        barrier; here, long after their loads: an atomic on a load's result right after it
        would stall the wave's next loads, the cum sum's, for the whole round trip)."""
        k.atomic("max", fin, FIN_LONGEST, self.n, mask=self.lead, scope="cta")
        _barrier(k)
        return k.load(fin, FIN_LONGEST, i32)

    def entry(self, i):
        """The first entry of this lane's group i (runtime i or a Python int)."""
        return LOAD_KEYS * (self.u + self.G * i)

    def group(self, i):
        lk = self.cfg.max_slice_keys()
        return self.io.load(self.cfg.list_keys,
                            self.base + self.k.min(self.entry(i), lk - LOAD_KEYS), 4)

    def rounds(self, longest):
        """Groups a lane of the row's longest list reads (uniform: every lane loops as
        long, so a wave's scans in the loop see the whole wave)."""
        return (longest + (LOAD_KEYS * self.G - 1)) / (LOAD_KEYS * self.G)

    def batches(self, longest, fn):
        """fn([(key4, valid4)] * TAIL_LIST_AHEAD, slice) for every batch of this lane's groups
        of the row's lists: the loaded one first, then the rest from memory, a batch's loads
        all issued before it is used."""
        k = self.k
        fn([(key4, self.valid(i)) for i, key4 in enumerate(self.first)], self.s)
        for i0 in k.range(TAIL_LIST_AHEAD, self.rounds(longest), TAIL_LIST_AHEAD):
            keys = [self.group(i0 + i) for i in range(TAIL_LIST_AHEAD)]
            fn([(key4, self.valid(i0 + i)) for i, key4 in enumerate(keys)], self.s)

    def each(self, longest, fn):
        """fn(key4, valid4, slice) for every group of the row's lists, from memory."""
        for i in self.k.range(0, self.rounds(longest)):
            fn(self.group(i), self.valid(i), self.s)

    def valid(self, i):
        j = self.entry(i)
        return self.k.vec(j, j + 1, j + 2, j + 3) < self.n


class TailFinish:
    """SelectPass's tail finish: the lists' keys loaded under the exchange
    (`_tail_prefetch`), then the row's candidates gathered, ranked (or resolved by local
    histogram passes) and this slice placed and emitted (`_tail_finish`)."""

    # 1: rank up to a CTA's threads of candidates (a lane each); 0: always the histogram
    # passes (--tune sel_out.tail_rank=0)
    tail_rank = 1

    def _tail_prefetch(self, k, io, sl, lds):
        """All waves, once message 1 is in (before its cum sum): this lane's share of the
        row's lists, loaded before the decision that says which of their keys are left."""
        sl.tail = _Lists(k, io, self.cfg, sl, lds)

    def _tail_finish(self, k, io, sl, lds):
        """All waves, after the decision on message 1 left the row undecided (LDS state:
        prefix Q of d bits, `need`; fin: the row's candidates FIN_N, the keys with that
        prefix, and its longest list). One pass over the lists (the loaded groups first)
        counts each slice's keys above the prefix and gathers the candidates into LDS (key,
        slice; at most TAIL_FINISH_LDS). Up to a CTA's threads of them are ranked by key (a
        lane each against all: the threshold T is the least of those fewer than `need`
        others exceed); more take LDS histogram passes over the plan's remaining digits
        (decided as the rounds decide, on the same counts), read from the lists again past
        TAIL_FINISH_LDS. Then each slice's candidates above and at the final prefix, this
        slice's place among the row's, and its emit: the rounds' outputs bit for bit."""
        c = self.cfg
        S, L, T = c.max_slices, k.L, k.W * k.L
        F = _config.TAIL_FINISH_LDS
        fin, above = lds["fin"], lds["fin_ab"]
        gt_n, eq_n = lds["fin_gt"], lds["fin_eq"]
        fkey, fslice = lds["fin_key"], lds["fin_slice"]
        t = k.thread_id()
        lists = sl.tail
        cyc = CycleTally(k, io.env, TAIL_TALLIES)  # (a timeline kernel's accounts only)
        nc = k.load(fin, FIN_N, i32)
        most = lists.longest(k, fin)
        fits = nc <= F
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)

        def gather(batch, s2):
            """A batch's keys above the prefix counted into their slice's word, and its
            candidates appended to LDS: a lane's count, the wave's prefix of them and one
            LDS atomic a wave for the wave's room, then predicated stores (no branch a key:
            a wave holds a few candidates at most)."""
            pres = [(_prefix(k, key4, d), valid4) for key4, valid4 in batch]
            hi = [k.cast(valid4 & (pre > Q), i32) for pre, valid4 in pres]
            ab = hi[0]
            for h in hi[1:]:
                ab = ab + h
            ab = k.extract(ab, 0) + k.extract(ab, 1) + k.extract(ab, 2) + k.extract(ab, 3)
            k.atomic("add", above, k.min(s2, S - 1), ab, mask=ab.ne(0), scope="cta")
            with k.if_(fits):
                flags = [k.cast(k.extract(valid4 & pre.eq(Q), e), i32)
                         for pre, valid4 in pres for e in range(LOAD_KEYS)]
                own = flags[0]
                for f in flags[1:]:
                    own = own + f
                incl = _scan(k, own)
                tot = _last(k, incl)
                with k.if_(tot.ne(0)):
                    first = k.atomic("add", fin, FIN_COUNT, tot, mask=k.lane_id().eq(0),
                                     scope="cta")
                    at = k.readfirstlane(k.shuffle(first, 0)) + incl - own
                    for g, (key4, _) in enumerate(batch):
                        for e in range(LOAD_KEYS):
                            f = flags[g * LOAD_KEYS + e]
                            m = f.ne(0)
                            i = k.min(at, F - 1)  # < nc <= F where m
                            k.store(fkey, i, k.extract(key4, e), mask=m)
                            k.store(fslice, i, s2, mask=m)
                            at = at + f
        lists.batches(most, gather)
        with k.if_(fits):
            for i in range((TAIL_RANK_GROUP + T - 1) // T):  # key 0 past the last: never
                j = t + i * T  # above nor equal to a candidate (none is key 0)
                k.store(fkey, k.min(nc, F) + k.min(j, TAIL_RANK_GROUP - 1), k.const(0, u32),
                        mask=j < TAIL_RANK_GROUP)
        _barrier(k)
        cyc.mark("gather")

        def each(fn):
            """fn(key, slice, mask) on every candidate: from LDS, or from the lists."""
            with k.if_else(fits) as (held, reread):
                with held:
                    for i0 in k.range(0, nc, T):
                        i = i0 + t
                        ii = k.min(i, F - 1)
                        fn(k.load(fkey, ii, u32), k.load(fslice, ii, i32), i < nc)
                with reread:
                    def one(key4, valid4, s2):
                        cand = valid4 & _prefix(k, key4, d).eq(Q)
                        for e in range(LOAD_KEYS):
                            fn(k.extract(key4, e), s2, k.extract(cand, e))
                    lists.each(most, one)

        need = st.i(X_NEED)
        rank_max = min(T, _config.TAIL_RANK_MAX) if self._count_tunable("tail_rank", 0) else 0
        with k.if_else(fits & (nc <= rank_max)) as (ranked, passes):
            with ranked:  # lane i: candidate i's rank by key among them (LDS broadcasts)
                m = t < nc
                key = k.load(fkey, k.min(t, F - 1), u32)
                with k.if_(k.wave_id() * L < nc):  # (a wave holding a candidate)
                    accs = [k.lane_var(0, i32) for _ in range(TAIL_RANK_CHAINS)]
                    for j0 in k.range(0, nc, TAIL_RANK_GROUP):
                        vs = [k.load(fkey, j0 + LOAD_KEYS * g, u32, LOAD_KEYS)
                              for g in range(TAIL_RANK_GROUP // LOAD_KEYS)]
                        for g, v in enumerate(vs):
                            for e in range(LOAD_KEYS):
                                a = accs[(g * LOAD_KEYS + e) % TAIL_RANK_CHAINS]
                                a.set(a.get() + k.cast(k.extract(v, e) > key, i32))
                    gt = accs[0].get()
                    for a in accs[1:]:
                        gt = gt + a.get()
                    # the threshold T: the least of the candidates fewer than `need` others
                    # exceed (the need-th largest: 1 <= need <= nc)
                    k.atomic("min", fin, FIN_T, key, mask=m & (gt < need), scope="cta")
                _barrier(k)
                T_key = k.load(fin, FIN_T, u32)
                k.atomic("add", fin, FIN_T_ABOVE, k.const(1, i32), mask=m & (key > T_key),
                         scope="cta")
                _barrier(k)
                with _wave0(k):  # final at all 32 bits: the keys above T, the first ties
                    stp = lds["state"]
                    k.store(stp, X_Q, T_key)
                    k.store(stp, X_D, k.const(32, u32))
                    k.store(stp, X_NEED, _u(k, need - k.load(fin, FIN_T_ABOVE, i32)))
                    k.store(stp, X_DONE, k.const(1, u32))
            with passes:
                self._tail_passes(k, lds, each)
        _barrier(k)
        cyc.mark("rank")
        st = _State.load(k, lds["state"], 0)
        Qf, df = st[X_Q], st.i(X_D)

        def tally(key, s2, m):
            pre = _prefix(k, key, df)
            k.count(gt_n, s2, m & (pre > Qf))
            k.count(eq_n, s2, m & pre.eq(Qf))
        each(tally)
        _barrier(k)
        with _wave0(k):
            def counts(s2, act, mb):  # ties at the final prefix, and the keys above it
                ss = k.min(s2, S - 1)
                eq = k.select(act, k.load(eq_n, ss, i32), 0)
                ab = k.select(act, k.load(above, ss, i32) + k.load(gt_n, ss, i32), 0)
                return lambda: (eq, ab)
            self._place(k, io, sl, lds, st.i(X_NEED), counts)
        _barrier(k)
        cyc.mark("place")
        self._emit(k, io, sl, lds)
        _barrier(k)  # (every wave's emit, for its account)
        cyc.mark("emit")
        cyc.flush()

    def _tail_passes(self, k, lds, each):
        """The plan's remaining digits over the candidates, one LDS histogram pass each
        (wave 0 deciding on it as a round would on the summed messages)."""
        c = self.cfg
        T = k.W * k.L
        t = k.thread_id()
        hist = lds["fin_hist"]
        for q2 in range(c.passes, len(c.digits)):
            st = _State.load(k, lds["state"], 0)
            with k.if_(~st.done):
                B = c.bins(q2)
                for i in range((B + T - 1) // T):
                    idx = t + i * T
                    k.store(hist, k.min(idx, B - 1), k.const(0, u32), mask=idx < B)
                k.store(lds["fin_thr"], 0, k.const(-1, i32), mask=t.eq(0))  # (take all)
                _barrier(k)
                Q, d = st[X_Q], st.i(X_D)
                sh_lo = k.cast(32 - d - c.digits[q2], u32)

                def count(key, s2, m, Q=Q, d=d, sh_lo=sh_lo, B=B):
                    k.count(hist, _i(k, (key >> sh_lo) & (B - 1)),
                            m & _prefix(k, key, d).eq(Q))
                each(count)
                _barrier(k)
                _cta_suffix_sums(k, hist, B, lambda bb, v, m: k.store(hist, bb, v, mask=m),
                                 lds["fin_waves"])
                _barrier(k)
                _cta_threshold(k, hist, B, st.i(X_NEED), lds["fin_thr"])
                _barrier(k)
                with _wave0(k):
                    takeall, b2, _, gb, ga = _read_threshold(k, hist, B, lds["fin_thr"])
                    new, _ = self._advance(k, st, q2, takeall, b2, gb, ga)
                    new.store_lds(lds["state"])
                _barrier(k)
