"""The selection's configuration (SelectConfig), radix plan checks, slice bounds, and the
constants its stages share: budgets, the state words of a message, the finish's LDS words."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from layouts.scores import (FINE_DIGIT_BITS, FIRST_DIGIT_BITS, KEY_BITS, MAX_KEYS, MAX_SLICES,
                            ScoresLayout, TOPK)
from spec.config import KEY_PAGE_TOKENS



PAGE = KEY_PAGE_TOKENS  # tokens per page of the key caches
PAGE_SHIFT = PAGE.bit_length() - 1
MAX_PAGE = (2**31 - 1) // PAGE  # a slot page*64 + 63 must fit int32
DEFAULT_DIGITS = (6, 7, 7, 6, 6)
# the select kinds' plan off AMD: one exchange round fewer for 512-bin messages (H200,
# select_hist 512K x 8 36.2 -> 33.6 us, 64K x 8 25.1 -> 22.1; the fused index measured
# slower with it, 132.0 -> 136.4 us, and keeps DEFAULT_DIGITS: bench/NOTES.md v12)
SELECT_KIND_DIGITS = (6, 9, 9, 8)
# ... and where a row has more than WIDE_ROW_SLICES slices (rows 2 on the H200: 64 slices a
# row), whose first round sums every slice's message-1 histogram: a 256-bin second digit
# halves that (H200, same call, select_hist rows 2: 64K 21.87 -> 20.62 us, 512K 23.89 ->
# 22.69; rows 8 slower with it, 27.26 -> 28.38: bench/NOTES.md v18)
SELECT_KIND_DIGITS_WIDE = (6, 8, 9, 9)
# the plan with refined first digits (SelectConfig.fine_digits): 6 + 4 bits decided by sel_h1,
# the other 22 in three exchanged digits (the fused index's default plan has four after the
# first): 28 bits in the plan, the fine digit's 4 between its first two digits
FINE_DIGITS = (6, 8, 7, 7)
WIDE_ROW_SLICES = 32
UNROLL = 8  # message loads in flight per lane while summing the slices' histograms
SEGMENT_UNROLL = 8  # segment histograms a thread loads at once in sel_h0's sum: at 512K
# keys x 8 rows a thread's 8 segments in one round trip (H200 select_hist 27.26 -> 26.89 us,
# sel_h0 2.59 -> 2.30 a job: bench/NOTES.md v18; was 4)

SCAN_UNROLL = 4  # 16-byte score loads in flight per lane in a pass over the scores: with
# one, a CTA has a wave's worth of loads outstanding and a pass is latency-bound
SCAN_AHEAD = 1  # iterations of a pass over the scores whose loads are in flight while it
# works on one (SelectConfig.prefetch: a ring of SCAN_AHEAD iterations' registers)
LEAN_GROUPS = 4  # commit groups of the lean scan's async copies (SelectConfig.lean_scan): the
# scan starts on a slice's first quarter while the rest is still in flight
LEAN_LANE_KEYS = 16  # consecutive keys a lane an iteration of the lean scan (a 16-bit mask)
LEAN_REFILL_TURNS = 2  # SelectPass.lean_refill's two register sets taking turns
# SelectPass.late_input_checks: block-table loads a thread may hold across the first
# digits' fold (a slice of 512K / 16 keys takes 2 at 256 threads; a row in one slice 32)
LATE_CHECK_LOADS = 4
GROUPS_A_LANE = 4  # SelectConfig.group_skip: score_gmax words a lane reads an iteration (16 B)
# SelectPass.group_maxima_early: iterations of maxima a wave may load before the fold (a
# 16-byte load, 4 registers, and GROUPS_A_LANE x L LDS slots each; 512K / 16 slices at 8
# waves take 2)
EARLY_MAXIMA_ITERATIONS = 2
LEAN_WIDE_KEYS = 32  # ... with SelectPass.lean_lane_keys = 32: a 32-bit mask, half the iterations
LOAD_KEYS = 4  # keys of one 16-byte load
LEAN_SENTINEL = 1 << LEAN_LANE_KEYS  # above the mask: ctz is defined on an empty one
SCORE_PREFETCH_PIECE = 256  # bytes of one L2 prefetch of a slice's scores (SelectConfig.
# l2_prefetch): one page of f32 scores, so a row's end (whole pages) is a piece boundary
LIST_UNROLL = 4  # the same for a pass over a candidate list (SelectConfig.prefetch): lists
# of scores whose threshold sits in a crowded first-digit bin (the indexer's: ~17% of a row,
# ~5K keys a slice at 512K x 8) take several rounds a pass

# Solo finish (module doc): a row whose candidate lists hold at most this many keys in all is
# finished by ONE CTA. Its remaining passes read the lists from L2 (4 bytes a key a pass, 8
# in the emit): at 16K keys, three passes and the emit move 16K * (3 * 4 + 8) = 320 KB. A
# pass has SOLO_UNROLL 4-key groups a lane in flight (4K keys a round trip for 256
# threads: 4 round trips at 16K keys), the emit one round of 4 keys a lane ahead (16
# round trips): about 30 L2 round trips in all, against the three grid-wide exchange rounds
# it replaces (sel_h3, sel_h4, sel_out: each a release / poll / acquire chain over up to 64
# slices, several microseconds each on the H200). Smooth scores at 512K keys leave ~2% of
# a row after the first digit (~12K keys for normal scores at K = 2048): solo. A
# distribution whose threshold sits in a crowded first-digit bin keeps the rounds.
SOLO_MAX_CANDIDATES = 16384
SOLO_UNROLL = 4  # 4-key groups a lane loads at once in a solo histogram pass (the solo
# emit instead loads the next round while it writes one: two rounds' ballots and masks at
# once would spill SGPRs on AMD)
# Deferred lists (SelectConfig.defer_fat_bins): a row whose threshold first-digit bin holds
# more than max(n >> DEFER_SHIFT, DEFER_MIN_TOPKS * K) of its n keys gets its candidate lists
# from sel_h2, at the 13-bit prefix, not from sel_h1 at the 6-bit one. The first digit is
# the sign and 5 exponent bits: the indexer's scores put 3-66% of a row in one bin (H200,
# 512K x 8, bench/NOTES.md v8), and a list that long is written by sel_h1, then read by every
# later pass and the emit (select_hist on those scores: 62.5 us against 35.6 on normal ones).
# Deferring costs one more pass over the scores (sel_h2's); a bin under 1/16 of the row is
# cheaper to list.
DEFER_SHIFT = 4
DEFER_MIN_TOPKS = 4
FINISH_MAX_LIMIT = 4096  # SelectConfig.finish_max's ceiling: a key and a slice index a
# candidate in LDS (32 KB at the ceiling)
FINISH_TALLIES = ("gather", "rank", "place", "emit")  # a row finish's cycle accounts (a
# wave's clocks in each part, time_layers --timeline)
FINISH_UNROLL = 8  # 4-entry groups of the row's lists a lane loads at once in a row finish's
# gather (32 keys a lane: a row's ~12K list entries at 512K x 8 in 2 rounds of 256 lanes)
# SelectConfig.fold_first_digits: sel_h1 reads its row's segment histograms in bands of this
# many bins from the top, a band more while the row holds fewer than K keys in those read.
# 32 = the positive floats, half of each 256-byte histogram: one band for top-2048 of normal
# scores at 64K and 512K keys. H200 (bench/NOTES.md v28 call 3, select_hist rows 2 / 4 / 8,
# 64K / 512K, us): 16 bins 16.2 / 18.0, 18.2 / 19.2, 18.6 / 24.7 (two bands at 64K, where the
# threshold lies below 2); 32: 15.3 / 18.4, 17.2 / 19.6, 17.6 / 24.0; 64 (every bin):
# 15.0 / 20.2, 16.8 / 21.2, 17.1 / 25.0
FOLD_BAND_BINS = 32
TAIL_EXCHANGED = 2  # SelectConfig.tail_finish: digits exchanged before sel_out's finish
TAIL_FINISH_LDS = 2048  # candidates a tail finish holds in LDS (a key and a slice index each,
# 16 KB): for normal scores at 512K keys ~190 are left after 15 bits (bench/NOTES.md v27); a
# row with more is read again from the buckets in every local pass (exact, slower)
TAIL_AHEAD = 2  # 4-key groups of its slice's threshold bucket a lane of sel_out loads at once
# (16 lanes a slice at rows 8: 128 entries a round, for the ~12 a slice normal scores leave
# at 512K keys; rows 2, 4 lanes a slice: 32, for ~6)
TAIL_BUCKET_UNROLL = 4  # 4-key groups of its list a thread of sel_h1 buckets at once
TAIL_TALLIES = ("gather", "rank", "place", "emit")  # a tail finish's cycle accounts (a wave's
# clocks in each part, time_layers --timeline)
TAIL_RANK_GROUP = 32  # candidates one step of the rank reads (8 LDS broadcasts in flight)
# SelectConfig.tail_max_per_slice's value timed (bench/NOTES.md v47, --tune
# launch.tail_per_slice=1024): a row takes the tail finish when its first-digit threshold
# bin holds at most this many candidates a slice (the bucketing's scatter, ~2K a slice at 64K
# x 8 normal scores, cost sel_h1 +4 us there; 512K x 8 holds ~750 a slice, rows 2 at 64K
# ~470: bench/NOTES.md v27)
TAIL_MAX_PER_SLICE = 1024
TAIL_RANK_CHAINS = 8  # independent sums a lane's rank keeps (one chain of 64 dependent adds
# a step stalled ~13 clocks an add: bench/NOTES.md v27)
RDY_SOLO = 1 << 8  # in the value of a slice's rdy1 pair: its row leaves the rounds after
# message 1 (solo finish, or the tail finish of SelectConfig.tail_max_per_slice; module doc);
# the low bits are the state's X_DONE + 1, as in every rdy pair

# the state words after a message's histogram (and in LDS); X_NLIST: the slice's candidate
# list length (sel_h1 on); X_SOLO: 1 when the row leaves the rounds after message 1, to
# finish solo or by the tail (SelectConfig.tail_max_per_slice; decided by sel_h1 from
# message 0); X_DEFER: 1 when the row's lists are built by sel_h2 (SelectConfig.
# defer_fat_bins, decided by sel_h1 from message 0); X_EMITTED: 1 when the last histogram
# pass found the decision final and emitted the slice (SelectConfig.early_emit: sel_out then
# writes nothing); whole 4-word vectors
X_Q, X_D, X_NEED, X_DONE, X_ABOVE, X_NAN, X_BASE, X_TIEBASE, X_TOTAL, X_NANS, X_UNSEL, \
    X_UNSELS, X_NLIST, X_SOLO, X_DEFER, X_EMITTED = range(16)
NEXTRA = 16
# a row finish's LDS words (SelectPass._finish_row): whether this job finishes its row (set by
# the decision), the gather's append count, and the decision's threshold digit b and whether a
# bin lies above it (the slices' counts above the new prefix: cum[b + 1] of message q-1)
FIN_GO, FIN_COUNT, FIN_B, FIN_HAS_HI, FIN_T, FIN_T_ABOVE, FIN_N = range(7)
FIN_WORDS = FIN_N + 1
# (FIN_T: the row's final threshold key, the candidate ranked at `need`; FIN_T_ABOVE: how
# many candidates are larger; a tail finish's FIN_N: the row's candidates)
DIAG_WORDS = 4  # NaNs, keys selected, unselectable keys (-inf or NaN), visible keys

INVALID_PAGE = "invalid input: a block-table entry < 0 (or past 2**25) for a visible key"
INVALID_N = "invalid input: n_keys < 0 or past the scores' capacity"
FINE_MISMATCH = ("invalid input: the refined first digits (score_fine) of the threshold bin do "
                 "not add up to its count in score_hist")


# ----------------------------------------------------------------------------- config

@dataclass(frozen=True)
class Names:
    """Buffer and region names (a fused launch shares some with the scoring)."""
    scores: str = "scores"
    n_keys: str = "n_keys"
    block_table: str = "block_table"
    score_hist: str = "score_hist"
    score_done: str = "score_done"
    score_fine: str = "score_fine"
    score_rows: str = "score_rows"
    out: str = "topk"
    diag: str = "topk_diag"


@dataclass(frozen=True)
class SelectConfig:
    layout: ScoresLayout  # rows, capacity (scores per row), segment (first-digit granularity)
    max_slices: int = MAX_SLICES  # S: slice jobs per row per stage
    digits: tuple = DEFAULT_DIGITS
    topk: int = TOPK
    bt_width: int = 0  # block-table entries per row (0: capacity / 64)
    prefix: str = "sel"  # stage and region names
    names: Names = field(default_factory=Names)
    # the n_keys buffer holds each row's token position (its keys are 0..pos: n = pos + 1),
    # as the index launch's `positions`
    positions: bool = False
    # a row whose candidate lists hold at most this many keys in all is finished by one CTA
    # in sel_h2 (module doc, "Solo finish"); None (default, measured faster on the H200):
    # every row takes the exchange rounds
    solo_max_candidates: int | None = None
    # sel_h1 appends an iteration's SCAN_UNROLL rounds of candidates after ONE CTA barrier
    # (`_append`; H200 512K x 8: sel_h1 25 -> 22 us a job); False: a barrier a round
    # (`_append_round`), fewer registers: the AMD builds keep it (the fused index kernel
    # sits at its SGPR ceiling, the select kernel would grow from 98 to 130 VGPRs)
    batched_append: bool = True
    # loads issued ahead of the work that needs them, in every pass: the pass over the
    # scores (sel_h0 without first digits, sel_h1) loads iteration i + 1's scores into
    # registers before it works on iteration i's (`_scan_scores`); the passes over the lists
    # (sel_h2 ..) load LIST_UNROLL rounds at once; the emit loads its next round before it
    # writes one, and a round's block-table entries before its barrier. False: each round
    # loads then works (the AMD builds keep it: more VGPRs and lane masks, unmeasured there)
    prefetch: bool = True
    # rows whose threshold first-digit bin is crowded get their lists from sel_h2 (module
    # constants DEFER_*): sel_h1 only counts, sel_h2 reads the scores again and lists the
    # keys at or above the 13-bit prefix. False: sel_h1 always lists (the AMD builds keep it:
    # unmeasured there). Never with the solo finish (it reads the lists sel_h1 builds): see
    # `defers`.
    defer_fat_bins: bool = True
    # the selection's key passes (sel_h1, sel_h2 re-reading a deferred row) map scores to
    # keys without the special cases (-inf, NaN: `keys_and_specials`) and take the exact
    # mapping and the NaN / unselectable counts only in rounds where a lane of the wave holds
    # one (a wave-uniform branch): ~12 integer instructions a key fewer where there are none.
    # False: every key takes them (the AMD builds keep it: unmeasured there)
    rare_specials: bool = True
    # sel_h1 of a row that lists counts its next digit from the list it has just written (the
    # list's candidates, ~2% of the slice for smooth scores, L2-hot) after the scan, not in
    # the scan (a predicated LDS atomic a key, each in its own reconvergence region on
    # NVIDIA: H200 select_hist 512K x 8, the counts were 3.4 us of sel_h1's 13.6, bench/
    # NOTES.md v12); so does sel_h2 re-reading a deferred row's scores (its list at the
    # 13-bit prefix is the candidates). False: in the scan (the AMD builds keep it:
    # unmeasured there)
    count_from_list: bool = True
    # sel_h1 with scores from an input buffer (the select kinds) issues its first iteration's
    # score loads before it waits for message 0, so the wait hides their round trip (scores
    # an earlier stage of the launch wrote are read only after that wait's acquire). False:
    # after the wait (the AMD builds keep it: unmeasured there)
    early_loads: bool = True
    # sel_h0 with the scoring's first digits sums its slice's segments with every wave,
    # SEGMENT_UNROLL segments a thread in flight (`_sum_segments`), not with wave 0 walking
    # the segments one load round trip at a time (32 at 512K x 8): the first message, which
    # every later stage waits for. False: wave 0 alone (the AMD builds keep it: unmeasured)
    wide_segment_sums: bool = True
    # the last histogram pass (sel_h{P-1}) of a row whose decision is final when it decides
    # (for smooth scores after 24 of the 32 bits with (6, 9, 9, 8)) emits the slice itself and
    # flags it in its message's state, so sel_out's exchange round is no longer on that row's
    # path (sel_out, which still runs, writes nothing for it). Off by default: measured at
    # noise level on the H200 (select_hist 512K x 8 29.03 vs 29.42 us, 64K 20.26 vs 20.29;
    # fused index r8 W1 131.0 vs 129.7, W2 166.5 vs 165.8: bench/NOTES.md v12). Per run:
    # --tune sel_h3.early_emit=1,sel_out.early_emit=1 (the last pass and sel_out)
    early_emit: bool = False
    # sel_h0, when it does not read the scores itself (first digits given), asks the L2 for its
    # slice's scores (bulk prefetches of SCORE_PREFETCH_PIECE bytes, a hint: sm_90a; dropped
    # on AMD) before its own work, so that sel_h1's scan, a message round trip later, hits
    # the L2. Measured SLOWER on the H200 (select_hist 512K x 8 29.0 -> 31.6 us: sel_h0's
    # prefetches take ~2.4 us to issue, and sel_h1's scan is no faster from L2, so it is not
    # waiting on memory: bench/NOTES.md v13): off, a tunable (--tune sel_h0.l2_prefetch=1)
    l2_prefetch: bool = False
    # sel_h1 with scores from an input buffer (the select kinds; sm_90a) copies its slice's
    # scores into LDS with bulk copies (the TMA unit: one a segment, each on its own
    # mbarrier) issued before it waits for message 0, and scans them from LDS, waiting
    # segment by segment: the whole slice in flight at once instead of the scan's register
    # loads (v12: the loads alone took 6.8 of sel_h1's 12.6 us at 512K x 8, latency-bound;
    # v13: L2 residency alone did not help). LDS: the longest slice (128 KB at 512K x 8).
    # Measured SLOWER on the H200 (bench/NOTES.md v15, same call: select_hist 512K x 8 35.1
    # vs 29.2 us, 64K x 8 21.6 vs 20.5, 512K x 2 27.0 vs 25.5; exact): the set-up (32
    # mbarrier inits, each with its fence, and 32 copies from one lane) delays sel_h1's wait
    # by ~4.5 us, and the scan from LDS is no faster (10.3 vs 9.2 us after the wait): it is
    # bound by its instructions, not its loads. Off, a tunable (--tune sel_h1.lds_scan=1);
    # bulk copies are sm_90a only
    lds_scan: bool = False
    # the batched appends (sel_h1's lists, sel_h2's second ones) store through each list's
    # start in the slice, read back an iteration from LDS (a runtime value), not through the
    # arena: a list region's offset in the arena (tens of MB) does not fit a store's
    # immediate, and ptxas, which sees through any in-register copy, added it as a 64-bit
    # pair to each key's address, for each list (bench/NOTES.md v16's SASS of sel_h1's
    # listing loop: ~12 instructions a kept key for the two stores). False: through the arena
    list_bases: bool = True
    # the passes' digit counts add once a distinct digit a wave (KernelBuilder.count grouped:
    # match.any, sm_90a only), not once a lane. Measured SLOWER on the H200 (bench/NOTES.md
    # v18, same call: select 512K x 8 37.6 vs 33.5 us, sel_h0's local pass alone grouped
    # 36.5; select_hist 29.7 vs 29.0; fused index r8 W1 135.1 vs 124.0): off, a tunable
    # (--tune sel_h1.grouped_counts=1, per pass); AMD has no match instruction
    grouped_counts: bool = False
    # a round's consumer polls every slice's pair of the message it decides on (its own
    # among them) and takes ONE acquire before it reads its own state, instead of its own
    # pair, an acquire and its state first (a row decided final needs no other message)
    # and the others' pairs and a second acquire after: one poll round trip and one fence
    # fewer on every round's path. Every active slice publishes every message, so the
    # wait always ends. H200, same call (bench/NOTES.md v18): select_hist 512K x 8 28.67 ->
    # 27.36 us, 64K x 8 20.29 -> 18.86, 512K x 2 24.95 -> 23.65; fused index r8 W1 123.75
    # -> 122.10, r2 W2 91.41 -> 89.22. False: own first (the AMD builds keep it: unmeasured)
    one_wait: bool = True
    # with defers, sel_h2 writes a second list only for a deferred row (from its scores); a
    # listed row's later passes and emit read sel_h1's list again (chosen by the state's
    # X_DEFER), instead of sel_h2 copying it down to the entries at or above the 13-bit
    # prefix: no append, no list stores and no release of them on sel_h2's path, for lists
    # of a few hundred entries a slice that every pass reads in one round trip either way.
    # False: every row's second list (the later passes read only the second lists). On in
    # the select kinds off AMD (config_for; H200 v18 call 5, same call: select_hist 512K x 8
    # 27.07 -> 26.50 us, 512K x 2 22.74 -> 21.88; exact 44 of 44); the fused index, whose
    # rows mostly defer, keeps it off (unmeasured there), as AMD
    lean_lists: bool = False
    # sel_h1 of a listed row (and sel_h2 re-listing a deferred one) lists with the lean loop
    # (`_lean_scan`): a lane's 16
    # consecutive keys an iteration, the keep test one float compare a key against the
    # threshold prefix's least score, the keeps packed into a 16-bit mask, the lanes'
    # offsets from one ballot a count bit (not four chains of lane swaps), and store rounds
    # over the kept keys only (a round a kept key of the wave's busiest lane) instead of two
    # predicated stores for every key. Lists, messages and selections bit-identical to the
    # default scan. H200, same call (bench/NOTES.md v22): select_hist 512K x 8 26.55 / 26.41
    # -> 24.83 / 25.21 us, 64K x 8 19.0 -> 18.7; fused index r8 W1 123.3 / 122.4 -> 120.7 /
    # 120.2, W2 155.0 / 154.7 -> 150.9 / 150.4. On off AMD (MEASURED_ON_NVIDIA; AMD
    # unmeasured); the old loop: --tune sel_h1.lean_scan=0,sel_h2.lean_scan=0
    lean_scan: bool = False
    # with lean_scan and scores from an input buffer (the select kinds): the slice copied
    # into LDS by per-lane async copies (cp.async, LEAN_GROUPS commit groups) issued before
    # the wait for message 0. Measured SLOWER on the H200 (bench/NOTES.md v22: select_hist
    # 512K x 8 32.4-32.9 vs 26.3 us; the acquire fence after the wait for message 0 waits
    # for wave 0's copies: message 0 seen 9.0 us into sel_h1's job against 1.5), exact
    # (check_topk 55 of 55): off, a tunable (--tune sel_h1.lean_scan=1,sel_h1.lean_copies=1)
    lean_copies: bool = False
    # a histogram pass from sel_h2 on whose decision leaves at most this many keys of the row
    # with the prefix found (the row's candidates: for normal scores at 512K keys a few dozen
    # after 15 bits) finishes the row itself (module doc, "Row finish"): every slice's CTA
    # gathers the row's candidates from every slice's list into LDS, decides the remaining
    # digits locally (the same digits and counts the rounds would exchange), places its own
    # slice and emits it, so the later rounds pass the row through. None: never (the rounds).
    # At most FINISH_MAX_LIMIT (its LDS). Exact on the H200 (check_topk 44 of 44, through
    # index 2 of 2, both forms) but SLOWER (bench/NOTES.md v24: select_hist 512K x 8 30.3
    # with local histogram passes, 33.1-33.4 ranked, against 24.9-25.2 us; fused index r8
    # W1 130-132 against 120): after 15 bits a 512K row still has ~200 candidates (the
    # prefix is 6 bits of mantissa), and the finish's CTA-local work is latency-bound: its
    # cycle accounts (timeline) gather ~5.6 us (the row's ~12K list entries), rank ~4.3,
    # place 0.3, emit 1.1, where the two rounds it replaces end the launch ~4.6 us after
    # sel_h2. Off; --tune launch.finish_max=N
    finish_max: int | None = None
    # a round's publish computes the message's cum histogram with every wave
    # (`lanes._cta_suffix_sums`: a thread's few bins, one lane scan, the waves' totals through
    # LDS, in place in LDS hist), and wave 0 copies them out as 4-word vectors, releases and
    # announces, instead of walking the bins L at a time itself (16 lane scans in series at
    # 512 bins). SLOWER on the H200 at rows 8, in this form and in a first one where every
    # wave stored and released its own bins (bench/NOTES.md v28 calls 1 / 2: select_hist 512K
    # x 8 24.9 -> 29.8-30.2 us, 64K x 8 19.1 -> 23.0, fused index r8 W1 119.4 -> 124.1; rows
    # 2 and 4 at noise). Call 5's timeline: the publish itself is not slower; the next
    # round's sums of its messages take ~1 us more a round, not understood. False: wave 0's
    # walk
    cta_publish: bool = False
    # with lean_scan: each wave lists its own contiguous span of the slice (the CTA's lean
    # iteration count of one wave's keys each) into scratch lists (SelectPass.span_lists),
    # with no CTA barrier in the loop (the default exchanges the waves' counts through LDS
    # behind one every iteration: the waves in lockstep), then one barrier and each wave's
    # entries copied after the waves' before it, the next digit counted on the copies
    # (`LeanScan._gather_spans`): the default's lists, counts and messages. Timed (bench/
    # NOTES.md v31, an H100): select_hist r8 64K / 512K 17.96 / 24.87 -> 18.49 / 25.13 us,
    # no gain; False
    lean_spans: bool = False
    # with lean_spans: sel_h1 reads 16-key group maxima (`score_gmax`) and lists only the
    # groups whose maximum is not below its threshold, a flagged group a lane (bench/NOTES.md
    # v39: 7-33% of a row's groups hold a listed key); the same lists, counts and messages.
    # Timed (bench/NOTES.md v40-v43, the fused index r8 512K): sel_h1 18.98 -> 14.34 us
    # (its scan 11.5 -> 6.6), the scoring +1.5 .. +2.9 us for the maxima; in one process
    # B/A 0.987-0.993 (W1), 0.979-0.994 (W2), top-k exact. On in the fused index on sm_90a
    # at rows 8 and more by default (stages.index.GROUP_SKIP_ON_NVIDIA), its maxima the
    # scoring's (a row with a NaN or -inf scans every group: it needs fine_digits); the
    # select_hist kind takes them as an input on request (`--tune launch.group_max=1`:
    # score_gmax, +inf where a group holds a NaN or -inf, so no row flag is needed): on an
    # H100 512K x 8 24.80 -> 23.39 us, but 64K x 8 18.12 -> 18.73 (bench/NOTES.md v44-v45),
    # so an option there. False
    group_skip: bool = False
    # with first digits given (the scoring's segment histograms: select_hist, the fused
    # index), sel_h1 sums its ROW's segments itself (every slice all of them, 16-byte loads,
    # its own slice's apart) and decides the first digit locally: no sel_h0 stage, no message
    # 0 and its exchange round (its release, the wait for the row's last slice, the sums of
    # the row's messages), for 16x the segment reads (128 KB a slice at 512K keys, from the
    # L2 after the first; read in bands from the top, FOLD_BAND_BINS). The same decision,
    # lists and selection as sel_h0's round. H200, same call (bench/NOTES.md v28 call 3):
    # select_hist rows 2 / 4 / 8 at 64K 18.2 / 20.0 / 18.8 -> 15.3 / 17.2 / 17.6 us, at 512K
    # 20.4 / 21.5 / 24.8 -> 18.4 / 19.6 / 24.0; the fused index r8 slower (W1 119.9 ->
    # 121.2, W2 151.5 -> 154.4: kept off there). On in select_hist off AMD (config_for);
    # False: sel_h0 sums the slice's segments and publishes message 0
    fold_first_digits: bool = False
    # the row finished after TWO exchanged digits, by sel_out itself (module doc, "Tail
    # finish"): sel_h1 also writes its candidates bucketed by their second digit (a counting
    # sort into `list_bucket_keys`); sel_out, deciding on message 1 (15 bits of (6, 9, ..)),
    # finds the row's few candidates left as one bucket of every slice, gathers them into LDS
    # (more than TAIL_FINISH_LDS are read again from the buckets: exact at any count),
    # resolves the plan's remaining digits by LDS histogram passes, places its slice and
    # emits it. Stages sel_h0, sel_h1, sel_out. H200 (bench/NOTES.md v27, same call):
    # select_hist rows 2 64K / 512K 20.52 / 21.69 -> 18.30 / 20.16 us, rows 4 20.67 / 23.05 ->
    # 20.35 / 21.70; rows 8 slower (sel_h1's bucketing: 24.8 -> 25.3-25.7 at 512K, 18.9 ->
    # 25.6-26.2 at 64K). On in the select kinds off AMD past WIDE_ROW_SLICES slices a row
    # (config_for); False: every digit exchanged (rows 8, the fused index, AMD: unmeasured)
    tail_finish: bool = False
    # the tail finish or the rounds chosen per row at run time: sel_h1, deciding the first
    # digit, sends a row to the tail finish (it buckets its candidates, sel_h2 .. return at
    # once, sel_out finishes the row from message 1 as tail_finish's sel_out does) when the
    # row's threshold bin holds at most this many candidates a slice of the row, and not
    # crowded (defer_fat_bins); every other row takes the rounds of the full plan. Why: the
    # tail finish is faster where the bin is narrow (select_hist 512K x 8 on an H100, v45:
    # 21.79 -> 19.64 us) and much slower where it holds half the row (64K x 8: 18.8 ->
    # 26.8, sel_h1's bucketing), and which one a row is depends on its scores. Measured
    # SLOWER (bench/NOTES.md v47, H100, N = TAIL_MAX_PER_SLICE, select_hist r8 against the
    # rounds: 64K / 128K / 256K / 512K 1.087 / 0.953 / 0.970 / 1.026; r2 / r4 against the
    # static tail 1.26-1.39 / 1.14-1.16): a rounds row's sel_h3 and sel_out poll rdy1 before
    # their own wait, and a tail row's sel_h2 and sel_h3 jobs wait for their slice's sel_h1
    # queued ahead of sel_out. None: off (tail_finish, or the rounds); --tune
    # launch.tail_per_slice=N sets it. Not with fine_digits: its choice weighs the 6-bit bin,
    # which refined digits narrow (their tail_finish is static)
    tail_max_per_slice: int | None = None
    # the tail finish or the rounds chosen per row by its key count: a row of at least this
    # many visible keys takes the tail finish, a shorter one the rounds of the full plan.
    # Every job computes the choice from n_keys, which it reads first anyway, so nothing is
    # exchanged for it: no job polls rdy1 to learn its row's form (what made the choice by
    # the threshold bin, tail_max_per_slice, slower: v47), a tail row's sel_h2 .. return
    # before any wait. Why the key count: the bucketing's cost grows with the threshold bin's
    # share of a slice, which falls as the row grows (normal scores at rows 8: ~2K keys a
    # slice at 64K, ~750 at 512K; bench/NOTES.md v27, v45). A tail row is never deferred
    # (defer_fat_bins: it has sel_h1's list to bucket; the tail finish is exact at any
    # count). With fine_digits too (the fused index: sel_h1 buckets its 10-bit prefix's
    # candidates in a tail row). None: off; --tune launch.tail_min_keys=N sets it (the select
    # kinds, index). Not with tail_max_per_slice (the other choice)
    tail_min_keys: int | None = None
    # refined first digits (layouts/scores.py): the scoring also counts the top 10 bits of
    # every score per (job, row) into `score_fine` [fine_parts, rows, 1024]; sel_h1 decides
    # the first digit on the 64 bins as before, then its 4 sub-bits on the 16 sub-bins of the
    # threshold bin summed over the parts (one round trip of 64 bytes a part), so its lists
    # hold the keys at or above a 10-bit prefix. Why: the indexer's scores put 6-86% of a row
    # in one 6-bit bin (8 binades), 0.4-1.8% in one 10-bit bin (bench/first_digit_bins.py):
    # with them no row is crowded, none needs sel_h2's second scan (defer_fat_bins is off
    # with it). A slice's keys above the prefix (X_ABOVE) are its list's length minus its
    # count at the prefix (count_from_list). The plan then has 28 bits (FINE_DIGITS). Timed
    # (bench/NOTES.md v31, an H100): the fused index r8 -6 us, its NVIDIA default
    # (stages.index.FINE_DIGITS_ON_NVIDIA); select_hist on normal scores +4 us (no bin is
    # crowded there); False
    fine_digits: bool = False
    fine_parts: int = 0  # partial fine histograms a row (the scoring's jobs; fine_digits)
    # with fine_digits and fold_first_digits, in the fused index: the scoring stores each
    # job's first-digit counts a row (its refined counts summed by 16: `score_rows`
    # [fine_parts, rows, 64]) and sel_h1's fold sums the row's fine_parts of them instead of
    # its segment histograms (132 parts a row against 512 segments at 512K keys: a quarter
    # of the loads, v32: the fold's sums 3.9 us of sel_h1's job); no own_cum (refined digits
    # take X_ABOVE from the list), so the scoring keeps no segment histograms at all
    # (IndexScore.segment_hist: an LDS atomic a score fewer). Prepared, untimed
    # (bench/NOTES.md v32); False
    row_parts: bool = False

    def __post_init__(self):
        lay = self.layout
        if self.fine_digits:
            bad = [name for name, on in (("defer_fat_bins", self.defer_fat_bins),
                                         ("solo_max_candidates",
                                          self.solo_max_candidates is not None),
                                         ("finish_max", self.finish_max is not None))
                   if on]
            if bad or not self.count_from_list:
                raise ValueError("fine_digits needs count_from_list and excludes "
                                 + ", ".join(bad or ["nothing else"]) + " (its keys above "
                                 "the prefix come from the list's count; every row lists)")
            if self.fine_parts < 1:
                raise ValueError(f"fine_digits: fine_parts = {self.fine_parts} must be >= 1 "
                                 "(the partial fine histograms of a row)")
        if self.group_skip and not (self.lean_scan and self.lean_spans):
            raise ValueError(f"group_skip: sel_h1 lists the flagged groups in the lean loop's "
                             f"own spans: it needs lean_scan and lean_spans (here "
                             f"{int(self.lean_scan)} and {int(self.lean_spans)}; lean_scan is "
                             f"one of the NVIDIA-measured options, off on AMD; lean_spans: "
                             f"--tune launch.lean_spans=1)")
        if self.row_parts and not (self.fine_digits and self.fold_first_digits):
            raise ValueError("row_parts: sel_h1's fold sums the scoring's per-job counts; it "
                             "needs fine_digits and fold_first_digits")
        for which, value in (("tail_max_per_slice", self.tail_max_per_slice),
                             ("tail_min_keys", self.tail_min_keys)):
            if value is None:
                continue
            bad = [name for name, on in (("tail_finish", self.tail_finish),
                                         ("fine_digits", which == "tail_max_per_slice"
                                          and self.fine_digits),
                                         ("finish_max", self.finish_max is not None),
                                         ("solo_max_candidates",
                                          self.solo_max_candidates is not None),
                                         ("tail_min_keys", which == "tail_max_per_slice"
                                          and self.tail_min_keys is not None)) if on]
            if bad:
                raise ValueError(f"{which} (a tail finish chosen per row) excludes "
                                 f"{', '.join(bad)}")
            if not 1 <= value <= MAX_KEYS:
                raise ValueError(f"{which} = {value} must be None or in 1..{MAX_KEYS}")
        if (self.tail_finish or self.tail_rows) and len(self.digits) <= TAIL_EXCHANGED:
            which = "tail_finish" if self.tail_finish else "tail_max_per_slice" \
                if self.tail_max_per_slice is not None else "tail_min_keys"
            raise ValueError(f"{which} needs a plan of {TAIL_EXCHANGED + 1} or more digits, not "
                             f"{tuple(self.digits)} (two are exchanged, the rest local)")
        if self.tail_finish:
            if self.finish_max is not None or self.solo_max_candidates is not None:
                raise ValueError("tail_finish excludes finish_max and solo_max_candidates "
                                 "(each finishes a row from the lists its own way)")
        if self.finish_max is not None:
            if not 1 <= self.finish_max <= FINISH_MAX_LIMIT:
                raise ValueError(f"finish_max = {self.finish_max} must be None or in "
                                 f"1..{FINISH_MAX_LIMIT}")
            if self.solo_max_candidates is not None:
                raise ValueError("finish_max and solo_max_candidates exclude each other (both "
                                 "finish a row from every slice's list)")
        if self.solo_max_candidates is not None and \
                not 0 <= self.solo_max_candidates <= MAX_KEYS:
            raise ValueError(f"solo_max_candidates = {self.solo_max_candidates} must be None "
                             f"or in 0..{MAX_KEYS}")
        if lay.capacity > MAX_KEYS:
            raise ValueError(f"{lay.capacity} scores per row exceed the selection's limit of "
                             f"{MAX_KEYS} (512K keys)")
        if not 1 <= self.max_slices <= MAX_SLICES:
            raise ValueError(f"max_slices = {self.max_slices} must be in 1..{MAX_SLICES}")
        object.__setattr__(self, "digits", check_digits(self.digits, self.fine_digits))
        if lay.segment % 4:
            raise ValueError(f"segment {lay.segment} must be a multiple of 4 keys (16-byte loads)")
        if lay.capacity % PAGE:
            raise ValueError(f"capacity {lay.capacity} must be whole pages of {PAGE}")
        if not 1 <= self.topk <= (1 << 20):
            raise ValueError(f"topk {self.topk} out of range")
        if self.bt_width == 0:
            object.__setattr__(self, "bt_width", lay.capacity // PAGE)
        if self.bt_width * PAGE < lay.capacity:
            raise ValueError(f"block table of {self.bt_width} pages cannot cover "
                             f"{lay.capacity} keys")

    # shapes ---------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return self.layout.rows

    @property
    def capacity(self) -> int:
        return self.layout.capacity

    @property
    def segment(self) -> int:
        return self.layout.segment

    @property
    def segments(self) -> int:
        return self.layout.segments

    @property
    def passes(self) -> int:
        """Exchanged histogram passes (stages sel_h0 .. sel_h{passes-1} before sel_out):
        every digit of the plan, or two with tail_finish (sel_out resolves the rest)."""
        return TAIL_EXCHANGED if self.tail_finish else len(self.digits)

    @property
    def solo(self) -> bool:
        """Whether rows with few candidates may finish solo (module doc)."""
        return self.solo_max_candidates is not None

    @property
    def tail_rows(self) -> bool:
        """Whether a row may take the tail finish at run time (tail_max_per_slice, or
        tail_min_keys)."""
        return self.tail_max_per_slice is not None or self.tail_min_keys is not None

    @property
    def tail_by_bin(self) -> bool:
        """Whether sel_h1 chooses a row's form from its threshold bin (tail_max_per_slice),
        which the later jobs learn from rdy1; otherwise every job computes it
        (tail_min_keys, `tail_row`)."""
        return self.tail_max_per_slice is not None

    @property
    def tail_by_keys(self) -> bool:
        """Whether every job computes its row's form from the row's key count (tail_min_keys,
        `tail_row`): nothing polled for it."""
        return self.tail_min_keys is not None

    def tail_row(self, n):
        """With tail_min_keys: uniform i1, whether a row of `n` visible keys takes the tail."""
        return n >= self.tail_min_keys

    @property
    def leaves_rounds(self) -> bool:
        """Whether sel_h1 may send a row off the rounds after message 1 (X_SOLO and rdy1's
        RDY_SOLO bit): to finish solo, or by the tail (tail_rows)."""
        return self.solo or self.tail_rows

    def tail_view(self) -> "SelectConfig":
        """With tail_rows: the config whose sel_out finishes a row after two exchanged digits
        (tail_finish), what the hybrid's sel_out runs for a tail row."""
        return replace(self, tail_finish=True, tail_max_per_slice=None, tail_min_keys=None)

    @property
    def defers(self) -> bool:
        """Whether crowded rows get their lists from sel_h2 (defer_fat_bins, without solo;
        never with tail_finish, which has no sel_h2)."""
        return self.defer_fat_bins and not self.solo and not self.tail_finish

    def bins(self, q: int) -> int:
        return 1 << self.digits[q]

    def msg_words(self, q: int) -> int:
        """Words of one slice's message of any pass: the largest histogram and the state
        (one stride for every pass: one constant fewer for the kernel to keep)."""
        return self.state_word + NEXTRA

    @property
    def state_word(self) -> int:
        """Where a message's state starts (after the largest histogram, in every pass)."""
        return max(4, max(1 << d for d in self.digits))

    def msg(self, q: int) -> str:
        return f"{self.prefix}_msg{q}"

    def rdy(self, q: int) -> str:
        return f"{self.prefix}_rdy{q}"

    @property
    def first_pass(self) -> int:
        """The first histogram pass built: 1 when sel_h1 folds the first digit in
        (fold_first_digits), else 0."""
        return 1 if self.fold_first_digits else 0

    def stage_name(self, q: int) -> str:
        return f"{self.prefix}_out" if q == self.passes else f"{self.prefix}_h{q}"

    def n_of(self, values) -> np.ndarray:
        """Visible keys per row from the n_keys buffer's values."""
        return np.asarray(values, np.int64) + (1 if self.positions else 0)

    def slices(self, n_keys: int) -> list:
        return self.layout.slices(n_keys, self.max_slices)

    def max_slice_keys(self) -> int:
        """The longest slice of any row (a row of n < capacity keys has slices of
        floor or ceil(nseg(n) / slices) segments, never more than a full row's longest):
        also the candidate list's room per slice, so a list can never overflow."""
        nseg = self.segments
        s = max(1, min(self.max_slices, nseg))
        b = [round(i * nseg / s) for i in range(s + 1)]
        return max(b[i + 1] - b[i] for i in range(s)) * self.segment

    @property
    def list_keys(self) -> str:
        """Region of the slices' candidate lists' keys [rows, S, max_slice_keys] u32."""
        return f"{self.prefix}_lkey"

    @property
    def list_pos(self) -> str:
        """... and of their token positions [rows, S, max_slice_keys] i32."""
        return f"{self.prefix}_lpos"

    @property
    def list_bucket_keys(self) -> str:
        """With tail_finish: sel_h1's candidates (keys of the first threshold digit's prefix)
        in descending order of their second digit, a slice's bucket b after the buckets
        above it ([rows, S, max_slice_keys] u32, positions in no order)."""
        return f"{self.prefix}_lkeyb"

    @property
    def list2_keys(self) -> str:
        """With `defers`: sel_h2's lists (the keys at or above the 13-bit prefix, from the
        scores of a deferred row or from sel_h1's list), which the later passes read."""
        return f"{self.prefix}_lkey2"

    @property
    def list2_pos(self) -> str:
        return f"{self.prefix}_lpos2"


def check_digits(digits, fine: bool = False) -> tuple:
    """A radix plan as a tuple of ints, or a ValueError naming it: the first digit the
    scoring's FIRST_DIGIT_BITS, at least two digits of 2..10 bits (a pass's histogram lives in
    LDS and in every slice's message), 32 bits in all, or 32 - FINE_DIGIT_BITS with refined
    first digits (`fine`: the fine digit's bits are not a pass of their own)."""
    d = tuple(int(x) for x in digits)
    total = KEY_BITS - (FINE_DIGIT_BITS if fine else 0)
    if len(d) < 2 or d[0] != FIRST_DIGIT_BITS or sum(d) != total or min(d) < 2 or max(d) > 10:
        raise ValueError(f"digits {d}: the first must be {FIRST_DIGIT_BITS} bits (the "
                         "scoring's first digit), at least two, 2..10 bits each, "
                         f"{total} in all" + (" (with fine_digits)" if fine else ""))
    return d


def slice_bounds(n: int, segment: int, max_slices: int, s: int) -> tuple[int, int, int]:
    """(slices used, lo, hi) of slice s: the kernel's integer formula (round half to even,
    as Python's round in ScoresLayout.slices), mirrored for tests."""
    nseg = -(-n // segment)
    sc = max(1, min(max_slices, nseg))

    def bound(i):
        num = i * nseg
        q, rem = divmod(num, sc)
        up = 2 * rem > sc or (2 * rem == sc and q & 1)
        return (q + int(up)) * segment
    return sc, bound(s), min(bound(s + 1), n)

