"""SelectPass's output: a slice's selected keys written at their offsets, the row's
    padding and diagnostic row."""
from __future__ import annotations

from monokernel.types import i32

from .config import (DIAG_WORDS, PAGE, PAGE_SHIFT, X_BASE, X_D, X_NANS, X_NEED, X_NLIST, X_Q,
                     X_TIEBASE, X_TOTAL, X_UNSELS)
from .lanes import _State, _last, _prefix, _u, _wave0


class Emit:
    """SelectPass's output: a slice's selected keys written at their offsets, the row's
    padding and diagnostic row."""

    # -- sel_out: emit ----------------------------------------------------------------------
    def _emit(self, k, io, sl, lds):
        """Write the slice's selected keys (the list's keys above the final prefix, and its
        share of the ties, its first ones) at their output offsets; slice 0 also the padding
        and the diagnostic row."""
        c = self.cfg
        st = _State.load(k, lds["state"], 0)
        ok = io.env.cta_ok()
        nl = st.i(X_NLIST)
        load_key, load_pos = self._input_list(k, io, sl, lds)

        def fetch(i):
            m = i < nl
            return load_key(i, mask=m), load_pos(i, mask=m), i, nl  # (a list holds no key 0)
        with k.if_(nl > 0):
            self._emit_entries(k, io, sl, lds, st, ok, nl, fetch, st.i(X_BASE),
                               st.i(X_TIEBASE), prefetch=c.prefetch)
        with k.if_(sl.s.eq(0)):
            self._pad_and_diag(k, io, sl, ok, st.i(X_TOTAL), st[X_NANS], st[X_UNSELS])

    def _emit_entries(self, k, io, sl, lds, st, ok, n, fetch, base, tieb, prefetch=False):
        """Write the selected ones of n entries, in position order, at output offsets from
        `base` on: the keys above the final prefix, and the ties past the `tieb` taken
        before these entries, up to `need`. fetch(i): the keys and positions of entries
        i..i+3 (a lane's 4 consecutive ones) and (j, lim): entry e is valid where j + e <
        lim, compared only when used (4 masks kept live across the next round's loads would
        be 4 SGPR pairs on AMD). Rounds of 4 * T entries; with `prefetch`, a round's loads
        are issued a round early (fetch must then accept any i: entries past n are read,
        never taken). Returns the number written (uniform i32)."""
        c = self.cfg
        nm = c.names
        K = c.topk
        out = getattr(io.args, nm.out)
        bt = getattr(io.args, nm.block_table)
        Q, d = st[X_Q], st.i(X_D)
        need = st.i(X_NEED)
        t = k.thread_id()
        T = k.W * k.L
        w = k.wave_id()
        run_eq = k.uniform_var(0, i32)
        run_sel = k.uniform_var(0, i32)
        if prefetch:
            ahead = [k.lane_var(x) for x in fetch(4 * t)]
        for pos0 in k.range(0, n, 4 * T):
            if prefetch:
                got = [v.get() for v in ahead]
                for v, x in zip(ahead, fetch(pos0 + 4 * T + 4 * t)):
                    v.set(x)
            else:
                got = fetch(pos0 + 4 * t)
            key, pos, j, lim = got
            nz = k.vec(j, j + 1, j + 2, j + 3) < lim
            pre = _prefix(k, key, d)
            ab_v = k.cast(nz & (pre > Q), i32)  # 0/1 integers: no masks kept live
            eq_v = k.cast(nz & pre.eq(Q), i32)
            ab = [k.extract(ab_v, e) for e in range(4)]
            eq = [k.extract(eq_v, e) for e in range(4)]
            # keys of lower lanes first (a lane's 4 keys are consecutive positions)
            own = eq[0] + eq[1] + eq[2] + eq[3] + ((ab[0] + ab[1] + ab[2] + ab[3]) << 16)
            excl = sum((k.prefix_count(eq[e].ne(0)) for e in range(1, 4)),
                       k.prefix_count(eq[0].ne(0)))
            excl = excl + (sum((k.prefix_count(ab[e].ne(0)) for e in range(1, 4)),
                               k.prefix_count(ab[0].ne(0))) << 16)
            tot = _last(k, excl + own)
            excl_eq = excl & 0xFFFF
            excl_ab = excl >> 16
            w_eq, w_ab = tot & 0xFFFF, tot >> 16
            rem0 = need - tieb - run_eq.get()  # ties still to take before this round
            pages = None
            if prefetch:  # every entry's page, before the barrier (entries past the end
                # hold any position: the index is clamped into the row's table)
                pages = [k.load(bt, sl.r * c.bt_width + k.max(k.min(
                    k.extract(pos, e) >> PAGE_SHIFT, c.bt_width - 1), 0), i32) for e in range(4)]
            if k.W > 1:  # this wave's offsets among the round's waves
                em = lds["emit"]
                par = (pos0 / (4 * T)) & 1
                k.store(em, (par * k.W + w) * 2, w_eq)
                k.store(em, (par * k.W + w) * 2 + 1, w_ab)
                k.barrier()
                off_eq = k.uniform_var(0, i32)
                off_ab = k.uniform_var(0, i32)
                for w2 in k.range(0, w):
                    off_eq.set(off_eq.get() + k.load(em, (par * k.W + w2) * 2, i32))
                    off_ab.set(off_ab.get() + k.load(em, (par * k.W + w2) * 2 + 1, i32))
                weq, wab = off_eq.get(), off_ab.get()
                round_eq = round_ab = None
                for w2 in range(k.W):
                    e2 = k.load(em, (par * k.W + w2) * 2, i32, 2)
                    round_eq = k.extract(e2, 0) if round_eq is None else \
                        round_eq + k.extract(e2, 0)
                    round_ab = k.extract(e2, 1) if round_ab is None else \
                        round_ab + k.extract(e2, 1)
            else:
                weq, wab = k.const(0, i32), k.const(0, i32)
                round_eq, round_ab = w_eq, w_ab
            rem_w = rem0 - weq  # ties still to take before this wave's first tie
            wave_sel_off = wab + k.min(k.max(rem0, 0), weq)
            lane_rem = rem_w - excl_eq
            lane_off = base + run_sel.get() + wave_sel_off + excl_ab + \
                k.min(k.max(rem_w, 0), excl_eq)
            ties_before = None
            sel_before = None
            for e in range(4):
                rank_ok = (lane_rem if ties_before is None else lane_rem - ties_before) > 0
                take = ab[e].ne(0) | (eq[e].ne(0) & rank_ok)
                at = lane_off if sel_before is None else lane_off + sel_before
                p = k.extract(pos, e)
                page = pages[e] if pages is not None else \
                    k.load(bt, sl.r * c.bt_width + k.min(p >> PAGE_SHIFT, c.bt_width - 1), i32,
                           mask=take)
                slot = page * PAGE + (p & (PAGE - 1))
                k.store(out, sl.r * K + k.min(at, K - 1), slot, mask=take & ok)
                tk = ab[e] + eq[e] * k.cast(rank_ok, i32)
                ties_before = eq[e] if ties_before is None else ties_before + eq[e]
                sel_before = tk if sel_before is None else sel_before + tk
            run_sel.set(run_sel.get() + round_ab + k.min(k.max(rem0, 0), round_eq))
            run_eq.set(run_eq.get() + round_eq)
        return run_sel.get()

    def _pad_and_diag(self, k, io, sl, ok, total, nans, unsel):
        """The row's padding (-1 from `total` selected keys to K) and its diagnostic row."""
        c = self.cfg
        nm = c.names
        K = c.topk
        out = getattr(io.args, nm.out)
        t = k.thread_id()
        T = k.W * k.L
        for i0 in k.range(0, K, T):
            i = i0 + t
            k.store(out, sl.r * K + k.min(i, K - 1), k.const(-1, i32),
                    mask=(i < K) & (i >= total) & ok)
        with _wave0(k):
            diag = k.vec(nans, _u(k, total), unsel, _u(k, sl.n))
            k.store(getattr(io.args, nm.diag), sl.r * DIAG_WORDS, diag, mask=ok)
