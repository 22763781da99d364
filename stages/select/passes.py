"""SelectPass: one pass of the selection (stages per the package doc), its declarations
(jobs, reads, writes, buffers), its body and round flow; the passes' parts are mixins in
scan, lean, exchange, emit, finish and solo."""
from __future__ import annotations

import contextlib

import numpy as np

from layouts.regions import PlainBuffer, TaggedPairs
from layouts.scores import FINE_DIGIT_BINS, FIRST_DIGIT_BINS
from monokernel.types import i32, i64, u32

from ..base import Buffer, Job, Stage, Use
from .config import (FOLD_BAND_BINS, GROUPS_A_LANE, TAIL_EXCHANGED, TAIL_FINISH_LDS, TAIL_RANK_GROUP, DIAG_WORDS, FIN_GO, FIN_WORDS, INVALID_N, INVALID_PAGE, LATE_CHECK_LOADS, LEAN_LANE_KEYS,
                     LIST_UNROLL, LOAD_KEYS, MAX_PAGE, PAGE, PAGE_SHIFT, SCAN_AHEAD, SCAN_UNROLL,
                     SEGMENT_UNROLL, SelectConfig, X_DEFER, X_EMITTED)
from .tail import TailFinish
from .emit import Emit
from .exchange import Exchange
from .finish import RowFinish
from .lanes import (_Slice, _State, _barrier, _flat, _region_loader, _scan_step, _wave0,
                    initial_state)
from .lean import LeanScan
from .reference import reference_select
from .scan import ScanPasses
from .solo import SoloFinish


class SelectPass(ScanPasses, LeanScan, Exchange, Emit, RowFinish, SoloFinish, TailFinish,
                 Stage):
    """Pass q of the selection (q = 0..P-1: histogram passes; q = P: the output)."""
    rel_tol = 1e-10  # exact: an integer off by one in values < 2**31 is 4.7e-10 relative
    # --tune sel_h1.ATTR=0/1 (sel_h0: wide_segment_sums; the last histogram pass and
    # sel_out: early_emit): SelectConfig's options, per run
    TUNABLES = ("count_from_list", "early_loads", "wide_segment_sums", "early_emit",
                "l2_prefetch", "lds_scan", "list_bases", "grouped_counts", "one_wait",
                "segment_unroll", "scan_unroll", "scan_ahead", "lean_scan", "lean_copies", "lean_prefetch_ahead",
                "lean_prefetch_early", "lean_early_loads", "lean_lane_keys",
                "lean_coalesced", "lean_refill", "lean_any_special", "tail_rank", "cta_publish",
                "fold_bins", "group_maxima_early", "late_input_checks", "group_skip_share",
                "group_skip_min_keys", "segment_unroll_long")
    # sel_h0's segment sums (wide_segment_sums), sel_h1's fold: segment histograms a thread
    # loads at once. 16 in sel_h1 (v45, select_hist r8): 512K 0.984, 64K 1.021: kept at 8
    segment_unroll = SEGMENT_UNROLL
    # sel_h1's fold over a row of more segments than one iteration of segment_unroll covers
    # (G x segment_unroll: a 512K row's 512 at 8 waves) loads this many at once instead, so
    # a long row is summed in one round trip while a short one issues no masked-off loads
    # (v51, select_hist r8 with 16 throughout: 512K 0.977, 64K 1.035). Timed with the v51
    # defaults (v52, H100, same process): r8 512K / 64K 0.999 / 1.008, r4 0.982 / 1.022; the
    # 16-wide fold throughout 0.995 / 1.033, r4 0.966 / 1.027: no gain at rows 8. 0: off
    segment_unroll_long = 0
    # sel_h1 folding the first digit in (SelectConfig.fold_first_digits): bins of a band of
    # its row's segment histograms read at once, from the top (FOLD_BAND_BINS; 64: all)
    fold_bins = FOLD_BAND_BINS
    # rounds of 4 keys a lane an iteration of a pass over the scores reads (SCAN_UNROLL)
    scan_unroll = SCAN_UNROLL
    # iterations of score loads in flight ahead of the one a pass over the scores works on
    # (SCAN_AHEAD; with SelectConfig.prefetch)
    scan_ahead = SCAN_AHEAD
    # The lean scan's tunables below were each measured on the H200 against the default in
    # the same call (bench/NOTES.md v23, select_hist 512K x 8 at 24.6-25.1 us) and are off:
    # sel_h1's scan (~8.5 us) is not waiting on its loads (from the L2: -0.65 us), their
    # pattern or their ring; Nsight Compute spreads its stalls over fixed-latency waits,
    # instruction fetch, the CTA barrier and the picks' LDS round trips.
    # The L2 lines of the iteration this many ahead (a line prefetch a lane, no registers
    # held); 0: none. 2 / 4: 25.11 / 25.30 us
    lean_prefetch_ahead = 0
    # 1: sel_h1 of scores from an input buffer has the waves but wave 0 (which alone waits
    # for message 0: its acquire fence would wait for its own requests) ask the L2 for every
    # line of the slice before that wait. SLOWER, 26.72 us: message 0 is seen 3.1 us into
    # the job instead of 1.0 (the slice's HBM traffic delays the exchange's loads)
    lean_prefetch_early = 0
    # 1: the lean loop's first loads go out before the wait for message 0 (as early_loads
    # does for the default scan, whose own early loads a deferred row's count still reads):
    # 24.59 us, no gain
    lean_early_loads = 0
    # a lane's consecutive keys an iteration: LEAN_LANE_KEYS (a 16-bit mask) or
    # LEAN_WIDE_KEYS (32: half the iterations and their ballots, barriers and count
    # exchanges). SLOWER, 29.5-29.6 us (sel_h1's scan 13.0 us against 9.1; fused index r8 W1
    # 138.2 against 118.8)
    lean_lane_keys = LEAN_LANE_KEYS
    # 1: the wave's keys loaded in whole 16-byte pieces side by side (a load instruction 4 L2
    # lines, not the 16 of a lane's 64 consecutive bytes each), each lane's consecutive keys
    # handed to it through its LDS staging (two wave syncs an iteration); with no staging
    # (LDS short) the lanes load their own keys as with 0. 24.66-24.67 against 24.91-24.97
    # (the scan 8.20 against 8.67 us), fused index unchanged (W1 120.4 / 119.5): within the
    # spread between calls, off
    lean_coalesced = 0
    # where the next score loads go out. 0: the next iteration's at the top of each iteration
    # into registers the current keys still hold, so ptxas carries them around the loop by
    # register copies at its end, which wait for those loads (SASS). 1: into the one set once
    # the iteration's keys are dead there (after its masks and counts, before its CTA
    # barrier: ptxas keeps a load above a barrier), no copy (the loop 282 -> 263
    # instructions). 2 (LEAN_REFILL_TURNS): two sets taking turns, each refilled with the keys
    # two iterations on. No gain: 25.27 (1), 25.36-25.49 (2) against 24.81-25.08 us, the scan
    # unchanged (the copies' wait was off the critical path)
    lean_refill = 0
    # 1: the rare branch's flag (a lane holds -inf or NaN) from one OR of the 16 compares,
    # not from a 16-bit mask (a select and an add a key), its masks built in the branch only;
    # the same counts (the branch masks off keys past the slice itself). Timed on top of the
    # group skip (bench/NOTES.md v40, an H100, fused index r8 512K): B/A 0.994 / 1.003 (W1 /
    # W2), noise; top-k exact
    lean_any_special = 0
    # 1 (SelectConfig.group_skip): sel_h1's group maxima of the wave's whole span loaded
    # before its fold (after its wait), and its flagged groups listed in one run of rounds
    # after the decision: one round trip there (the flagged groups' keys) instead of two an
    # iteration of GROUPS_A_LANE x L groups (maxima, then keys); where a wave's span takes
    # at most EARLY_MAXIMA_ITERATIONS of them (registers and LDS slots), else the loop (0).
    # With late_input_checks (bench/NOTES.md v45, H100, 512K, B/A in one process):
    # select_hist with the maxima r8 / r2 0.952 / 0.955 (sel_h1's scan 7.2 -> 5.4 us), the
    # fused index r8 W1 / W2 0.997 / 0.997
    group_maxima_early = 1
    # 1: the block table's check (INVALID_PAGE) issues its loads before the first digits'
    # sums and reduces them after, so its round trip runs under theirs instead of ahead of
    # them (0: a runtime loop of load and reduce, one round trip per T pages before the fold;
    # also where a slice's pages take more than LATE_CHECK_LOADS loads a thread). Alone
    # (v45): select_hist r8 512K 0.994-1.000, 64K 1.001
    late_input_checks = 1
    # N > 0 (SelectConfig.group_skip, first digits only): sel_h1 skips groups only in a row
    # that lists at most 1 / N of its keys (its count at the first threshold digit), and
    # lists a row listing more with the plain lean loop, every group being flagged there
    # (normal scores at 64K x 8 list half the row: the maxima cost select_hist +3.4%, v45).
    # No gain (v47, H100, select_hist r8 with the maxima, N = 8: 64K 1.010, 512K 1.007): the
    # maxima's cost at 64K is not the flagged groups' listing. 0: the group skip in every row
    group_skip_share = 0
    # N > 0 (SelectConfig.group_skip): sel_h1 skips groups only in rows of at least N visible
    # keys, known before anything is loaded, so a shorter row's jobs load no maxima at all
    # (the early loads are masked off) and list by the plain lean loop; with
    # group_skip_share both must hold. Why: the maxima cost select_hist at 64K x 8 +3.4%
    # (v45), and the choice by the listed share, made after the early loads, did not win it
    # back (v47). 0: the group skip in every row
    group_skip_min_keys = 0

    def _count_tunable(self, attr: str, least: int = 1) -> int:
        """Tunable `attr`, checked: an integer >= least (an error naming it otherwise)."""
        U = getattr(self, attr)
        if isinstance(U, bool) or not isinstance(U, int) or U < least:
            what = "a positive integer" if least == 1 else f"an integer >= {least}"
            raise ValueError(f"{self.name}: {attr} = {U!r} must be {what}")
        return U

    @property
    def scan_rounds(self) -> int:
        """`scan_unroll`, checked: rounds of 4 keys a lane an iteration of a scan."""
        return self._count_tunable("scan_unroll")

    def __init__(self, cfg: SelectConfig, q: int, scores, hist=None, *, ready=None,
                 release=True, acquire=True, fine=None, gmax=None):
        self.cfg, self.q = cfg, q
        # sel_h1 lists only the 16-key groups whose maximum reaches its threshold
        # (SelectConfig.group_skip) from `gmax` (GroupMaxPlain)
        self.gmax = gmax if cfg.group_skip and q == 1 else None
        # sel_h1 refines the first digit by 4 bits (SelectConfig.fine_digits) from `fine`
        # (a FineBuffer / FinePlain source)
        self.fine = fine if cfg.fine_digits and q == 1 else None
        if cfg.fine_digits and q == 1 and fine is None:
            raise ValueError("fine_digits: sel_h1 needs the refined first digits' source "
                             "(score_fine: 'buffer' or 'plain')")
        self.refines = self.fine is not None
        # sel_h1 sums its row's first digits itself (SelectConfig.fold_first_digits): the
        # first pass built, with sel_h0's inputs (what it waits for, the first digits)
        self.folds = cfg.fold_first_digits and q == 1
        self.ready = ready if q == cfg.first_pass else None
        # release=False / acquire=False drop the messages' fences: the broken variants the
        # interpreter's relaxed mode must catch (tests only)
        self.release, self.acquire = release, acquire
        self.scores = scores
        self.hist = hist if q == cfg.first_pass else None
        self.name = cfg.stage_name(q)
        self.is_out = q == cfg.passes
        # sel_h1 compacts the slice's keys at or above the first threshold digit into its
        # candidate list; the later passes and the output read the list, not the scores
        self.compacts = q == 1
        self.from_list = q >= 2
        # sel_h2 of a row with deferred lists (SelectConfig.defer_fat_bins) reads the scores
        # again and builds the lists
        self.defers = cfg.defers and q == 2 and q < cfg.passes
        # the lists this pass reads and the ones it writes: sel_h1 writes (lkey, lpos); with
        # cfg.defers sel_h2 reads them and writes (lkey2, lpos2), which the later ones read
        self.first_list = first_list = (cfg.list_keys, cfg.list_pos)
        second_list = (cfg.list2_keys, cfg.list2_pos)
        self.list_out = first_list if self.compacts else second_list if self.defers else None
        self.list_in = None if q < 2 else second_list if cfg.defers and q > 2 else first_list
        # solo rows (module doc, "Solo finish"): sel_h2's slice-0 job finishes them; every
        # job from sel_h2 on first learns from its own slice's rdy1 pair whether its row is
        # solo (and then, but for that one, does nothing)
        # (with tail_rows the same check: a tail row's sel_h2 .. return, its sel_out
        # finishes it by the tail)
        self.solo_check = cfg.leaves_rounds and q >= 2
        self.solo_runs = cfg.solo and q == 2
        self.count_from_list = cfg.count_from_list
        self.early_loads = cfg.early_loads
        self.wide_segment_sums = cfg.wide_segment_sums
        self.early_emit = cfg.early_emit
        self.l2_prefetch = cfg.l2_prefetch
        self.lds_scan = cfg.lds_scan
        self.list_bases = cfg.list_bases
        self.grouped_counts = cfg.grouped_counts
        self.one_wait = cfg.one_wait
        self.cta_publish = cfg.cta_publish
        self.lean_scan = cfg.lean_scan
        self.lean_copies = cfg.lean_copies
        self.lean_spans = cfg.lean_spans  # (a config option: its scratch lists are regions)
        # this pass may finish a row from every slice's list (SelectConfig.finish_max)
        self.finishes = cfg.finish_max is not None and 2 <= q < cfg.passes
        # SelectConfig.tail_finish: sel_h1 buckets its candidates, sel_out finishes the row
        self.buckets = (cfg.tail_finish or cfg.tail_rows) and self.compacts
        self.tail_finishes = cfg.tail_finish and self.is_out
        # SelectConfig.tail_max_per_slice: sel_out of a tail row runs tail_finish's sel_out
        # (deciding on message 1), a pass of its own with its own LDS
        self.tail_out = None
        if cfg.tail_rows and self.is_out:
            self.tail_out = SelectPass(cfg.tail_view(), TAIL_EXCHANGED, scores, hist,
                                       release=release, acquire=acquire)
            self.tail_out.name = f"{self.name}_tail"
        # every slice's pair of message q-1 polled before the decision (tail_by_bin: sel_h2's
        # check of its row, and sel_out's for its tail): the decision takes the acquire only
        self.pairs_seen = cfg.tail_by_bin and q == 2
        if self.tail_out is not None:
            self.tail_out.pairs_seen = cfg.tail_by_bin

    # -- declarations ---------------------------------------------------------------------
    def jobs(self):
        c = self.cfg
        keys = c.max_slice_keys()
        if self.from_list:  # about a first-digit bin's share, plus the keys above it
            keys = keys // FIRST_DIGIT_BINS + c.topk
        xbytes = 0 if self.q == 0 else c.max_slices * c.msg_words(self.q - 1) * 4
        if self.folds:  # the row's segment histograms instead of message 0
            xbytes = c.segments * FIRST_DIGIT_BINS * 4
        lds = 4 * (2 * 1024 + 64)
        # a solo finish: at most solo_max_candidates keys read by each remaining pass, keys
        # and positions by the emit
        solo = c.solo_max_candidates * (4 * (c.passes - 2) + 8) if self.solo_runs else 0
        return [Job(j, cost_bytes=keys * 4 + xbytes + (solo if j % c.max_slices == 0 else 0),
                    cost_flops=keys * 8, lds_bytes=lds)
                for j in range(c.rows * c.max_slices)]

    def regions(self):
        c = self.cfg
        if self.is_out:
            return []
        out = [PlainBuffer(c.msg(self.q), u32, (c.rows, c.max_slices, c.msg_words(self.q))),
               TaggedPairs(c.rdy(self.q), (c.rows, c.max_slices), u32)]
        if self.list_out is not None:
            shape = (c.rows, c.max_slices, c.max_slice_keys())
            out += [PlainBuffer(self.list_out[0], u32, shape),
                    PlainBuffer(self.list_out[1], i32, shape)]
        if self.buckets:
            out.append(PlainBuffer(c.list_bucket_keys, u32,
                                   (c.rows, c.max_slices, c.max_slice_keys())))
        if self._lists_spans:
            keys, pos = self.span_lists()
            out += [PlainBuffer(keys, u32, shape), PlainBuffer(pos, i32, shape)]
        return out

    @property
    def _lists_spans(self) -> bool:
        """This pass writes lists, configured to list by spans (SelectConfig.lean_spans): its
        scratch lists are regions (declared with the config, which the arena is built from)."""
        return self.list_out is not None and bool(self.cfg.lean_spans)

    def buffers(self):
        c, nm = self.cfg, self.cfg.names
        out = {nm.n_keys: Buffer(i32, (c.rows,))}
        if not self.from_list or self.defers:
            out.update(self.scores.buffers())
        if self.refines:
            out.update(self.fine.buffers())
        if self.gmax is not None:
            out.update(self.gmax.buffers())
        if self.q == 0 or self.folds:
            out[nm.block_table] = Buffer(i32, (c.rows, c.bt_width))
            if self.hist is not None:
                out.update(self.hist.buffers())
        # (sel_h2: the solo rows; a pass finishing a row emits it)
        if self.is_out or self.solo_runs or self.emits_early or self.finishes:
            out[nm.block_table] = Buffer(i32, (c.rows, c.bt_width))
            out[nm.out] = Buffer(i32, (c.rows, c.topk), output=True)
            out[nm.diag] = Buffer(u32, (c.rows, DIAG_WORDS), output=True)
        return out

    def _row_slice(self, j):
        return divmod(j, self.cfg.max_slices)

    def _list_uses(self, j, names):
        lk = self.cfg.max_slice_keys()
        return [Use(n, j * lk, (j + 1) * lk) for n in names]

    @property
    def _reads_either(self) -> bool:
        """SelectConfig.lean_lists: this pass reads sel_h2's list for a deferred row and
        sel_h1's for a listed one."""
        return self.cfg.lean_lists and self.cfg.defers and self.q > 2

    def _input_list(self, k, io, sl, lds):
        """(keys, positions) loaders of this slice's input list: load(i, mask) -> 4 entries
        from entry i. With lean_lists past sel_h2, the list the row's X_DEFER names, through
        a pointer chosen at run time (both regions are this pass's declared reads)."""
        if not self._reads_either:
            return tuple(_region_loader(io, name, sl.list_base()) for name in self.list_in)
        defer = _State.load(k, lds["state"], 0)[X_DEFER].ne(0)
        lb = sl.list_base_bytes()
        out = []
        for second, first in zip(self.list_in, self.first_list):
            at = k.select(defer, k.const(io.arena[second].data_offset, i64),
                          k.const(io.arena[first].data_offset, i64))
            ptr = k.ptr_add(io.env.arena, at + lb)
            dt = io.arena[second].region.dtype
            out.append(lambda i, mask, ptr=ptr, dt=dt: k.load(ptr, i, dt, 4, mask=mask))
        return tuple(out)

    def reads(self, j):
        c = self.cfg
        r, s = self._row_slice(j)
        out = [] if self.from_list and not self.defers else list(self.scores.reads(r))
        if self.solo_runs and s == 0:  # a solo finish reads every slice's list of its row
            lk = c.max_slice_keys() * c.max_slices
            out += [Use(n, r * lk, (r + 1) * lk) for n in (c.list_keys, c.list_pos)]
        elif self.from_list:  # (sel_h2 with cfg.defers copies positions into its lists)
            both = self.is_out or self.defers or self.emits_early or self.finishes
            lists = [self.list_in] + ([self.first_list] if self._reads_either else [])
            for keys, pos in lists:
                out += self._list_uses(j, [keys] + ([pos] if both else []))
                if self.finishes:  # a row finish gathers every slice's list keys
                    lk = c.max_slice_keys() * c.max_slices
                    out.append(Use(keys, r * lk, (r + 1) * lk))
        if self.tail_finishes:  # a tail finish gathers every slice's threshold bucket
            lk = c.max_slice_keys() * c.max_slices
            out.append(Use(c.list_bucket_keys, r * lk, (r + 1) * lk))
        if self.tail_out is not None:  # a tail row's: message 1, the buckets, sel_h1's list
            out += [u for u in self.tail_out.reads(j) if u not in out]
        if self.solo_check and self.q > 2:  # whether the row is solo: its own rdy1 pair
            out.append(Use(c.rdy(1), j, j + 1))
        if self.refines:
            out += self.fine.reads(r)
        if self.gmax is not None:
            out += self.gmax.reads(r)
        if self.q == 0 or self.folds:
            if self.ready is not None:
                out += self.ready.reads(r)
            if self.hist is not None and not (self.folds and c.row_parts):
                out += self.hist.reads(r)  # (row_parts: the fold reads no segment)
            return out
        p = self.q - 1
        S, mw = c.max_slices, c.msg_words(p)
        out.append(Use(c.msg(p), r * S * mw, (r + 1) * S * mw))
        out.append(Use(c.rdy(p), r * S, (r + 1) * S))
        return out

    def writes(self, j):
        c = self.cfg
        if self.is_out:
            return []
        mw = c.msg_words(self.q)
        out = [Use(c.msg(self.q), j * mw, (j + 1) * mw), Use(c.rdy(self.q), j, j + 1)]
        if self.list_out is not None:
            out += self._list_uses(j, list(self.list_out))
        if self.buckets:
            out += self._list_uses(j, [c.list_bucket_keys])
        if self._lists_spans:
            out += self._list_uses(j, list(self.span_lists()))
        return out

    def reference(self, env):
        if not self.is_out:
            return {}
        import torch
        c, nm = self.cfg, self.cfg.names
        scores = env[nm.scores].cpu().numpy().astype(np.float32)
        n_keys = c.n_of(env[nm.n_keys].cpu().numpy())
        bt = env[nm.block_table].cpu().numpy().astype(np.int64)
        out, diag = reference_select(scores, n_keys, bt, c.topk)
        return {nm.out: torch.as_tensor(out, dtype=torch.float64),
                nm.diag: torch.as_tensor(diag.astype(np.int64), dtype=torch.float64)}

    # -- body -----------------------------------------------------------------------------
    def body(self, k, job, io):
        # masked stores and LDS atomics as predicated instructions, not a divergent branch
        # each (KernelBuilder.predicated_masks: H200 select_hist 512K x 8 40.8 -> 38.3 us)
        with k.predicated_masks():
            self._body(k, job, io)

    def _body(self, k, job, io):
        io = _flat(io)
        c = self.cfg
        sl = _Slice(k, io, c, job)
        P = self.q
        with k.if_(sl.active):
            sl.bounds()
            lds = self._lds(k)
            if P == 0:
                if self.ready is not None:
                    with _wave0(k):
                        self.ready.wait(k, io)
                    _barrier(k)
                io.env.phase(0)  # the scores are ready
                if self.l2_prefetch and self.hist is not None and not self.scores.in_region:
                    self._prefetch_scores(k, io, sl)
                pages_checked = self._check_inputs(k, io, sl)
                initial_state(k, c).store_lds(lds["state"])
                self._histogram(k, io, sl, lds, first=True)
                pages_checked()
                io.env.phase(1)  # the first-digit histogram is counted
                self._publish(k, io, sl, lds)
                return
            if not self.solo_check:
                if self._scans_lds:
                    self._copy_slice(k, io, sl, lds)
                elif self._lean_copies:
                    self._lean_copy(k, io, sl, lds)
                elif self._loads_early:  # (the default scan's: a deferred row's count)
                    sl.early = self._scan_loads(k, io, sl, sl.lo)
                    if self._lean and self.lean_early_loads:
                        sl.lean_early = self._lean_loads(k, io, sl, 0, lds)
                    if self._lean and self._count_tunable("lean_prefetch_early", 0) and k.W > 1:
                        self._prefetch_slice_lines(k, io, sl)
                self._round(k, io, sl, lds)
                return
            solo = self._row_is_solo(k, io, sl, lds)
            if self.tail_out is not None:  # tail_rows: a row left after message 1 is a tail
                self._tail_or_rounds(k, io, sl, lds, solo)
                return
            if not self.solo_runs:  # a solo row was finished by sel_h2: nothing to wait for
                # (or, with tail_rows, is finished by sel_out's tail)
                with k.if_(~solo):
                    self._round(k, io, sl, lds)
                return
            # sel_h2: slice 0 of a solo row decides on message 1 as every slice does, then
            # finishes the row alone; the other slices of a solo row do nothing
            with k.if_(~solo | sl.s.eq(0)):
                self._consume(k, io, sl, lds, solo=solo)
                with k.if_else(solo) as (alone, shared):
                    with alone:
                        self._solo_finish(k, io, sl, lds)
                    with shared:
                        self._next_histogram(k, io, sl, lds)

    def _tail_or_rounds(self, k, io, sl, lds, tail):
        """sel_out with tail_rows: a tail row (`tail`, uniform) decided on message 1 and
        finished as tail_finish's sel_out does; every other row as the rounds' sel_out."""
        t = self.tail_out
        for attr in self.TUNABLES:  # (--tune sel_out.ATTR reaches both)
            setattr(t, attr, getattr(self, attr))
        tail_lds = t._lds(k)
        with k.if_else(tail) as (by_tail, by_rounds):
            with by_tail:
                t._round(k, io, sl, tail_lds)
            with by_rounds:
                self._round(k, io, sl, lds)

    @property
    def emits_early(self) -> bool:
        """The last histogram pass emits a row decided before its last digit (early_emit;
        from pass 3 on it reads the lists sel_out reads)."""
        return self.early_emit and self.q == self.cfg.passes - 1 and self.q > 2

    def _round(self, k, io, sl, lds):
        """One exchange round: decide on message q-1, then emit (sel_out) or count the next
        digit and publish message q."""
        self._consume(k, io, sl, lds)
        io.env.phase(2)  # decided (phases 0 and 1 in _consume)
        if self.tail_finishes:  # a row the decision left open: the tail finish
            with k.if_else(k.load(lds["fin"], FIN_GO, i32).ne(0)) as (finish, final):
                with finish:
                    self._tail_finish(k, io, sl, lds)
                with final:
                    self._emit(k, io, sl, lds)
            return
        if self.is_out:
            if self.early_emit or self.cfg.finish_max is not None:  # an earlier pass may
                # have emitted the row
                with k.if_(_State.load(k, lds["state"], 0)[X_EMITTED].eq(0)):
                    self._emit(k, io, sl, lds)
            else:
                self._emit(k, io, sl, lds)
            return
        if self.finishes:
            with k.if_else(k.load(lds["fin"], FIN_GO, i32).ne(0)) as (alone, rounds):
                with alone:
                    self._finish_row(k, io, sl, lds)
                    self._publish(k, io, sl, lds)
                with rounds:
                    self._round_on(k, io, sl, lds)
            return
        self._round_on(k, io, sl, lds)

    def _round_on(self, k, io, sl, lds):
        """The round after the decision: the last histogram pass's early emit, then the
        next digit counted and published."""
        if self.emits_early:
            with k.if_(_State.load(k, lds["state"], 0).done):
                self._emit(k, io, sl, lds)
                _barrier(k)  # every wave has read the state before wave 0 flags it ...
                with _wave0(k):
                    k.store(lds["state"], X_EMITTED, k.const(1, u32))
                _barrier(k)  # ... and reads it again after
        self._next_histogram(k, io, sl, lds)

    def _next_histogram(self, k, io, sl, lds):
        st = _State.load(k, lds["state"], 0)
        # with cfg.defers sel_h2 builds every row's second list, even when this decision was
        # final (the emit reads that list)
        with contextlib.nullcontext() if self.defers else k.if_(~st.done):
            self._histogram(k, io, sl, lds, first=False)
        if self._lean_copies:  # a deferred row's count-only scan left the copies unread
            k.async_wait(0)
        _barrier(k)
        io.env.phase(3)  # the next digit is counted (sel_h1: the scan and the lists)
        self._publish(k, io, sl, lds)

    def _publishes_by_cta(self, k) -> bool:
        """SelectConfig.cta_publish, where the CTA has waves to share the sums and the
        message's bins come in whole 4-word vectors."""
        return (bool(self.cta_publish) and not self.is_out and k.W > 1
                and self.cfg.bins(self.q) % LOAD_KEYS == 0)

    def _lds(self, k):
        c = self.cfg
        nm = self.name
        out = {"state": k.lds(f"{nm}_state", u32, 16)}
        if not self.is_out:
            out["hist"] = k.lds(f"{nm}_hist", u32, max(4, c.bins(self.q)))
            out["cnt"] = k.lds(f"{nm}_cnt", u32, 4)
        if self.q > 0:
            out["gcum"] = k.lds(f"{nm}_gcum", u32, max(4, c.bins(self.q - 1)))
        if self.folds:  # the own slice's first-digit cum (message 0's histogram)
            out["own_cum"] = k.lds(f"{nm}_own_cum", u32, FIRST_DIGIT_BINS)
        if self.refines:  # the row's sub-bins of the threshold bin, then their cum
            out["fine_cum"] = k.lds(f"{nm}_fine_cum", u32, FINE_DIGIT_BINS)
        if self._publishes_by_cta(k):  # the publish's suffix sums: the waves' totals
            out["pub_waves"] = k.lds(f"{nm}_pub_waves", i32, k.W)
        appends = (self.compacts or self.defers) and k.W > 1  # the appends' wave counts
        append_words = 2 * (max(self.scan_rounds, LIST_UNROLL) if c.batched_append else 1) * k.W
        if (self.is_out or self.solo_runs or self.emits_early or self.finishes) and k.W > 1:
            # (sel_h2 finishing a row: the appends' room serves the emit too)
            out["emit"] = k.lds(f"{nm}_emit", i32,
                                max(2 * 2 * k.W, append_words if appends else 0))
        if appends and "emit" not in out:
            out["emit"] = k.lds(f"{nm}_emit", i32, append_words)
        if self.gmax is not None:  # a wave's flagged groups (_group_slots), in order
            out["groups"] = k.lds(f"{nm}_groups", i32, k.W * self._group_slots(k))
            if not self.gmax.marks_unselectable:
                # non-zero: the row holds an unselectable score (its refined bin 0), whose
                # group's maximum may not show it: every group is scanned
                out["unsel"] = k.lds(f"{nm}_unsel", u32, 1)
        if self.solo_check:
            out["solo"] = k.lds(f"{nm}_solo", u32, 1)
        if self.finishes:
            S, F = c.max_slices, c.finish_max
            out["fin"] = k.lds(f"{nm}_fin", i32, FIN_WORDS)
            out["fin_key"] = k.lds(f"{nm}_fin_key", u32, -(-F // LOAD_KEYS) * LOAD_KEYS)
            out["fin_slice"] = k.lds(f"{nm}_fin_slice", i32, F)
            # the directory of the row's lists laid end to end, as the solo finish's
            out["fin_off"] = k.lds(f"{nm}_fin_off", i32, S + 1)
            out["fin_len"] = k.lds(f"{nm}_fin_len", i32, S)
            out["fin_gt"] = k.lds(f"{nm}_fin_gt", i32, S)  # per slice: candidates above,
            out["fin_eq"] = k.lds(f"{nm}_fin_eq", i32, S)  # at the threshold
        if self.buckets:  # where each bucket's next key goes, and its starts' wave sums
            out["bucket_at"] = k.lds(f"{nm}_bucket_at", u32, c.bins(self.q))
            out["bucket_waves"] = k.lds(f"{nm}_bucket_waves", i32, max(1, k.W))
        if self.tail_finishes:
            S, F = c.max_slices, TAIL_FINISH_LDS
            out["fin"] = k.lds(f"{nm}_fin", i32, FIN_WORDS)
            # the candidates (keys padded with key 0 to whole rank groups) and their slices
            out["fin_key"] = k.lds(f"{nm}_fin_key", u32, F + TAIL_RANK_GROUP)
            out["fin_slice"] = k.lds(f"{nm}_fin_slice", i32, F)
            # per slice: its keys above the 15-bit prefix, and its candidates above and at
            # the final prefix
            out["fin_ab"] = k.lds(f"{nm}_fin_ab", i32, S)
            out["fin_gt"] = k.lds(f"{nm}_fin_gt", i32, S)
            out["fin_eq"] = k.lds(f"{nm}_fin_eq", i32, S)
            out["fin_waves"] = k.lds(f"{nm}_fin_waves", i32, max(1, k.W))  # a pass's sums
            out["fin_thr"] = k.lds(f"{nm}_fin_thr", i32, 3)  # ... and its threshold
            out["fin_hist"] = k.lds(f"{nm}_fin_hist", u32,
                                    max(4, max(c.bins(q) for q in range(c.passes,
                                                                        len(c.digits)))))
        if (self.compacts or self.defers) and c.batched_append and self.list_bases:
            out["list_at"] = k.lds(f"{nm}_list_at", i64, 2)
        if self._lean:
            if self._lean_copies:
                out["lean"] = k.lds(f"{nm}_lean", u32,
                                    self._lean_iterations(k) * self._lane_keys * k.W * k.L)
            elif k.lds_left() >= self._lane_keys * k.W * k.L * u32.bits // 8:
                # each lane's keys of an iteration, for its store rounds to pick from (where
                # the kernel's LDS has room: else they pick from registers, `_lean_scan`)
                out["lean_stage"] = k.lds(f"{nm}_lean_stage", u32,
                                          self._lane_keys * k.W * k.L)
        if self._scans_lds:
            step = _scan_step(k, self.scan_rounds)  # the scan reads whole iterations
            out["scan"] = k.lds(f"{nm}_scan", u32, -(-c.max_slice_keys() // step) * step)
            out["scan_bars"] = k.mbarrier(f"{nm}_scan_bars", self._scan_segments())
        if self.solo_runs:
            S = c.max_slices
            # the directory of the row's lists laid end to end (each padded to whole 4-key
            # groups): where slice s's list starts (and, at [S], their total length), and
            # its length
            out["solo_off"] = k.lds(f"{nm}_solo_off", i32, S + 1)
            out["solo_len"] = k.lds(f"{nm}_solo_len", i32, S)
            out["solo_hist"] = k.lds(f"{nm}_solo_hist", u32,
                                     max(4, max(c.bins(q) for q in range(2, c.passes))))
        return out

    # -- sel_h0: input checks --------------------------------------------------------------
    def _check_inputs(self, k, io, sl):
        """The row's key count (INVALID_N) and the slice's block-table pages (INVALID_PAGE).
        Returns what finishes the page check: nothing left to do, or with late_input_checks
        its reduce over loads already issued (`_page_loads`), for after other loads."""
        c = self.cfg
        bad_n = (sl.n_raw < 0) | (sl.n_raw > c.capacity)
        io.env.fail(bad_n, INVALID_N)
        if self.late_input_checks and len(self._page_rounds(k)) <= LATE_CHECK_LOADS:
            pages = self._page_loads(k, io, sl)
            return lambda: self._fail_on_pages(k, io, pages)
        bt = getattr(io.args, c.names.block_table)
        t = k.thread_id()
        T = k.W * k.L
        pg_lo = sl.lo >> PAGE_SHIFT
        pg_hi = (sl.hi + (PAGE - 1)) >> PAGE_SHIFT
        bad = k.lane_var(0, u32)
        for g in k.range(pg_lo, pg_hi, T):
            pg = g + t
            m = pg < pg_hi
            v = k.load(bt, sl.r * c.bt_width + k.min(pg, c.bt_width - 1), i32, mask=m)
            b = m & ((v < 0) | (v > MAX_PAGE))
            bad.set(bad.get() | k.cast(b, u32))
        any_bad = k.wave_reduce(bad.get(), "or").ne(0)
        io.env.fail(any_bad, INVALID_PAGE)
        return lambda: None

    def _page_rounds(self, k) -> range:
        """late_input_checks: block-table loads a thread issues, as many as the longest
        slice's pages take (a slice starts at a segment, so its pages span at most one more
        than its keys fill)."""
        c = self.cfg
        most = -(-c.max_slice_keys() // PAGE) + (c.segment % PAGE != 0)
        return range(-(-most // (k.W * k.L)))

    def _page_loads(self, k, io, sl) -> list:
        """late_input_checks: [(mask, page)] of the slice's block-table entries, a thread
        every T-th (`_page_rounds`)."""
        c = self.cfg
        bt = getattr(io.args, c.names.block_table)
        T = k.W * k.L
        pg_lo = sl.lo >> PAGE_SHIFT
        pg_hi = (sl.hi + (PAGE - 1)) >> PAGE_SHIFT
        out = []
        for i in self._page_rounds(k):
            pg = pg_lo + i * T + k.thread_id()
            m = pg < pg_hi
            out.append((m, k.load(bt, sl.r * c.bt_width + k.min(pg, c.bt_width - 1), i32,
                                  mask=m)))
        return out

    def _fail_on_pages(self, k, io, pages):
        """late_input_checks: INVALID_PAGE where a live entry of `_page_loads` is < 0 or
        past MAX_PAGE (any lane of the wave)."""
        bad = k.const(0, u32)
        for m, v in pages:
            bad = bad | k.cast(m & ((v < 0) | (v > MAX_PAGE)), u32)
        io.env.fail(k.wave_reduce(bad, "or").ne(0), INVALID_PAGE)
