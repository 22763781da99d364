"""SelectPass's bucketed finish (SelectConfig.bucket_finish; the package doc's "Bucketed
finish"): sel_h1 writes its candidates bucketed by their second digit, and sel_out, deciding
on message 1, finishes the row from the one bucket every slice holds at the threshold."""
from __future__ import annotations

from monokernel.types import i32, u32

from .config import (BUCKET_FINISH_LDS, BUCKET_UNROLL, FIN_B, FIN_HAS_HI, LOAD_KEYS, X_ABOVE,
                     X_D, X_NEED, X_Q)
from .lanes import (_State, _barrier, _i, _last, _prefix, _region_loader, _scan, _suffix_sums,
                    _threshold, _wave0)


class BucketFinish:
    """SelectPass's bucketed finish: sel_h1's counting sort of its candidates
    (`_bucket_list`) and sel_out's finish from the row's threshold buckets (`_bucket_finish`)."""

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
        with _wave0(k):
            def put(bb, cum, m):  # bucket bb starts after the candidates of higher digits
                k.store(at, bb, cum - k.load(hist, bb, u32, mask=m), mask=m)
            _suffix_sums(k, hist, B, put)
        _barrier(k)
        base = sl.list_base()
        lk = c.max_slice_keys()
        load_key = _region_loader(io, c.list_keys, base)
        sh_lo = k.cast(32 - d - c.digits[q], u32)
        U = BUCKET_UNROLL
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
    def _bucket_finish(self, k, io, sl, lds):
        """All waves, after the decision on message 1 left the row undecided (LDS state:
        prefix Q of d bits, `need`; fin: the threshold digit b): the row's candidates are
        bucket b of every slice's bucketed list (cum_s[b] - cum_s[b + 1] keys from cum_s[b +
        1], both in message 1). Gather them into LDS (at most BUCKET_FINISH_LDS; a row with
        more reads them from the buckets again in every pass), resolve the plan's remaining
        digits as the rounds would (LDS histogram passes, wave 0 deciding each on the same
        counts the exchanged messages would sum), count each slice's candidates above and
        at the final prefix, place this slice among the row's and emit it: the rounds'
        outputs bit for bit."""
        c = self.cfg
        S, L, T, F = c.max_slices, k.L, k.W * k.L, BUCKET_FINISH_LDS
        p = self.q - 1
        mw, msg, Bp = c.msg_words(p), c.msg(p), c.bins(p)
        fin, off, start, above = lds["fin"], lds["fin_off"], lds["fin_start"], lds["fin_ab"]
        gt_n, eq_n = lds["fin_gt"], lds["fin_eq"]
        fkey, fslice = lds["fin_key"], lds["fin_slice"]
        lk = c.max_slice_keys()
        zero = k.const(0, i32)
        with _wave0(k):  # the directory of the row's threshold buckets
            b = k.load(fin, FIN_B, i32)
            use_hi = k.load(fin, FIN_HAS_HI, i32).ne(0)
            hi_i = k.min(b + 1, Bp - 1)
            carry = k.uniform_var(0, i32)
            for grp in range((S + L - 1) // L):
                s2 = grp * L + k.lane_id()
                act = s2 < sl.sc
                ss = k.min(s2, S - 1)
                mb = (sl.r * S + ss) * mw
                c_lo = k.select(act, _i(k, io.load(msg, mb + b, mask=act)), 0)
                c_hi = k.select(act & use_hi, _i(k, io.load(msg, mb + hi_i, mask=act & use_hi)),
                                0)
                ab0 = k.select(act, _i(k, io.load(msg, mb + c.state_word + X_ABOVE, mask=act)),
                               0)
                n = c_lo - c_hi
                incl = _scan(k, n)
                k.store(off, ss, carry.get() + incl - n, mask=act)
                k.store(start, ss, c_hi, mask=act)
                k.store(above, ss, ab0 + c_hi, mask=act)  # keys above the 15-bit prefix
                k.store(gt_n, ss, zero, mask=act)
                k.store(eq_n, ss, zero, mask=act)
                carry.set(carry.get() + _last(k, incl))
            k.store(off, S, carry.get())
        _barrier(k)
        nc = k.load(off, S, i32)
        fits = nc <= F
        t = k.thread_id()
        U = BUCKET_UNROLL
        bucket_keys = c.list_bucket_keys

        def locate(i):
            """Candidate i's slice (the last one whose bucket starts at or before i: an
            empty bucket starts where the next one does) and its entry in the region."""
            s = k.const(0, i32)
            step = 1 << max(0, (S - 1).bit_length() - 1) if S > 1 else 0
            while step:
                cand = s + step
                inside = (cand < sl.sc) & (k.load(off, k.min(cand, S - 1), i32) <= i)
                s = k.select(inside, cand, s)
                step //= 2
            j = i - k.load(off, s, i32) + k.load(start, s, i32)
            return s, (sl.r * S + s) * lk + k.min(k.max(j, 0), lk - 1)

        def from_buckets(i0):  # U rounds of T candidates, all loads issued first
            got = []
            for u in range(U):
                i = i0 + u * T + t
                m = i < nc
                s2, at = locate(k.min(i, k.max(nc - 1, 0)))
                got.append((io.load(bucket_keys, at, mask=m), s2, m))
            return got

        with k.if_(fits):  # the gather
            for i0 in k.range(0, nc, T * U):
                for u, (key, s2, m) in enumerate(from_buckets(i0)):
                    i = k.min(i0 + u * T + t, F - 1)
                    k.store(fkey, i, key, mask=m)
                    k.store(fslice, i, s2, mask=m)
        _barrier(k)

        def each(fn):
            """fn(key, slice, mask) on every candidate: from LDS, or from the buckets."""
            with k.if_else(fits) as (held, reread):
                with held:
                    for i0 in k.range(0, nc, T):
                        i = i0 + t
                        ii = k.min(i, F - 1)
                        fn(k.load(fkey, ii, u32), k.load(fslice, ii, i32), i < nc)
                with reread:
                    for i0 in k.range(0, nc, T * U):
                        for key, s2, m in from_buckets(i0):
                            fn(key, s2, m)

        hist = lds["fin_hist"]
        for q2 in range(c.passes, len(c.digits)):  # the plan's remaining digits, locally
            st = _State.load(k, lds["state"], 0)
            with k.if_(~st.done):
                B = c.bins(q2)
                for i in range((B + T - 1) // T):
                    idx = t + i * T
                    k.store(hist, k.min(idx, B - 1), k.const(0, u32), mask=idx < B)
                _barrier(k)
                Q, d = st[X_Q], st.i(X_D)
                sh_lo = k.cast(32 - d - c.digits[q2], u32)

                def count(key, s2, m, Q=Q, d=d, sh_lo=sh_lo, B=B):
                    k.count(hist, _i(k, (key >> sh_lo) & (B - 1)),
                            m & _prefix(k, key, d).eq(Q))
                each(count)
                _barrier(k)
                with _wave0(k):
                    _suffix_sums(k, hist, B, lambda bb, v, m: k.store(hist, bb, v, mask=m))
                    k.wave_sync()  # the lanes read bins other lanes summed
                    takeall, b2, _, gb, ga = _threshold(k, hist, B, st.i(X_NEED))
                    new, _ = self._advance(k, st, q2, takeall, b2, gb, ga)
                    new.store_lds(lds["state"])
                _barrier(k)
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)

        def tally(key, s2, m):
            pre = _prefix(k, key, d)
            k.count(gt_n, s2, m & (pre > Q))
            k.count(eq_n, s2, m & pre.eq(Q))
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
        self._emit(k, io, sl, lds)
