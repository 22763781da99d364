"""SelectPass's passes over a slice's keys: the histogram passes (sel_h0's local
    first digit or segment sums, sel_h1's scan of the scores with its list appends, the later
    passes over the lists), the slice copies and prefetches they may take."""
from __future__ import annotations

import contextlib
import functools

from layouts.scores import FIRST_DIGIT_BINS
from monokernel.ir import MBARRIER_BYTES
from monokernel.types import i32, i64, u32

from .config import (LEAN_LANE_KEYS, LEAN_WIDE_KEYS, LIST_UNROLL, LOAD_KEYS, SCORE_PREFETCH_PIECE,
                     X_D, X_DEFER, X_NLIST, X_Q, X_SOLO)
from .lanes import (_State, _barrier, _i, _last, _pos, _prefix, _prefix_floor, _region_loader,
                    _scan, _scan_step, _u, _wave0, ordered_keys)


class ScanPasses:
    """SelectPass's passes over a slice's keys: the histogram passes (sel_h0's local
    first digit or segment sums, sel_h1's scan of the scores with its list appends, the later
    passes over the lists), the slice copies and prefetches they may take."""

    def _prefetch_scores(self, k, io, sl):
        """SelectConfig.l2_prefetch: every thread asks the L2 for pieces t, t + T, ... of the
        slice's scores [lo, hi) (whole pieces: the last one ends at the row's end at most,
        moved back to end there, so it never leaves the row)."""
        c, T = self.cfg, k.W * k.L
        piece = SCORE_PREFETCH_PIECE
        if (c.capacity * 4) % piece:
            raise ValueError(f"{c.capacity} scores a row are not whole {piece}-byte pieces")
        row0 = sl.r * (c.capacity * 4)
        lo, nbytes = sl.lo * 4, (sl.hi - sl.lo) * 4
        pieces = -(-c.max_slice_keys() * 4 // piece)  # the longest slice's, rounded up
        rounds = -(-pieces // T)
        for j in range(rounds):
            off = (k.thread_id() + j * T) * piece
            start = k.min(lo + off, c.capacity * 4 - piece)
            k.prefetch_l2(getattr(io.args, self.scores.name), row0 + start, piece,
                          mask=off < nbytes)

    @property
    def _loads_early(self) -> bool:
        """sel_h1's first score loads go out before its wait (SelectConfig.early_loads): only
        scores from an input buffer, which no stage of the launch writes."""
        return (self.early_loads and self.compacts and self.cfg.prefetch
                and not self.scores.in_region)

    @property
    def _lean(self) -> bool:
        """sel_h1 (and sel_h2 re-listing a deferred row) lists with the lean loop
        (SelectConfig.lean_scan), with the batched appends
        through the lists' bases and the next digit counted from the list, whose stores and
        count the loop replaces."""
        c = self.cfg
        return (self.lean_scan and (self.compacts or self.defers) and c.batched_append
                and self.list_bases and self.count_from_list and not self._scans_lds)

    @property
    def _lean_copies(self) -> bool:
        """... from its slice copied into LDS (SelectConfig.lean_copies): scores from an input
        buffer only (the copies start before the wait for message 0)."""
        return self._lean and self.lean_copies and not self.scores.in_region

    @property
    def _lane_keys(self) -> int:
        """lean_lane_keys, checked."""
        if self.lean_lane_keys not in (LEAN_LANE_KEYS, LEAN_WIDE_KEYS):
            raise ValueError(f"{self.name}: lean_lane_keys = {self.lean_lane_keys!r} must be "
                             f"{LEAN_LANE_KEYS} or {LEAN_WIDE_KEYS}")
        return self.lean_lane_keys

    @property
    def _lean_pieces(self) -> int:
        """A lane's 16-byte loads (or copies) an iteration."""
        return self._lane_keys // LOAD_KEYS

    def _lean_iterations(self, k) -> int:
        """Iterations of the lean scan over the longest slice."""
        return -(-self.cfg.max_slice_keys() // (self._lane_keys * k.W * k.L))

    @property
    def _scans_lds(self) -> bool:
        """sel_h1 scans its slice from LDS (SelectConfig.lds_scan): scores from an input
        buffer only (no stage of the launch writes them, so the copies may start before the
        wait for message 0)."""
        return self.lds_scan and self.compacts and not self.scores.in_region

    def _scan_segments(self) -> int:
        """Segments of the longest slice: the LDS copy's mbarriers."""
        return self.cfg.max_slice_keys() // self.cfg.segment

    def _slice_segments(self, sl):
        """Segments of this slice (the last one partly past hi): its copies."""
        return (sl.hi - sl.lo + (self.cfg.segment - 1)) / self.cfg.segment

    def _copy_slice(self, k, io, sl, lds):
        """Wave 0 sets up one mbarrier a segment, then (after a CTA barrier) starts one bulk
        copy a segment of the slice into lds["scan"] (segments tile the capacity, so no copy
        passes the row's end); the scan waits for each before it reads it (`_scan_scores`),
        and `_release_slice` invalidates them for the CTA's next job."""
        c = self.cfg
        seg_bytes = c.segment * 4
        with _wave0(k):
            for s in range(self._scan_segments()):
                k.mbar_init(k.ptr_add(lds["scan_bars"], s * MBARRIER_BYTES), 1)
        _barrier(k)  # every wave sees the mbarriers set up before any copy completes on one
        segs = self._slice_segments(sl)
        src = getattr(io.args, self.scores.name)
        with _wave0(k):
            for s in k.range(segs):
                bar = k.ptr_add(lds["scan_bars"], s * MBARRIER_BYTES)
                k.mbar_arrive_tx(bar, seg_bytes)
                k.bulk_load_lds(k.ptr_add(lds["scan"], s * seg_bytes), src,
                                (sl.r * c.capacity + sl.lo + s * c.segment) * 4, seg_bytes, bar)

    def _wait_segments(self, k, sl, lds, rel):
        """Wait for the copies of the segments an iteration at slice offset `rel` reads."""
        c = self.cfg
        segs = self._slice_segments(sl)
        first = rel / c.segment
        for j in range(-(-_scan_step(k, self.scan_rounds) // c.segment)):
            s = first + j
            with k.if_(s < segs):
                k.mbar_wait(k.ptr_add(lds["scan_bars"], s * MBARRIER_BYTES), 0)

    def _release_slice(self, k, lds):
        """After every wave's last read of the copies: invalidate the mbarriers."""
        _barrier(k)
        with _wave0(k):
            for s in range(self._scan_segments()):
                k.mbar_inval(k.ptr_add(lds["scan_bars"], s * MBARRIER_BYTES))

    # -- a histogram pass over the slice's keys --------------------------------------------
    def _histogram(self, k, io, sl, lds, first):
        """Count the next digit of the candidate keys into LDS `hist` (sel_h0: all visible
        keys, or the sum of the scoring's segments; sel_h1: the slice's scores, also
        compacting its list and counting NaNs into `cnt`; later passes: the list)."""
        c = self.cfg
        q = self.q
        B = c.bins(q)
        t = k.thread_id()
        T = k.W * k.L
        hist = lds["hist"]
        for i in range((B + T - 1) // T):
            idx = t + i * T
            k.store(hist, k.min(idx, B - 1), k.const(0, u32), mask=idx < B)
        if q == 1:
            with _wave0(k):
                k.store(lds["cnt"], 0, k.vec(k.const(0, u32), 0))
        if "list_at" in lds:
            self._store_list_offsets(k, io, sl, lds)
        _barrier(k)
        if first and self.hist is not None:
            self._sum_segments(k, io, sl, hist)
        elif self.from_list and not self.defers:
            self._scan_list(k, io, sl, lds)
        elif self.from_list:  # sel_h2: the lists of a deferred row from the scores
            st = _State.load(k, lds["state"], 0)
            with k.if_else(st[X_DEFER].ne(0)) as (deferred, listed):
                with deferred:
                    self._scan_scores(k, io, sl, lds, False, nans=False)
                with listed:  # lean_lists: count only, the later passes read sel_h1's list
                    self._scan_list(k, io, sl, lds, copy=not self.cfg.lean_lists)
        elif self.compacts and self.cfg.defers:  # sel_h1: list now or leave it
            st = _State.load(k, lds["state"], 0)
            with k.if_else(st[X_DEFER].ne(0)) as (deferred, listed):
                with deferred:
                    self._scan_scores(k, io, sl, lds, False, append=False)
                with listed:
                    self._scan_scores(k, io, sl, lds, False)
        else:
            self._scan_scores(k, io, sl, lds, first)
        _barrier(k)

    def _store_list_offsets(self, k, io, sl, lds):
        """Wave 0: the byte offsets in the arena of this slice's two lists being written
        (SelectConfig.list_bases), into LDS for the appends to read back: a runtime value,
        so the assembler cannot fold the regions' offsets into every key's address again."""
        lb = sl.list_base_bytes()
        with _wave0(k):
            k.store(lds["list_at"], 0, k.vec(*[lb + io.arena[name].data_offset
                                               for name in self.list_out]))

    def _count_digits(self, k, hist, key, d, cand, q=None):
        """LDS hist[digit q of key (bits d .. d + digits[q] from the top)] += 1 for the
        candidate entries of a 4-vector (q: this stage's pass unless given)."""
        c = self.cfg
        q = self.q if q is None else q
        sh_lo = k.cast(32 - d - c.digits[q], u32)
        digit = (key >> sh_lo) & (c.bins(q) - 1)
        for e in range(4):
            k.count(hist, _i(k, k.extract(digit, e)), k.extract(cand, e),
                    grouped=self.grouped_counts)

    def _scan_scores(self, k, io, sl, lds, first, append=True, nans=True):
        """sel_h0 (local first pass) or sel_h1: one pass over the slice's scores, SCAN_UNROLL
        rounds of 4 keys a lane loaded at once. sel_h1 also appends every selectable key at
        or above the threshold prefix (the candidates and the keys already above) to the
        slice's list, in position order, and stores its length in the state. `append=False`:
        sel_h1 of a deferred row (counts only, list length 0); `nans=False`: sel_h2 building
        a deferred row's list (sel_h1 counted the NaNs)."""
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)
        self.scores.prepare(k, io)
        nan_acc = k.lane_var(0, i32)
        run = k.uniform_var(0, i32)  # list length so far
        gated = self.cfg.rare_specials and not first
        # the next digit counted from the list after the scan (SelectConfig.count_from_list):
        # the list holds every candidate (selectable, prefix == Q) in the slice
        # (sel_h1, and sel_h2 re-reading a deferred row: both write the list they then read)
        later_count = append and not first and (self.compacts or self.defers) and \
            self.count_from_list
        if later_count:  # prefix(key) >= Q and key != 0  <=>  key >= max(Q << (32 - d), 1)
            key_lo = k.max(_prefix_floor(k, Q, d), k.const(1, u32))
        from_lds = self._scans_lds
        counted = False  # the next digit counted already (lean_spans)
        if self._lean and later_count:
            counted = self._lean_scan(k, io, sl, lds, key_lo, run, nan_acc if nans else None)
        else:
            self._scan_body(k, io, sl, lds, first, append, nans, later_count,
                            key_lo if later_count else None, run, nan_acc, gated, Q, d)
        if from_lds:
            self._release_slice(k, lds)
        if first:
            return
        if nans:  # a lane counts <= 512K / 64 keys: no carry between its halves
            acc = nan_acc.get()
            k.atomic("add", lds["cnt"], 0, _u(k, k.wave_sum(acc & 0xFFFF)), scope="cta")
            k.atomic("add", lds["cnt"], 1, _u(k, k.wave_sum(acc >> 16)), scope="cta")
        with _wave0(k):
            k.store(lds["state"], X_NLIST, _u(k, run.get()))
        if later_count and not counted:
            _barrier(k)  # every wave's list stores, before any wave reads the list back
            self._scan_list(k, io, sl, lds, own=run.get())
        if self.buckets and append:  # (tail_rows: only a row sel_h1 sent to the tail, X_SOLO)
            with k.if_(_State.load(k, lds["state"], 0)[X_SOLO].ne(0)) if self.cfg.tail_rows \
                    else contextlib.nullcontext():
                self._bucket_list(k, io, sl, lds, run.get(), Q, d)
        if self.release:  # every wave's list stores, before wave 0 announces the message
            k.fence("release", "device")

    def _scan_body(self, k, io, sl, lds, first, append, nans, later_count, key_lo, run,
                   nan_acc, gated, Q, d):
        """The default pass over the scores (`_scan_scores`): SCAN_UNROLL rounds of 4 keys a
        lane an iteration, lanes then waves then rounds in position order."""
        U = self.scan_rounds
        step = _scan_step(k, U)
        positions = functools.partial(self._scan_positions, k, unroll=U)
        from_lds = self._scans_lds

        def load(ps):  # from the slice's copy in LDS (offsets from lo) or from memory
            if from_lds:
                return [k.load(lds["scan"], p - sl.lo, u32, 4) for p in ps]
            return self._scan_loads(k, io, sl, None, ps)
        with k.if_(sl.lo < sl.hi):
            if self.cfg.prefetch and not from_lds:
                ahead = self._count_tunable("scan_ahead")
                first_loads = sl.early or load(positions(sl.lo))
                # ring[j]: the loads of the iteration j ahead of the current one
                ring = [[k.lane_var(x) for x in first_loads]] + \
                    [[k.lane_var(x) for x in load(positions(sl.lo + j * step))]
                     for j in range(1, ahead)]
            for base in k.range(sl.lo, sl.hi, step):
                ps = positions(base)
                if from_lds:
                    self._wait_segments(k, sl, lds, base - sl.lo)
                    raws = load(ps)
                elif self.cfg.prefetch:  # the loads `ahead` iterations on go out first
                    raws = [v.get() for v in ring[0]]
                    for near, far in zip(ring, ring[1:]):
                        for v, w in zip(near, far):
                            v.set(w.get())
                    for v, x in zip(ring[-1], load(positions(base + ahead * step))):
                        v.set(x)
                else:
                    raws = load(ps)
                kept = []  # sel_h1: each round's (keys, positions, keep flags)
                for u, (p, raw) in enumerate(zip(ps, raws)):
                    if gated:
                        pv = k.vec(p, p + 1, p + 2, p + 3)
                        key = self._rare_specials(k, raw, pv, sl.hi, nan_acc if nans else None)
                    else:
                        key, _ = ordered_keys(k, raw)
                        pv = k.vec(p, p + 1, p + 2, p + 3)
                    valid = pv < sl.hi
                    if first:
                        self._count_digits(k, lds["hist"], key, d, valid)
                        continue
                    if later_count:  # no digit here: the keep test is one compare a key
                        keep = k.cast(valid & (key >= key_lo), i32)
                    else:
                        pre = _prefix(k, key, d)
                        nz = valid & key.ne(0)
                        self._count_digits(k, lds["hist"], key, d, nz & pre.eq(Q))
                        keep = k.cast(nz & (pre >= Q), i32)
                    if nans and not gated:
                        nan_acc.set(nan_acc.get() + self._nan_counts(k, raw, key, pv, sl.hi))
                    if not append:
                        continue
                    if not self.cfg.batched_append:
                        par = (((base - sl.lo) / step) * U + u) & 1
                        self._append_round(k, io, sl, lds, key, p, keep, run, par)
                    kept.append((key, p, keep))
                if not first and append and self.cfg.batched_append:
                    par = ((base - sl.lo) / step) & 1
                    self._append(k, io, sl, lds, kept, run, par)

    def _append_round(self, k, io, sl, lds, key, p, keep, run, par):
        """Append a round's kept keys (keep: 0/1 a key; a lane's 4 keys are consecutive
        positions, lanes then waves in position order) and their positions to the slice's
        list at `run`; offsets from ballot prefix counts and, across waves, the waves'
        counts through LDS (two buffers by round parity: one barrier a round). The path of
        SelectConfig.batched_append=False: fewer scalar registers than `_append`."""
        c = self.cfg
        kp = [k.extract(keep, e) for e in range(4)]
        own = kp[0] + kp[1] + kp[2] + kp[3]
        excl = sum((k.prefix_count(kp[e].ne(0)) for e in range(1, 4)),
                   k.prefix_count(kp[0].ne(0)))
        tot = _last(k, excl + own)
        if k.W > 1:
            em = lds["emit"]
            W, w = k.W, k.wave_id()
            k.store(em, par * W + w, tot)
            k.barrier()
            off = k.uniform_var(0, i32)
            for w2 in k.range(0, w):
                off.set(off.get() + k.load(em, par * W + w2, i32))
            woff = off.get()
            rtot = None
            for w2 in range(W):
                x = k.load(em, par * W + w2, i32)
                rtot = x if rtot is None else rtot + x
        else:
            woff, rtot = k.const(0, i32), tot
        lk = c.max_slice_keys()
        lb = sl.list_base()
        at = run.get() + woff + excl
        for e in range(4):
            i = lb + k.min(at, lk - 1)
            m = kp[e].ne(0)
            io.store(self.list_out[0], i, k.extract(key, e), mask=m)
            io.store(self.list_out[1], i, _pos(k, p, e), mask=m)
            at = at + kp[e]
        run.set(run.get() + rtot)

    def _append(self, k, io, sl, lds, rounds, run, par):
        """Append the kept keys of an iteration's rounds ([(keys, first position, keep: 0/1
        a key)]; a lane's 4 keys are consecutive positions, then lanes, waves and rounds in
        position order) and their positions to the slice's list at `run`. Offsets: ballot
        prefix counts inside a wave; across waves and rounds, every (round, wave) count goes
        to LDS (two buffers by iteration parity) and ONE barrier later lane i = u * W + w
        of every wave holds count i, whose exclusive lane prefix is (round u, wave w)'s
        offset. One barrier an iteration, not one a round: H200, 512K keys x 8 rows, a
        sel_h1 job 25 -> 22 us (bench/NOTES.md v7; the rest is the scan's per-key work and
        its unhidden load round trips, same entry)."""
        c = self.cfg
        W, w, U = k.W, k.wave_id(), len(rounds)
        per_round = []
        for key, p, keep in rounds:
            kp = [k.extract(keep, e) for e in range(4)]
            own = kp[0] + kp[1] + kp[2] + kp[3]
            # the lanes' prefix by shuffles, not ballots: a ballot is an SGPR pair on AMD,
            # and an iteration's rounds of them would be live together
            incl = _scan(k, own)  # the wave's total: its last lane's, kept per lane (VGPR)
            per_round.append((key, p, kp, incl - own, k.shuffle(incl, k.const(k.L - 1, i32))))
        if W > 1:
            em = lds["emit"]
            for u, (_, _, _, _, tot) in enumerate(per_round):
                k.store(em, (par * U + u) * W + w, tot)
            k.barrier()
            lane = k.lane_id()
            # count j = u * W + w sits in lane j % L of chunk j // L (more than one chunk
            # where U x W counts exceed a wave: 16 waves); each chunk's exclusive prefix plus
            # the chunks' totals before it
            nch = -(-(U * W) // k.L)
            chunks, before = [], None  # before: the counts of the chunks so far
            for ch in range(nch):
                idx = lane if ch == 0 else lane + ch * k.L
                cnt = k.load(em, par * U * W + k.min(idx, U * W - 1), i32)
                cnt = k.select(idx < U * W, cnt, 0)
                incl = _scan(k, cnt)
                chunks.append(incl - cnt if before is None else incl - cnt + before)
                if ch < nch - 1:
                    before = _last(k, incl) if before is None else before + _last(k, incl)

            def offset(j):  # (round, wave) count j's exclusive prefix, per lane
                out = k.shuffle(chunks[0], j if nch == 1 else j & (k.L - 1))
                for ch in range(1, len(chunks)):
                    out = k.select(j >= ch * k.L,
                                   k.shuffle(chunks[ch], (j - ch * k.L) & (k.L - 1)), out)
                return out
            # per-lane copies (VGPRs): U uniform offsets held across the stores would each
            # take an SGPR, which the fused kernel on AMD does not have to spare
            woffs = [offset(k.const(u * W, i32) + w) for u in range(U)]
            rtot = _last(k, incl) if before is None else before + _last(k, incl)
        else:
            woffs, acc = [], k.const(0, i32)
            for *_, tot in per_round:
                woffs.append(acc)
                acc = acc + tot
            rtot = k.readfirstlane(acc)  # the same on every lane
        lk = c.max_slice_keys()
        if self.list_bases:  # the slice's two lists' starts, from their offsets in LDS
            offs = k.load(lds["list_at"], 0, i64, 2)
            keys_at, pos_at = [k.ptr_add(io.env.arena, k.extract(offs, e)) for e in range(2)]
        else:
            lb = sl.list_base()
        base = run.get()
        for (key, p, kp, excl, _), woff in zip(per_round, woffs):
            at = base + woff + excl
            for e in range(4):
                # the flag through an opaque copy: LLVM would otherwise reuse the compare
                # of the prefix count above, a lane mask (an SGPR pair on AMD) held across
                # the barrier for every key of every round
                m = k.opaque(kp[e]).ne(0)
                if self.list_bases:
                    i = k.min(at, lk - 1)
                    k.store(keys_at, i, k.extract(key, e), mask=m & io.ok)
                    k.store(pos_at, i, _pos(k, p, e), mask=m & io.ok)
                else:
                    i = lb + k.min(at, lk - 1)
                    io.store(self.list_out[0], i, k.extract(key, e), mask=m)
                    io.store(self.list_out[1], i, _pos(k, p, e), mask=m)
                at = at + kp[e]
        run.set(base + rtot)

    def _scan_list(self, k, io, sl, lds, own=None, copy=None):
        """A later pass: the next digit of the list's keys with the prefix found so far.
        sel_h2 with cfg.defers also copies the entries at or above that prefix, in order,
        into its own list (`list_out`) and leaves that list's length in the state. `own`
        (sel_h1, SelectConfig.count_from_list): count over the first `own` entries of the
        list this stage has just written, no copy."""
        c = self.cfg
        st = _State.load(k, lds["state"], 0)
        Q, d = st[X_Q], st.i(X_D)
        nl = st.i(X_NLIST) if own is None else own
        T = k.W * k.L
        U = LIST_UNROLL if c.prefetch else 1
        if copy is None:
            copy = self.list_out is not None and own is None
        run = k.uniform_var(0, i32)  # the copy's length so far
        if own is None:
            load_key, load_pos = self._input_list(k, io, sl, lds)
        else:
            load_key, load_pos = (_region_loader(io, name, sl.list_base())
                                  for name in self.list_out)
        with k.if_(nl > 0):
            for base in k.range(0, nl, 4 * T * U):
                idx = [base + u * 4 * T + 4 * k.thread_id() for u in range(U)]
                keys = [load_key(i, mask=i < nl) for i in idx]
                poss = [load_pos(i, mask=i < nl) for i in idx] if copy else idx
                kept = []
                for i, key, pv in zip(idx, keys, poss):
                    valid = k.vec(i, i + 1, i + 2, i + 3) < nl
                    pre = _prefix(k, key, d)
                    self._count_digits(k, lds["hist"], key, d, valid & pre.eq(Q))
                    if copy:
                        keep = k.cast(valid & (pre >= Q), i32)
                        if not c.batched_append:
                            par = (((base / (4 * T * U)) * U) + len(kept)) & 1
                            self._append_round(k, io, sl, lds, key, pv, keep, run, par)
                        kept.append((key, pv, keep))
                if copy and c.batched_append:
                    self._append(k, io, sl, lds, kept, run, (base / (4 * T * U)) & 1)
        if copy:
            with _wave0(k):
                k.store(lds["state"], X_NLIST, _u(k, run.get()))
            if self.release:  # every wave's list stores, before wave 0 announces the message
                k.fence("release", "device")

    def _sum_segments(self, k, io, sl, hist):
        """sel_h0 with the scoring's first digits: this slice's segments, summed per bin into
        LDS hist (zeroed, a CTA barrier after: the caller's)."""
        c = self.cfg
        seg = c.segment
        g_lo = sl.lo / seg
        g_hi = (sl.hi + (seg - 1)) / seg
        if self.wide_segment_sums:
            self._sum_segments_wide(k, io, sl, hist, g_lo, g_hi)
            if self.scores.in_region and not getattr(self.scores, "bulk", True):
                with _wave0(k):
                    k.fence("acquire", "device")
            return
        with _wave0(k):
            for half in range((FIRST_DIGIT_BINS + k.L - 1) // k.L):
                b = half * k.L + k.lane_id()
                m = b < FIRST_DIGIT_BINS
                bb = k.min(b, FIRST_DIGIT_BINS - 1)
                acc = k.lane_var(0, u32)
                for g in k.range(g_lo, g_hi):
                    idx = (sl.r * c.segments + g) * FIRST_DIGIT_BINS + bb
                    acc.set(acc.get() + self.hist.read(k, io, idx, m))
                k.store(hist, bb, acc.get(), mask=m)
            if self.scores.in_region and not getattr(self.scores, "bulk", True):
                k.fence("acquire", "device")  # the scores were released before the pairs

    def _sum_segments_wide(self, k, io, sl, hist, g_lo, g_hi):
        """Every thread: one bin of G = T / 64 segment groups (all bins, in passes of T, when
        the CTA has fewer than 64 threads), SEGMENT_UNROLL of its group's segments loaded at
        once; the groups' sums meet in LDS hist by atomic adds (integers: any order)."""
        c = self.cfg
        B = FIRST_DIGIT_BINS
        T = k.W * k.L
        t = k.thread_id()
        G = max(1, T // B)
        U = self._count_tunable("segment_unroll")
        for b0 in range(0, B, T):
            if T >= B:
                b, grp = t % B, t / B
                live = grp < G
            else:
                b, grp = t + b0, k.const(0, i32)
                live = b < B
            bb = k.min(b, B - 1)
            acc = k.lane_var(0, u32)
            for g0 in k.range(g_lo, g_hi, G * U):
                vals = []
                for u in range(U):
                    g = g0 + grp + G * u
                    m = live & (g < g_hi)
                    idx = (sl.r * c.segments + k.min(g, c.segments - 1)) * B + bb
                    vals.append(k.select(m, self.hist.read(k, io, idx, m), 0))
                acc.set(acc.get() + sum(vals[1:], vals[0]))
            k.atomic("add", hist, bb, acc.get(), mask=live, scope="cta")
