"""SelectPass's solo finish (SelectConfig.solo_max_candidates; the package doc's "Solo
    finish")."""
from __future__ import annotations

from monokernel.types import i32, u32

from .config import (RDY_SOLO, SOLO_UNROLL, X_D, X_NAN, X_NANS, X_NEED, X_NLIST, X_Q, X_UNSEL,
                     X_UNSELS)
from .lanes import (_State, _barrier, _list_entry, _i, _last, _prefix, _scan, _suffix_sums,
                    _threshold, _u, _wave0)


class SoloFinish:
    """SelectPass's solo finish (SelectConfig.solo_max_candidates; the package doc's "Solo
    finish")."""

    # -- solo finish (sel_h2, slice 0 of a solo row) ----------------------------------------
    def _row_is_solo(self, k, io, sl, lds):
        """Uniform i1: this job's row leaves the rounds after message 1 (finishes solo, or
        by the tail), from the value of its own slice's rdy1 pair (published by sel_h1, an
        earlier stage, long before: one poll, no fence). Where the job decides on message 1
        either way (`_sees_rdy1`: the tail rows' sel_h2 and sel_out) wave 0 polls every
        slice's pair instead, the flag the same in each, and its decision then takes only
        the acquire (`_consume`): one poll round trip on the path, not two."""
        c = self.cfg
        if c.tail_by_keys:  # (from the row's key count: nothing to poll)
            return c.tail_row(sl.n)
        flag = lds["solo"]
        with _wave0(k):
            if self._sees_rdy1:
                v = k.wave_reduce(self._wait_row_pairs(k, io, sl, c.rdy(1)), "or")
            else:
                v = io.wait(c.rdy(1), sl.r * c.max_slices + sl.s)
            k.store(flag, 0, v & RDY_SOLO)
        _barrier(k)
        return k.load(flag, 0, u32).ne(0)

    @property
    def _sees_rdy1(self) -> bool:
        """tail_by_bin: this job polls every slice's rdy1 to learn whether its row is a tail
        (sel_h2, which decides on message 1, and sel_out, whose tail does), so its decision
        on message 1 waits for no pair again (`pairs_seen` of the tail's sel_out)."""
        return self.cfg.tail_by_bin and self.q in (2, self.cfg.passes)

    def _solo_finish(self, k, io, sl, lds):
        """All waves, after the decision on message 1 (LDS `state`): the row's remaining
        passes over every slice's list (LDS histograms, CTA barriers), then the row's whole
        output and diagnostic row, exactly as the exchange rounds would write them."""
        c = self.cfg
        S = c.max_slices
        L = k.L
        mw = c.msg_words(1)
        msg = c.msg(1)
        off, length = lds["solo_off"], lds["solo_len"]
        with _wave0(k):  # the directory of the lists, and the row's NaN counts (message 1)
            carry = k.uniform_var(0, i32)
            nans = k.uniform_var(0, i32)
            unsel = k.uniform_var(0, i32)
            for grp in range((S + L - 1) // L):
                s2 = grp * L + k.lane_id()
                act = s2 < sl.sc
                ss = k.min(s2, S - 1)
                mb = (sl.r * S + ss) * mw + c.state_word
                nl = _i(k, io.load(msg, mb + X_NLIST, mask=act))
                nan = _i(k, io.load(msg, mb + X_NAN, mask=act))
                uns = _i(k, io.load(msg, mb + X_UNSEL, mask=act))
                padded = (nl + 3) & ~3
                incl = _scan(k, padded)
                k.store(off, ss, carry.get() + incl - padded, mask=act)
                k.store(length, ss, nl, mask=act)
                carry.set(carry.get() + _last(k, incl))
                nans.set(nans.get() + k.wave_sum(nan))
                unsel.set(unsel.get() + k.wave_sum(uns))
            k.store(off, S, carry.get())
            stp = lds["state"]
            k.store(stp, X_NANS, _u(k, nans.get()))
            k.store(stp, X_UNSELS, _u(k, unsel.get()))
        _barrier(k)
        nv = k.load(off, S, i32)
        for q in range(2, c.passes):
            st = _State.load(k, lds["state"], 0)
            with k.if_(~st.done):
                self._solo_pass(k, io, sl, lds, q, st, nv)
        st = _State.load(k, lds["state"], 0)
        ok = io.env.cta_ok()

        def fetch(i):
            return self._solo_fetch(k, io, sl, lds, i, nv)
        total = self._emit_entries(k, io, sl, lds, st, ok, nv, fetch, k.const(0, i32),
                                   k.const(0, i32), prefetch=True)
        self._pad_and_diag(k, io, sl, ok, total, st[X_NANS], st[X_UNSELS])

    def _solo_pass(self, k, io, sl, lds, q, st, nv):
        """Digit q of the row's candidates (list keys with the prefix found so far) into
        LDS, then wave 0 decides on it as sel_h(q+1) would on message q."""
        c = self.cfg
        B = c.bins(q)
        hist = lds["solo_hist"]
        t = k.thread_id()
        T = k.W * k.L
        U = SOLO_UNROLL
        for i in range((B + T - 1) // T):
            idx = t + i * T
            k.store(hist, k.min(idx, B - 1), k.const(0, u32), mask=idx < B)
        _barrier(k)
        Q, d = st[X_Q], st.i(X_D)
        for base in k.range(0, nv, 4 * T * U):
            got = [self._solo_fetch(k, io, sl, lds, base + u * 4 * T + 4 * t, nv, pos=False)
                   for u in range(U)]
            for key, _, j, lim in got:
                valid = k.vec(j, j + 1, j + 2, j + 3) < lim
                self._count_digits(k, hist, key, d, valid & _prefix(k, key, d).eq(Q), q=q)
        _barrier(k)
        with _wave0(k):
            _suffix_sums(k, hist, B, lambda bb, v, m: k.store(hist, bb, v, mask=m))
            takeall, b, _, gb, ga = _threshold(k, hist, B, st.i(X_NEED))
            new, _ = self._advance(k, st, q, takeall, b, gb, ga)
            new.store_lds(lds["state"])
        _barrier(k)

    def _solo_fetch(self, k, io, sl, lds, i, nv, pos=True):
        """Entries i..i+3 (i a multiple of 4, per lane) of the row's lists laid end to end in
        slice order (so in position order), each list padded to whole 4-key groups: (keys,
        positions or None, j, lim: entry e is valid where j + e < lim). The slice is found
        by a binary search of the LDS directory (the last slice starting at or before i;
        empty lists start where the next one does, so it is never one of them). The loads
        are unmasked, at a position clamped into the slice's list room (a mask each would
        be a live SGPR pair on AMD): entries past nv are read, never counted."""
        c = self.cfg
        _, j, lim, at = _list_entry(k, c, sl, lds["solo_off"], lds["solo_len"], i, nv)
        key = io.load(c.list_keys, at, 4)
        p = io.load(c.list_pos, at, 4) if pos else None
        return key, p, j, lim
