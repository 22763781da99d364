"""SelectPass's bucketed tail finish (SelectConfig.tail_finish; the package doc's "Tail
finish"): sel_h1 writes its candidates bucketed by their second digit, and sel_out, deciding
on message 1, finishes the row from the one bucket every slice holds at the threshold."""
from __future__ import annotations

from monokernel.types import i32, u32

from ..cycles import CycleTally

from .config import (FIN_B, FIN_COUNT, FIN_HAS_HI, FIN_N, FIN_T, FIN_T_ABOVE, LOAD_KEYS,
                     TAIL_AHEAD, TAIL_BUCKET_UNROLL, TAIL_RANK_CHAINS, TAIL_RANK_GROUP,
                     TAIL_TALLIES, X_ABOVE, X_D, X_DONE, X_NEED, X_Q)
from . import config as _config
from .lanes import (_State, _barrier, _cta_suffix_sums, _cta_threshold, _i, _last, _prefix,
                    _read_threshold, _region_loader, _scan, _u, _wave0)


class _Buckets:
    """A lane's share of its row's threshold buckets: G = T / S consecutive lanes read one
    slice's bucket b (message 1: cum[b] - cum[b + 1] keys from entry cum[b + 1] of its
    bucketed list), lane u its 16-byte groups u, u + G, .. from the bucket's start rounded
    down to a group (a group's entries outside the bucket are read, never used). Lane u =
    0 of a slice puts the slice's keys above the 15-bit prefix (X_ABOVE + cum[b + 1]) and
    zeroes its counts."""

    def __init__(self, k, io, cfg, sl, lds, b, use_hi):
        S, T = cfg.max_slices, k.W * k.L
        if S > T:
            raise ValueError(f"tail_finish: {S} slices a row exceed the CTA's {T} threads "
                             "(a slice's bucket needs a lane at least)")
        self.k, self.io, self.cfg = k, io, cfg
        self.G = G = T // S
        t = k.thread_id()
        self.s = t / G
        self.u = t - self.s * G
        act = self.s < sl.sc
        ss = k.min(self.s, S - 1)
        Bp = cfg.bins(1)
        mb = (sl.r * S + ss) * cfg.msg_words(1)
        c_lo = k.select(act, _i(k, io.load(cfg.msg(1), mb + b, mask=act)), 0)
        hi = act & use_hi
        c_hi = k.select(hi, _i(k, io.load(cfg.msg(1), mb + k.min(b + 1, Bp - 1), mask=hi)), 0)
        ab0 = k.select(act, _i(k, io.load(cfg.msg(1), mb + cfg.state_word + X_ABOVE,
                                          mask=act)), 0)
        self.lo, self.hi = c_hi, c_lo  # the bucket's entries [lo, hi) of the slice's list
        self.first = c_hi & ~(LOAD_KEYS - 1)
        self.base = (sl.r * S + ss) * cfg.max_slice_keys()
        lead = act & self.u.eq(0)
        k.store(lds["fin_ab"], ss, ab0 + c_hi, mask=lead)
        for name in ("fin_gt", "fin_eq"):
            k.store(lds[name], ss, k.const(0, i32), mask=lead)

    def entry(self, i):
        """The first entry of this lane's group i (runtime i or a Python int)."""
        return self.first + LOAD_KEYS * (self.u + self.G * i)

    def group(self, i):
        lk = self.cfg.max_slice_keys()
        return self.io.load(self.cfg.list_bucket_keys,
                            self.base + self.k.min(self.entry(i), lk - LOAD_KEYS), 4)

    def valid(self, i):
        j = self.entry(i)
        v = self.k.vec(j, j + 1, j + 2, j + 3)
        return (v >= self.lo) & (v < self.hi)

    def batches(self, bound, fn):
        """fn([(key4, valid4)] * TAIL_AHEAD, slice) for every batch of this lane's groups of
        its bucket, a batch's loads all issued before it is used; `bound`: at least any
        slice's bucket (uniform, so every lane loops as long)."""
        k = self.k
        per = LOAD_KEYS * self.G * TAIL_AHEAD
        for i0 in k.range(0, (bound + LOAD_KEYS + per - 1) / per * TAIL_AHEAD, TAIL_AHEAD):
            keys = [self.group(i0 + i) for i in range(TAIL_AHEAD)]
            fn([(key4, self.valid(i0 + i)) for i, key4 in enumerate(keys)], self.s)


class TailFinish:
    """SelectPass's bucketed finish: sel_h1's counting sort of its candidates by their second
    digit (`_bucket_list`), and sel_out's finish from the row's threshold buckets
    (`_tail_finish`): gathered, resolved by local histogram passes (or ranked), this slice
    placed and emitted."""

    # 1: rank up to a CTA's threads of candidates (a lane each against all); 0: the
    # histogram passes always. H200 (bench/NOTES.md v27, same call, select_hist 512K x 8):
    # ranked 31.45 against 30.08 us with the passes (--tune sel_out.tail_rank=1)
    tail_rank = 0

    # -- sel_h1: the candidates by their second digit ---------------------------------------
    def _bucket_list(self, k, io, sl, lds, n, Q, d):
        """After sel_h1 counted digit 1 of its candidates into LDS `hist` (the list's first
        n entries with prefix Q of d bits): write those candidates' keys into the slice's
        bucketed list, bucket b (digit b) at cum[b + 1] = #(digit > b), so sel_out finds a
        slice's candidates at any threshold bin as one range its message's cum gives. Order
        within a bucket: LDS atomics' (no positions are kept: the emit walks the list)."""
        c = self.cfg
        q = self.q
        B = c.bins(q)
        T = k.W * k.L
        hist, at = lds["hist"], lds["bucket_at"]
        _barrier(k)  # the counts are in, every wave's list stores before the reads back

        def put(bb, cum, m):  # bucket bb starts after the candidates of higher digits
            k.store(at, bb, cum - k.load(hist, bb, u32, mask=m), mask=m)
        _cta_suffix_sums(k, hist, B, put, lds["bucket_waves"])
        _barrier(k)
        base = sl.list_base()
        lk = c.max_slice_keys()
        load_key = _region_loader(io, c.list_keys, base)
        sh_lo = k.cast(32 - d - c.digits[q], u32)
        U = TAIL_BUCKET_UNROLL
        with k.if_(n > 0):
            for i0 in k.range(0, n, LOAD_KEYS * T * U):
                idx = [i0 + u * LOAD_KEYS * T + LOAD_KEYS * k.thread_id() for u in range(U)]
                keys = [load_key(i, mask=i < n) for i in idx]
                for i, key in zip(idx, keys):
                    cand = (k.vec(i, i + 1, i + 2, i + 3) < n) & _prefix(k, key, d).eq(Q)
                    digit = _i(k, (key >> sh_lo) & (B - 1))
                    for e in range(LOAD_KEYS):
                        m = k.extract(cand, e)
                        slot = k.atomic("add", at, k.extract(digit, e), k.const(1, u32),
                                        mask=m, scope="cta")
                        io.store(c.list_bucket_keys, base + k.min(_i(k, slot), lk - 1),
                                 k.extract(key, e), mask=m)

    # -- sel_out: the row's finish ------------------------------------------------------------
    def _tail_finish(self, k, io, sl, lds):
        """All waves, after the decision on message 1 left the row undecided (LDS state:
        prefix Q of d bits, `need`; fin: the threshold digit b and the row's candidates
        FIN_N, the keys with that prefix: bucket b of every slice). Gather them into LDS
        (key, slice; at most TAIL_FINISH_LDS), resolve the plan's remaining digits by LDS
        histogram passes (decided as the rounds decide, on the same counts; read from the
        buckets again past TAIL_FINISH_LDS), or rank them by key (tail_rank: a lane each
        against all, the threshold T the least of those fewer than `need` others exceed).
        Then each slice's candidates above and at the final prefix, this slice's place among
        the row's, and its emit: the rounds' outputs bit for bit."""
        c = self.cfg
        S, L, T = c.max_slices, k.L, k.W * k.L
        F = _config.TAIL_FINISH_LDS
        fin, above = lds["fin"], lds["fin_ab"]
        gt_n, eq_n = lds["fin_gt"], lds["fin_eq"]
        fkey, fslice = lds["fin_key"], lds["fin_slice"]
        t = k.thread_id()
        cyc = CycleTally(k, io.env, TAIL_TALLIES)  # (a timeline kernel's accounts only)
        nc = k.load(fin, FIN_N, i32)
        fits = nc <= F
        buckets = _Buckets(k, io, c, sl, lds, k.load(fin, FIN_B, i32),
                           k.load(fin, FIN_HAS_HI, i32).ne(0))
        st = _State.load(k, lds["state"], 0)

        def gather(batch, s2):
            """A batch's candidates appended to LDS: a lane's count, the wave's prefix of
            them and one LDS atomic a wave for the wave's room, then predicated stores."""
            flags = [k.cast(k.extract(valid4, e), i32)
                     for _, valid4 in batch for e in range(LOAD_KEYS)]
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
        with k.if_(fits):
            buckets.batches(nc, gather)
            for i in range((TAIL_RANK_GROUP + T - 1) // T):  # key 0 past the last: never
                j = t + i * T  # above nor equal to a candidate (none is key 0)
                k.store(fkey, k.min(nc, F) + k.min(j, TAIL_RANK_GROUP - 1), k.const(0, u32),
                        mask=j < TAIL_RANK_GROUP)
        _barrier(k)
        cyc.mark("gather")

        def each(fn):
            """fn(key, slice, mask) on every candidate: from LDS, or from the buckets."""
            with k.if_else(fits) as (held, reread):
                with held:
                    for i0 in k.range(0, nc, T):
                        i = i0 + t
                        ii = k.min(i, F - 1)
                        fn(k.load(fkey, ii, u32), k.load(fslice, ii, i32), i < nc)
                with reread:
                    def batch(groups, s2):
                        for key4, valid4 in groups:
                            for e in range(LOAD_KEYS):
                                fn(k.extract(key4, e), s2, k.extract(valid4, e))
                    buckets.batches(nc, batch)

        need = st.i(X_NEED)
        rank_max = T if self._count_tunable("tail_rank", 0) else 0  # (a lane a candidate)
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
