"""SelectPass's row finish (SelectConfig.finish_max; the package doc's "Row finish")."""
from __future__ import annotations

from monokernel.types import i32, i64, u32

from ..cycles import CycleTally
from .config import (FINISH_TALLIES, FINISH_UNROLL, FIN_B, FIN_COUNT, FIN_HAS_HI, FIN_T,
                     FIN_T_ABOVE, LOAD_KEYS, X_ABOVE, X_D, X_DEFER, X_DONE, X_EMITTED, X_NEED,
                     X_NLIST, X_Q)
from .lanes import _State, _barrier, _i, _last, _list_entry, _prefix, _scan, _u, _wave0


class RowFinish:
    """SelectPass's row finish (SelectConfig.finish_max; the package doc's "Row finish")."""

    # -- row finish (SelectConfig.finish_max) ---------------------------------------------
    def _finish_row(self, k, io, sl, lds):
        """All waves, after a decision on message q-1 that left at most finish_max keys of
        the row with the prefix found (LDS state: prefix Q of d bits, `need`; fin: the
        threshold digit b): gather those candidates from every slice's list into LDS (key,
        slice; in any order), rank each by key among them (O(n^2) compares, n <= finish_max:
        LDS broadcasts), take as threshold T the key whose candidates span rank `need`, count
        each slice's candidates above and at T, place this slice among the row's and emit it
        (the keys above T and the first ties at T in position order: the exact top-k, so
        the same keys the rounds select at their final prefix); the state is then final at
        32 bits and flagged emitted, so the later rounds pass the row through and sel_out
        writes nothing for it."""
        c = self.cfg
        S, L, T, F = c.max_slices, k.L, k.W * k.L, c.finish_max
        p = self.q - 1
        mw, msg, Bp = c.msg_words(p), c.msg(p), c.bins(p)
        fin, off, length = lds["fin"], lds["fin_off"], lds["fin_len"]
        gt_n, eq_n = lds["fin_gt"], lds["fin_eq"]
        fkey, fslice = lds["fin_key"], lds["fin_slice"]
        zero = k.const(0, i32)
        cyc = CycleTally(k, io.env, FINISH_TALLIES)  # (a timeline kernel's accounts only)
        with _wave0(k):  # the directory of the row's lists (their lengths: message q-1)
            carry = k.uniform_var(0, i32)
            for grp in range((S + L - 1) // L):
                s2 = grp * L + k.lane_id()
                act = s2 < sl.sc
                ss = k.min(s2, S - 1)
                mb = (sl.r * S + ss) * mw + c.state_word
                nl = k.select(act, _i(k, io.load(msg, mb + X_NLIST, mask=act)), 0)
                padded = (nl + 3) & ~3
                incl = _scan(k, padded)
                k.store(off, ss, carry.get() + incl - padded, mask=act)
                k.store(length, ss, nl, mask=act)
                k.store(gt_n, ss, zero, mask=act)
                k.store(eq_n, ss, zero, mask=act)
                carry.set(carry.get() + _last(k, incl))
            k.store(off, S, carry.get())
        _barrier(k)
        nv = k.load(off, S, i32)
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)
        keys_at = self._row_list_keys(k, io, lds)
        t = k.thread_id()
        U = FINISH_UNROLL
        for base in k.range(0, nv, 4 * T * U):
            got = [self._finish_fetch(k, sl, lds, keys_at, base + u * 4 * T + 4 * t, nv)
                   for u in range(U)]
            for key, s2, j, lim in got:
                cand = (k.vec(j, j + 1, j + 2, j + 3) < lim) & _prefix(k, key, d).eq(Q)
                for e in range(4):
                    m = k.extract(cand, e)
                    with k.if_(k.ballot(m).ne(0)):  # candidates are rare: a wave's appends
                        # only where one of its lanes holds one
                        at = k.atomic("add", fin, FIN_COUNT, k.const(1, i32), mask=m,
                                      scope="cta")
                        at = k.min(k.max(at, 0), F - 1)  # < eq_row <= F where m
                        k.store(fkey, at, k.extract(key, e), mask=m)
                        k.store(fslice, at, s2, mask=m)
        _barrier(k)
        cyc.mark("gather")
        n_c = k.load(fin, FIN_COUNT, i32)
        need = st.i(X_NEED)
        for i0 in k.range(0, n_c, T):  # each candidate's rank among the row's, by key
            i = i0 + t
            m = i < n_c
            key = k.load(fkey, k.min(i, F - 1), u32)
            above = k.lane_var(0, i32)
            same = k.lane_var(0, i32)
            for j0 in k.range(0, n_c, LOAD_KEYS):  # (uniform addresses: LDS broadcasts)
                v = k.load(fkey, j0, u32, LOAD_KEYS)
                for e in range(LOAD_KEYS):
                    kj = k.extract(v, e)
                    live = (j0 + e) < n_c
                    above.set(above.get() + k.cast(live & (kj > key), i32))
                    same.set(same.get() + k.cast(live & kj.eq(key), i32))
            # the threshold: the key whose candidates span rank `need` (1 <= need < n_c: the
            # decision was not final); its candidates all write the same two words
            hit = m & (above.get() < need) & (need <= above.get() + same.get())
            k.atomic("max", fin, FIN_T, key, mask=hit, scope="cta")
            k.atomic("max", fin, FIN_T_ABOVE, above.get(), mask=hit, scope="cta")
        _barrier(k)
        cyc.mark("rank")
        T_key = k.load(fin, FIN_T, u32)
        for i0 in k.range(0, n_c, T):  # each slice's candidates above and at the threshold
            i = i0 + t
            m = i < n_c
            key = k.load(fkey, k.min(i, F - 1), u32)
            s2 = k.load(fslice, k.min(i, F - 1), i32)
            k.count(gt_n, s2, m & (key > T_key))
            k.count(eq_n, s2, m & key.eq(T_key))
        _barrier(k)
        with _wave0(k):
            b = k.load(fin, FIN_B, i32)
            use_hi = k.load(fin, FIN_HAS_HI, i32).ne(0)
            hi_i = k.min(b + 1, Bp - 1)

            def counts(s2, act, mb):  # above the stage's prefix (its message), then the
                # candidates above and at the final one
                ss = k.min(s2, S - 1)
                c_hi = _i(k, io.load(msg, mb + hi_i, mask=act & use_hi))
                ab0 = _i(k, io.load(msg, mb + c.state_word + X_ABOVE, mask=act))
                c_hi = k.select(act & use_hi, c_hi, 0)
                ab0 = k.select(act, ab0, 0)
                gt = k.select(act, k.load(gt_n, ss, i32), 0)
                eq = k.select(act, k.load(eq_n, ss, i32), 0)
                return lambda: (eq, ab0 + c_hi + gt)
            need_t = need - k.load(fin, FIN_T_ABOVE, i32)  # the ties at T still needed
            self._place(k, io, sl, lds, need_t, counts)
            stp = lds["state"]
            k.store(stp, X_Q, T_key)  # final at all 32 bits: the keys above T, the first
            k.store(stp, X_D, k.const(32, u32))  # need_t of its ties (the same keys the
            k.store(stp, X_NEED, _u(k, need_t))  # rounds take, at their final prefix)
            k.store(stp, X_DONE, k.const(1, u32))
            k.store(stp, X_EMITTED, k.const(1, u32))
        _barrier(k)
        cyc.mark("place")
        self._emit(k, io, sl, lds)
        _barrier(k)  # every wave has read the state and the directory before the next job
        cyc.mark("emit")
        cyc.flush()

    def _row_list_keys(self, k, io, lds):
        """keys_at(i): 4 keys of the list region this pass reads from entry i (i counted from
        the region's start, any slice of the row; the region the row's X_DEFER names with
        lean_lists past sel_h2, as `_input_list`)."""
        if not self._reads_either:
            name = self.list_in[0]
            return lambda i: io.load(name, i, 4)
        defer = _State.load(k, lds["state"], 0)[X_DEFER].ne(0)
        second, first = self.list_in[0], self.first_list[0]
        at = k.select(defer, k.const(io.arena[second].data_offset, i64),
                      k.const(io.arena[first].data_offset, i64))
        ptr = k.ptr_add(io.env.arena, at)
        return lambda i: k.load(ptr, i, u32, 4)

    def _finish_fetch(self, k, sl, lds, keys_at, i, nv):
        """Entries i..i+3 (i a multiple of 4, per lane) of the row's lists laid end to end in
        slice order, each padded to whole 4-key groups (`_solo_fetch`'s directory search):
        (keys, slice, j, lim: entry e is valid where j + e < lim). Unmasked loads at a
        position clamped into the slice's list room: entries past nv are read, never kept."""
        s, j, lim, at = _list_entry(k, self.cfg, sl, lds["fin_off"], lds["fin_len"], i, nv)
        return keys_at(at), s, j, lim
