"""Exact top-k selection (DESIGN.md section 7) of up to 512K scores per row, one row's keys
split into slices run by different CTAs that exchange per-digit histograms.

What it computes. For each row r with n = n_keys[r] visible keys (token positions 0..n-1 of
its request), the positions of the top min(K, selectable) scores under one total order:
larger score first, -0.0 == +0.0, ties to the lower position, -inf and NaN never selected;
written as int32 physical slots block_table[r, p // 64] * 64 + p % 64 in ascending position,
padded with -1 to K (= 2048). A diagnostic row per row: (NaNs among the visible keys, keys
selected, unselectable keys (-inf or NaN), visible keys).

Keys. A score maps to the order-preserving u32 key of layouts.scores (integer operations
only: no float compare, so denormals and flush-to-zero cannot matter); key 0 = never
selected (-inf, NaN).

Radix plan. Digits (6, 7, 7, 6, 6) from the top (configurable, `--tune
launch.select_digits=6-9-9-8`; the select kinds off AMD take (6, 9, 9, 8): SELECT_KIND_DIGITS;
the first digit is the contract's 6 bits, key >> 26). Pass q histograms, over the candidate
keys of a slice (those whose first d resolved bits equal the prefix Q found so far; key 0 excluded from pass 1 on),
the next digit, and publishes the histogram as SUFFIX sums cum[b] = #(digit >= b).

Stages (one job per (row, slice) each; S = max_slices jobs per row, a row uses
max(1, min(S, ceil(n / segment))) of them, exactly layouts.scores.ScoresLayout.slices):

    sel_h0   first-digit histogram: a local pass over the slice's scores, or the sum of the
             scoring's per-segment `score_hist` (tagged pairs or an input buffer): no pass
    sel_hq   (q = 1..P-1) wait for every slice's message q-1, sum their cum histograms,
             find the threshold digit b (the last bin with Gcum[b] >= need), then count
             the next digit among the keys with the longer prefix; publish message q
    sel_out  the same decision on message P-1 (now exact: 32 bits), then emit

(with the solo finish, below: sel_h1 also decides whether the row finishes solo; from sel_h2
on a job first reads that from its own slice's rdy1 pair, and for a solo row all but
sel_h2's slice-0 job return at once.)

Candidate lists. Only sel_h0 (local pass) and sel_h1 read the scores (and sel_h2, for a
deferred row: below). sel_h1, knowing the
first threshold digit, appends every selectable key of its slice whose prefix is >= the
threshold (the candidates and the keys already above: a subsequence of the slice holding
every key that can still be selected) with its position to the slice's list, in position
order, and puts its length in the state (X_NLIST). sel_h2.. and sel_out read the list, not
the scores: for smooth scores it holds a first-digit bin's share of the slice plus the keys
above it (at 512K keys x 8 rows a pass reads ~3 KB of list instead of 128 KB of scores). A
list has room for its whole slice ([rows, S, longest slice]), so any distribution (all keys
equal: every key a candidate) is exact; nothing is dropped or rescanned. The list is plain
data: every wave of sel_h1 releases its stores before wave 0 announces message 1, and the
readers acquire after polling (the same chain as the messages). With count_from_list (NVIDIA)
sel_h1's scan only keeps (one compare a key) and the next digit is counted afterwards from the
list just written, read back after a CTA barrier: every candidate is in it. With lean_scan
(NVIDIA) the listing is `_lean_scan`: a lane's 16 consecutive keys an iteration kept by one
float compare against `score_floor` of the threshold prefix, ballot-counted offsets, and
store rounds over the kept keys only (the same list, bit for bit).

Deferred lists (SelectConfig.defer_fat_bins, NVIDIA). The first digit is the sign and five
exponent bits: scores from the indexer put 3-66% of a row in the threshold's bin (H200, 512K
x 8), and such a list is written by sel_h1 and read by every later pass. A row whose bin
holds more than max(n / 16, 4K) keys (decided on message 0, the same on every slice: state
word X_DEFER) is only counted by sel_h1; sel_h2, knowing 13 bits, reads the slice's scores
again and lists the keys at or above that prefix. sel_h2 then owns a second list per slice
(lkey2 / lpos2): for the other rows it copies down sel_h1's list to the entries at or above
the 13-bit prefix; sel_h3.. and sel_out read the second list. (A region has one writer
stage, so the second list is sel_h2's own.)

Exchange. A message is plain data (a PlainBuffer [rows, S, 128 + 12] u32: the cum
histogram and the slice's state) released by a device-scope release fence and then
announced by a tagged pair (`rdy`, one per slice); a consumer's wave 0 polls the pairs of
all slices of its row at once (one lane a slice), takes an acquire fence, and the CTA reads
the messages with 16-byte loads (8 slices' loads in flight a lane). Every slice computes
the same decision from the same data, so they agree without a coordinator; decisions and
state go through LDS from wave 0, so a CTA's waves never diverge around a barrier.

Early exit. When the threshold bin holds exactly the keys still needed, or fewer keys than
needed remain (a row with <= K selectable keys), the decision is final before 32 bits:
the later stages pass the state through without reading keys or other slices. (Never on
the first digit: the scoring's bin 0 may count key 0; pass 1 recounts without it.)

Solo finish. After the first digit the candidates are few for smooth scores (~2% of a
row), and the exchange rounds sel_h3, sel_h4 and sel_out cost more than one CTA's passes
over them. sel_h1, deciding on message 0, knows the row's total list length: Gcum[b] keys
have a first digit >= the threshold digit b (exactly the lists' keys; for b = 0 an upper
bound, key 0 being counted there), the same number on every slice. When it is at most
SelectConfig.solo_max_candidates (None, the default: never; SOLO_MAX_CANDIDATES is the
bound the H200 was measured with, see below) the row is solo: the
state's X_SOLO, and the RDY_SOLO bit of every slice's rdy1 value (a tagged pair: no fence
to read it). Who waits on what, per job of a solo row / of another row:

    sel_h1   as before, both (it computes the flag)
    sel_h2   slice 0: every slice's rdy1 (as before), decides on message 1, then finishes the
             row alone: a directory (LDS) of the row's lists laid end to end in slice order,
             each padded to whole 4-key groups; passes 2..P-1 over all of them (16-byte loads,
             SOLO_UNROLL groups a lane in flight, the slice by a binary search of the
             directory), each an LDS histogram and wave 0's decision on it with CTA barriers
             for the exchange; then the emit (the rounds' emit, over all lists: keys above the
             final prefix and the first `need` ties, offsets from ballot prefix counts) and
             the padding and diagnostic row. Other slices: their own rdy1 only, then nothing.
             Other rows: their own rdy1, then as before.
    sel_h3.. and sel_out: their own rdy1 (an earlier stage: the topological order holds),
             then nothing for a solo row; as before otherwise (rdy q-1).

Measured on the H200 (bench/NOTES.md v7), with SOLO_MAX_CANDIDATES: exact on every
distribution, but SLOWER than the rounds (512K x 8: select_hist 60.0 us vs 44.3; 64K x 8:
29.5 vs 28.2): one CTA's passes are latency-bound (a round trip per 4K keys), and the
rounds it replaces overlap across 128 CTAs. Off by default; kept, tested, for a chip or
a row shape where it pays.

The solo passes make the rounds' decisions on the same counts (the sum over slices of the
histograms the messages would carry), and the emit walks the same keys in the same order:
outputs and diagnostics are bit-identical to the rounds' (messages 2.. of a solo row are
never written). Its reads are the lists (L2) and message 1; LDS holds histograms and the
directory only, so any distribution within the bound is exact (all ties too).

Row finish (SelectConfig.finish_max; off, measured slower on the H200). A pass from sel_h2 on
whose decision leaves at most finish_max keys of the row with the prefix found (the same
count on every slice), and whose lists are complete (sel_h2: not a deferred row), finishes
the row in every slice's CTA at once: it gathers the candidates from every slice's list
(the directory of the solo finish, a binary search a 4-entry group) into LDS, ranks each by
key among them, takes as threshold T the key whose candidates span rank `need`, counts each
slice's candidates above and at T, places its own slice (as `_placement`, from those counts
and message q-1's keys above the prefix) and emits it: the keys above T and the first ties
at T in position order, the exact top-k, so the rounds' outputs bit for bit. Its state is
then final at 32 bits and flagged emitted (X_EMITTED): the later rounds pass it through and
sel_out writes nothing for it.

Ties, exactly. When the decision is final (prefix Q of d bits, `need` keys still to take
among the keys with that prefix), every slice knows from the messages, for every slice s'
before it: above(s') = its keys with prefix > Q, eq(s') = its keys with prefix == Q (one
load each of cum[b + 1] and cum[b]). Ties are taken in position order: slice s' takes
clamp(need - sum_{s''<s'} eq(s''), 0, eq(s')) of its ties, its first ones. A slice writes
its keys at base = sum_{s'<s} (above + taken), so the output is in ascending position.
Nothing is buffered: any number of ties is exact. Within a slice a lane holds 4
consecutive positions; lanes and waves take their offsets from ballot prefix counts.

Limits. capacity <= 512K keys a row (MAX_KEYS: a ValueError past it, at configuration and
for a row's n_keys); up to 64 slices a row; K <= 2**20; counts are 16-bit halves of a
lane's 32-bit counter only where a lane holds <= 8192 keys of a pass (512K / 64).
Invalid input (n_keys < 0 or past the capacity, a block-table entry < 0 for a visible key)
is rejected by the host (`validate_inputs`) and by sel_h0 (the error word: `LaunchFailed`
"rejected invalid input", the bad row's output untouched).

Sources. Scores come from an input buffer (`BufferScores`) or an arena region written by
an earlier stage (`RegionScores`: a BulkBuffer, or plain data ordered by a `Ready`); first
digits from nowhere (local pass), an input buffer (`HistBuffer`), tagged pairs
(`HistRegion`) or plain data (`HistPlain`). Every path gives bit-identical outputs; with a
local pass or the scoring's counts of every visible key (key 0 in bin 0, as stages/index.py
counts the stored scores) the messages are identical too.

Fusing into the index launch (stages/index.py publishes plain `scores` [R, capacity] f32 and
`score_hist` [R, capacity / segment, 64] u32 behind `score_done` pairs, rows by `positions`):

    cfg = SelectConfig(ScoresLayout(p.rows, p.capacity, p.segment), max_slices=...,
                       positions=True, names=Names(n_keys="positions"), bt_width=p.max_pages)
    ready = Ready(lambda r: scored_reads(p), lambda k, io: wait_scored(k, io, p))
    stages = index_stages(p) + select_stages(cfg, scores="plain", hist="plain", ready=ready)

(test_select.py runs exactly this.) The `select` launch kind (and `select_hist`, which takes
the first digits as an input) selects on injected scores: any distribution can be checked
(tools/check_topk.py).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import numpy as np

from layouts.protocol import Mailbox
from layouts.regions import BulkBuffer, PlainBuffer, TaggedPairs
from layouts.scores import (FIRST_DIGIT_BINS, FIRST_DIGIT_BITS, FIRST_DIGIT_SHIFT, MAX_KEYS,
                            MAX_SLICES, TOPK, ScoresLayout, exact_topk_positions, ordered_key)
from monokernel.ir import L2_LINE_BYTES, MBARRIER_BYTES
from monokernel.types import f32, i32, i64, u32
from spec.config import KEY_PAGE_TOKENS

from .base import Buffer, Job, Stage, Use
from .cycles import CycleTally
from .launch import Launch

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
RDY_SOLO = 1 << 8  # in the value of a slice's rdy1 pair: its row finishes solo (module doc);
# the low bits are the state's X_DONE + 1, as in every rdy pair

# the state words after a message's histogram (and in LDS); X_NLIST: the slice's candidate
# list length (sel_h1 on); X_SOLO: 1 when the row finishes solo (decided by sel_h1 from
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
FIN_GO, FIN_COUNT, FIN_B, FIN_HAS_HI, FIN_T, FIN_T_ABOVE = range(6)
FIN_WORDS = 8
# (FIN_T: the row's final threshold key, the candidate ranked at `need`; FIN_T_ABOVE: how
# many candidates are larger)
DIAG_WORDS = 4  # NaNs, keys selected, unselectable keys (-inf or NaN), visible keys

INVALID_PAGE = "invalid input: a block-table entry < 0 (or past 2**25) for a visible key"
INVALID_N = "invalid input: n_keys < 0 or past the scores' capacity"


# ----------------------------------------------------------------------------- config

@dataclass(frozen=True)
class Names:
    """Buffer and region names (a fused launch shares some with the scoring)."""
    scores: str = "scores"
    n_keys: str = "n_keys"
    block_table: str = "block_table"
    score_hist: str = "score_hist"
    score_done: str = "score_done"
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

    def __post_init__(self):
        lay = self.layout
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
        object.__setattr__(self, "digits", check_digits(self.digits))
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
        return len(self.digits)

    @property
    def solo(self) -> bool:
        """Whether rows with few candidates may finish solo (module doc)."""
        return self.solo_max_candidates is not None

    @property
    def defers(self) -> bool:
        """Whether crowded rows get their lists from sel_h2 (defer_fat_bins, without solo)."""
        return self.defer_fat_bins and not self.solo

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
    def list2_keys(self) -> str:
        """With `defers`: sel_h2's lists (the keys at or above the 13-bit prefix, from the
        scores of a deferred row or from sel_h1's list), which the later passes read."""
        return f"{self.prefix}_lkey2"

    @property
    def list2_pos(self) -> str:
        return f"{self.prefix}_lpos2"


def check_digits(digits) -> tuple:
    """A radix plan as a tuple of ints, or a ValueError naming it: the first digit the
    scoring's FIRST_DIGIT_BITS, at least two digits of 2..10 bits (a pass's histogram lives in
    LDS and in every slice's message), 32 bits in all."""
    d = tuple(int(x) for x in digits)
    if len(d) < 2 or d[0] != FIRST_DIGIT_BITS or sum(d) != 32 or min(d) < 2 or max(d) > 10:
        raise ValueError(f"digits {d}: the first must be {FIRST_DIGIT_BITS} bits (the "
                         "scoring's first digit), at least two, 2..10 bits each, 32 in all")
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


# ----------------------------------------------------------------------------- sources

class BufferScores:
    """Scores from an input buffer [rows, capacity] f32 (the `select` launch kind)."""
    in_region = False

    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.scores

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(f32, (c.rows, c.capacity))}

    def reads(self, r: int) -> list:
        return []

    def prepare(self, k, io):
        pass

    def load4(self, k, io, r, p, mask):
        return k.load(getattr(io.args, self.name), r * self.cfg.capacity + p, u32, 4, mask=mask)

    def prefetch_line(self, k, io, r, p, nbytes, mask):
        """A hint: the L2 line of scores p .. (nbytes from there) of row r."""
        k.prefetch_l2(getattr(io.args, self.name), (r * self.cfg.capacity + p) * 4, nbytes,
                      mask=mask, line=True)


class RegionScores:
    """Scores from an arena region [rows, capacity] f32 written by an earlier stage of the
    launch: a BulkBuffer (each job acquires its counter before reading) or, with
    `bulk=False`, a PlainBuffer whose writer releases before publishing the `score_hist`
    pairs that sel_h0 waits on (sel_h0 then takes an acquire fence; later stages are
    ordered after sel_h0 through the messages)."""
    in_region = True

    def __init__(self, cfg: SelectConfig, bulk: bool = True):
        self.cfg, self.name, self.bulk = cfg, cfg.names.scores, bulk

    def buffers(self):
        return {}

    def reads(self, r: int) -> list:
        c = self.cfg
        return [Use(self.name, r * c.capacity, (r + 1) * c.capacity)]

    def prepare(self, k, io):
        if self.bulk:
            io.acquire(self.name)

    def load4(self, k, io, r, p, mask):
        v = io.load(self.name, r * self.cfg.capacity + p, 4, mask=mask)
        return k.bitcast(v, u32)

    def prefetch_line(self, k, io, r, p, nbytes, mask):
        io.prefetch_line(self.name, r * self.cfg.capacity + p, nbytes, mask=mask)


class HistBuffer:
    """First digits from an input buffer [rows, segments, 64] u32."""
    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.score_hist

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(u32, (c.rows, c.segments, FIRST_DIGIT_BINS))}

    def reads(self, r):
        return []

    def read(self, k, io, index, mask):
        return k.load(getattr(io.args, self.name), index, u32, mask=mask)


class HistRegion:
    """First digits from the scoring's tagged pairs [rows, segments, 64] u32 (region owned by
    the scoring stage, or by `ScoreHistStage` in a standalone launch)."""
    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.score_hist

    def buffers(self):
        return {}

    def reads(self, r):
        w = self.cfg.segments * FIRST_DIGIT_BINS
        return [Use(self.name, r * w, (r + 1) * w)]

    def read(self, k, io, index, mask):
        return io.wait(self.name, index, mask=mask)


class HistPlain(HistRegion):
    """First digits from the scoring's plain region [rows, segments, 64] u32 (the index
    launch's `score_hist`), read after the scoring's `score_done` pairs (a `Ready`): the same
    region and uses as `HistRegion`, read with plain loads instead of tag polls."""

    def read(self, k, io, index, mask):
        return io.load(self.name, index, mask=mask)


class Ready:
    """What sel_h0 waits for before reading scores (and first digits) that an earlier stage
    of the launch writes as plain data: `wait(k, io)` emits the polls and the acquire fence
    (wave 0, then a CTA barrier), `reads(r)` declares them (e.g. the index launch's
    stages.index.wait_scored / scored_reads). Later stages are ordered after sel_h0 through
    the messages (release -> acquire chains)."""

    def __init__(self, reads, wait):
        self.reads, self.wait = reads, wait


def score_done_ready(cfg: SelectConfig, jobs: int) -> Ready:
    """The scoring protocol of stages/index.py: every scoring job publishes its pair of
    `score_done` [jobs] after a release fence; a consumer polls them all, then acquires."""
    name = cfg.names.score_done

    def wait(k, io):
        for j0 in range(0, jobs, k.L):
            j = j0 + k.lane_id()
            io.wait(name, k.min(j, jobs - 1), mask=j < jobs)
        k.fence("acquire", "device")
    return Ready(lambda r: [Use(name, 0, jobs)], wait)


# ----------------------------------------------------------------------------- DSL helpers

def _flat(io):
    """The mailbox with accesses through the arena pointer (layouts.protocol: flat): the
    selection touches a dozen regions, whose constant pointers would otherwise be hoisted
    out of the job loop into SGPR pairs and spill."""
    return io if getattr(io, "flat", False) else Mailbox(io.env, io.arena, io.scope, flat=True)


def _barrier(k):
    if k.W > 1:
        k.barrier()


def _scan_step(k, unroll: int = SCAN_UNROLL) -> int:
    """Keys an iteration of a pass over the scores reads: `unroll` rounds of 4 a thread."""
    return 4 * k.W * k.L * unroll


@contextlib.contextmanager
def _wave0(k):
    if k.W > 1:
        with k.if_(k.wave_id().eq(0)):
            yield
    else:
        yield


def _u(k, x):
    return x if x.dtype == u32 else k.bitcast(x, u32)


def _i(k, x):
    return x if x.dtype == i32 else k.bitcast(x, i32)


def _scan(k, x):
    """Inclusive prefix sum over the lanes (lane order), per-lane i32: a butterfly, each
    step adding the partner half-block's total where the lane's bit says it lies below (an
    integer 0/1 factor, not a lane mask: masks live in SGPR pairs on AMD and get hoisted)."""
    lane = k.lane_id()
    incl = tot = x
    m, b = 1, 0
    while m < k.L:
        y = k.lane_swap(tot, m)
        bit = (lane >> b) & 1
        incl = incl + y * bit
        tot = tot + y
        m, b = m * 2, b + 1
    return incl


def _last(k, x):
    """The value of the wave's last lane, uniform."""
    return k.readfirstlane(k.shuffle(x, k.L - 1))


def _pick(k, x, lane_is):
    return k.wave_sum(k.select(lane_is, x, 0))


def _suffix_sums(k, hist, B, put):
    """One wave: put(b, cum[b] = sum of LDS hist[b..B-1], mask) for every bin b, top bin
    first, L bins a step (put may write hist itself: a step reads its bins before it writes
    them, and later steps read only lower bins)."""
    carry = k.uniform_var(0, i32)
    for ch in range((B + k.L - 1) // k.L):
        b = (B - 1) - (ch * k.L + k.lane_id())
        m = b >= 0
        bb = k.max(b, 0)
        g = _i(k, k.load(hist, bb, u32, mask=m))
        incl = _scan(k, g)
        put(bb, _u(k, carry.get() + incl), m)
        carry.set(carry.get() + _last(k, incl))


def _threshold(k, cum, B, need):
    """One wave, on the suffix sums cum[0..B-1] (LDS, #(digit >= b)) of the candidates:
    (takeall, b, has_hi, gb, ga): the threshold bin b, the last with cum[b] >= need
    (takeall: none is, fewer candidates than needed: take them all, b = 0), whether a bin
    lies above it, gb = cum[b] and ga = cum[b + 1] (0 past the top)."""
    L = k.L
    cnt = k.uniform_var(0, i32)
    for ch in range((B + L - 1) // L):
        b = ch * L + k.lane_id()
        m = b < B
        g = _i(k, k.load(cum, k.min(b, B - 1), u32, mask=m))
        cnt.set(cnt.get() + k.wave_sum(k.select(m & (g >= need), k.const(1, i32), 0)))
    n_ge = cnt.get()
    takeall = n_ge.eq(0)
    b = k.max(n_ge - 1, 0)
    has_hi = (b + 1) < B
    gb = _i(k, k.load(cum, b, u32))
    ga = k.select(has_hi, _i(k, k.load(cum, k.min(b + 1, B - 1), u32)), 0)
    return takeall, b, has_hi, gb, ga


def ordered_keys(k, bits, want_nan=False):
    """layouts.scores.ordered_key on u32 bit patterns (any vector width), integer operations
    only: (key, is_nan or None). k0 = bits ^ (sign ? ~0 : 0x80000000); then -0.0 -> +0.0's
    key, and -inf / NaN (k0 < 2**23: -inf and negative NaNs; k0 > 0xFF800000 or 0: positive
    NaNs) -> 0."""
    k0, twice, key = _flipped(k, bits)
    bad = (k0 >> 23).eq(0) | ((0 - k0) >> 23).eq(0)
    key = k.select(bad, 0, key)
    return key, (twice > 0xFF000000 if want_nan else None)


def sign_flip(k, bits):
    """bits ^ (sign ? ~0 : 0x80000000): a float's bits (u32) as an unsigned key in the floats'
    order, -0.0 one below +0.0 (ordered_keys gives them one key), NaNs at the ends."""
    sign = k.bitcast(k.bitcast(bits, i32) >> 31, u32)
    return bits ^ (sign | 0x80000000)


def _flipped(k, bits):
    """(k0, twice, key): the sign flip k0 (sign_flip), twice = bits << 1 (0 for +-0.0),
    key = k0 with -0.0 given +0.0's key."""
    k0 = sign_flip(k, bits)
    twice = bits << 1  # drops the sign: 0 for +-0.0
    return k0, twice, k.select(twice.eq(0), 0x80000000, k0)


# the ordered keys of the selectable scores other than -0.0: -FLT_MAX .. +inf
NORMAL_KEY_LO, NORMAL_KEY_HI = 0x00800000, 0xFF800000
F32_QNAN_BITS, F32_NEG_INF_BITS = 0x7FC00000, 0xFF800000


def keys_and_specials(k, bits):
    """(key, special): key = ordered_keys' key for every score that is not -inf or NaN (the
    sign flip, -0.0 -> +0.0's key), special = the score is one of those (ordered key 0).
    ordered_keys = select(special, 0, key): its `bad` test (k0 < 2**23 or k0 > 0xFF800000)
    is `key - 2**23 > 0xFF000000` in unsigned arithmetic, key being k0 but for -0.0, which
    is not bad."""
    key = _flipped(k, bits)[2]
    return key, (key - NORMAL_KEY_LO) > (NORMAL_KEY_HI - NORMAL_KEY_LO)


def score_floor(k, key_lo):
    """The least selectable score whose ordered key is >= key_lo (uniform u32 >= 1), as f32:
    score >= it <=> ordered key >= key_lo for every score (keys below NORMAL_KEY_LO are
    -inf's and the NaNs', mapped to 0; -0.0 has +0.0's key and compares equal to it; NaN
    compares false). Past +inf's key nothing is selectable: NaN, which no score reaches."""
    tk = k.max(key_lo, NORMAL_KEY_LO)
    bits = k.select(tk < 0x80000000, ~tk, tk ^ 0x80000000)  # sign_flip's inverse
    return k.bitcast(k.select(tk > NORMAL_KEY_HI, k.const(F32_QNAN_BITS, u32), bits), f32)


def _lane_masks(k, raws, tests):
    """One mask per test (a function of a 4-vector of f32 scores, giving i1s) over a lane's
    4-vectors of raw scores (4 or 8: a 16- or 32-bit mask): bit 4j + e for vector j's entry
    e, i.e. the lane's keys in position order."""
    masks = [k.const(0, u32) for _ in tests]
    for j, raw in enumerate(raws):
        f = k.bitcast(raw, f32)
        for t, test in enumerate(tests):
            bits = k.cast(test(f), u32)
            for e in range(LOAD_KEYS):
                masks[t] = masks[t] | (k.extract(bits, e) << (LOAD_KEYS * j + e))
    return masks


def _pick16(k, raws, it, jj):
    """Key jj (per lane, 0 .. 4 len(raws) - 1) of a lane's 4-key vectors (4 or 8), by a tree
    of selects on jj's bits (no LDS; `it` unused: the registers are the iteration's)."""
    def bit(b):
        return ((jj >> b) & 1).ne(0)

    def tree(vs, b):  # vs: 2**(b - 1) candidates, chosen by bits b - 1 .. LOAD_KEYS' bits
        if len(vs) == 1:
            return vs[0]
        half = len(vs) // 2
        return k.select(bit(b - 1), tree(vs[half:], b - 1), tree(vs[:half], b - 1))
    v = tree(list(raws), (len(raws) * LOAD_KEYS).bit_length() - 1)
    e = [k.extract(v, i) for i in range(4)]
    return k.select(bit(1), k.select(bit(0), e[3], e[2]), k.select(bit(0), e[1], e[0]))


def _pos(k, p, e):
    """Position of a 4-key group's entry e: p + e (p the first of 4 consecutive positions,
    a pass over the scores) or p[e] (a vector, entries of a list)."""
    return k.extract(p, e) if p.n == 4 else p + e


def _prefix(k, key, d):
    """The first d bits of key (d uniform i32 in 0..32; 0 for d == 0), as two shifts of at
    most 16 so that no shift reaches the width (and no select is needed)."""
    sh = 32 - d
    s1 = k.min(sh, 16)
    return (key >> k.cast(s1, u32)) >> k.cast(sh - s1, u32)


def _prefix_floor(k, Q, d):
    """The least key whose first d bits are Q (d uniform i32 in 0..32, Q < 2**d): Q << (32 -
    d) as two shifts of at most 16, as _prefix (0 for d == 0)."""
    sh = 32 - d
    s1 = k.min(sh, 16)
    return (Q << k.cast(s1, u32)) << k.cast(sh - s1, u32)


class _Slice:
    """Uniform facts of job (row, slice) every stage computes first: the row's key count and
    slices used (whether this job has keys); `bounds()` (inside the active branch) its range,
    exactly ScoresLayout.slices."""

    def __init__(self, k, io, cfg: SelectConfig, job):
        self.k, self.cfg = k, cfg
        S = cfg.max_slices
        self.r = job / S
        self.s = job - self.r * S
        n_raw = k.load(getattr(io.args, cfg.names.n_keys), self.r, i32)
        if cfg.positions:
            n_raw = n_raw + 1
        self.n_raw = n_raw
        n = k.min(k.max(n_raw, 0), cfg.capacity)
        self.n = n
        self.nseg = (n + (cfg.segment - 1)) / cfg.segment
        self.sc = k.max(k.min(self.nseg, S), 1)
        self.active = self.s < self.sc
        self.early = None  # sel_h1's first score loads, when issued before its wait
        self.lean_early = None  # ... those of the lean scan (SelectPass.lean_early_loads)

    def bounds(self):
        k, seg, sc, nseg = self.k, self.cfg.segment, self.sc, self.nseg

        def bound(i):
            num = i * nseg
            q = num / sc
            rem = num - q * sc
            up = (rem * 2 > sc) | ((rem * 2).eq(sc) & (q & 1).eq(1))
            return (q + k.cast(up, i32)) * seg
        self.lo = bound(self.s)
        self.hi = k.min(bound(self.s + 1), self.n)

    def list_base(self):
        """Where this slice's candidate list starts in a list region [rows, S, longest
        slice] (entries)."""
        return (self.r * self.cfg.max_slices + self.s) * self.cfg.max_slice_keys()

    def list_base_bytes(self):
        """list_base in bytes (i64): u32 keys and i32 positions, 4-byte entries both."""
        return self.k.cast(self.list_base(), i64) * u32.bytes


def _region_loader(io, name, base):
    """load(i, mask): 4 entries of region `name` from entry base + i."""
    return lambda i, mask: io.load(name, base + i, 4, mask=mask)


class _State:
    """The 12 state words (uniform u32): from three 4-word vectors, each word extracted when
    first asked for, and a vector rebuilt only where a word was set (fewer ops where a stage
    needs or changes only a few)."""

    def __init__(self, k, words=None, vecs=None):
        self.k = k
        self._v = list(vecs) if vecs is not None else None
        self._w = dict(enumerate(words)) if words is not None else {}
        self._dirty = set(range(NEXTRA)) if words is not None else set()

    @staticmethod
    def load(k, ptr, idx0):
        """From LDS or from a message (ptr uniform; idx0 the first state word)."""
        return _State(k, vecs=[k.load(ptr, idx0 + 4 * j, u32, 4) for j in range(NEXTRA // 4)])

    def copy(self):
        c = _State(self.k, vecs=self._v)
        c._w, c._dirty = dict(self._w), set(self._dirty)
        return c

    def vecs(self):
        out = []
        for j in range(NEXTRA // 4):
            idx = range(4 * j, 4 * j + 4)
            if self._v is not None and not self._dirty.intersection(idx):
                out.append(self._v[j])
            else:
                out.append(self.k.vec(*[self[i] for i in idx]))
        return out

    def store_lds(self, ptr):
        for j, v in enumerate(self.vecs()):
            self.k.store(ptr, 4 * j, v)

    def __getitem__(self, i):
        if i not in self._w:
            self._w[i] = self.k.extract(self._v[i // 4], i % 4)
        return self._w[i]

    def __setitem__(self, i, value):
        self._w[i] = value
        self._dirty.add(i)

    def i(self, j):
        return _i(self.k, self[j])

    @property
    def done(self):
        return self[X_DONE].ne(0)


def initial_state(k, cfg):
    z = k.const(0, u32)
    w = [z] * NEXTRA
    w[X_NEED] = k.const(cfg.topk, u32)
    return _State(k, w)


# ----------------------------------------------------------------------------- stages

class SelectPass(Stage):
    """Pass q of the selection (q = 0..P-1: histogram passes; q = P: the output)."""
    rel_tol = 1e-10  # exact: an integer off by one in values < 2**31 is 4.7e-10 relative
    # --tune sel_h1.ATTR=0/1 (sel_h0: wide_segment_sums; the last histogram pass and
    # sel_out: early_emit): SelectConfig's options, per run
    TUNABLES = ("count_from_list", "early_loads", "wide_segment_sums", "early_emit",
                "l2_prefetch", "lds_scan", "list_bases", "grouped_counts", "one_wait",
                "segment_unroll", "scan_unroll", "scan_ahead", "lean_scan", "lean_copies", "lean_prefetch_ahead",
                "lean_prefetch_early", "lean_early_loads", "lean_lane_keys",
                "lean_coalesced", "lean_refill")
    # sel_h0's segment sums (wide_segment_sums): segment histograms a thread loads at once
    segment_unroll = SEGMENT_UNROLL
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
                 release=True, acquire=True):
        self.cfg, self.q = cfg, q
        self.ready = ready if q == 0 else None
        # release=False / acquire=False drop the messages' fences: the broken variants the
        # interpreter's relaxed mode must catch (tests only)
        self.release, self.acquire = release, acquire
        self.scores = scores
        self.hist = hist if q == 0 else None
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
        self.solo_check = cfg.solo and q >= 2
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
        self.lean_scan = cfg.lean_scan
        self.lean_copies = cfg.lean_copies
        # this pass may finish a row from every slice's list (SelectConfig.finish_max)
        self.finishes = cfg.finish_max is not None and 2 <= q < cfg.passes

    # -- declarations ---------------------------------------------------------------------
    def jobs(self):
        c = self.cfg
        keys = c.max_slice_keys()
        if self.from_list:  # about a first-digit bin's share, plus the keys above it
            keys = keys // FIRST_DIGIT_BINS + c.topk
        xbytes = 0 if self.q == 0 else c.max_slices * c.msg_words(self.q - 1) * 4
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
        return out

    def buffers(self):
        c, nm = self.cfg, self.cfg.names
        out = {nm.n_keys: Buffer(i32, (c.rows,))}
        if not self.from_list or self.defers:
            out.update(self.scores.buffers())
        if self.q == 0:
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
        if self.solo_check and self.q > 2:  # whether the row is solo: its own rdy1 pair
            out.append(Use(c.rdy(1), j, j + 1))
        if self.q == 0:
            if self.ready is not None:
                out += self.ready.reads(r)
            if self.hist is not None:
                out += self.hist.reads(r)
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
                self._check_inputs(k, io, sl)
                initial_state(k, c).store_lds(lds["state"])
                self._histogram(k, io, sl, lds, first=True)
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
            if not self.solo_runs:  # a solo row was finished by sel_h2: nothing to wait for
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
    def emits_early(self) -> bool:
        """The last histogram pass emits a row decided before its last digit (early_emit;
        from pass 3 on it reads the lists sel_out reads)."""
        return self.early_emit and self.q == self.cfg.passes - 1 and self.q > 2

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

    def _round(self, k, io, sl, lds):
        """One exchange round: decide on message q-1, then emit (sel_out) or count the next
        digit and publish message q."""
        self._consume(k, io, sl, lds)
        io.env.phase(2)  # decided (phases 0 and 1 in _consume)
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

    def _lds(self, k):
        c = self.cfg
        nm = self.name
        out = {"state": k.lds(f"{nm}_state", u32, 16)}
        if not self.is_out:
            out["hist"] = k.lds(f"{nm}_hist", u32, max(4, c.bins(self.q)))
            out["cnt"] = k.lds(f"{nm}_cnt", u32, 4)
        if self.q > 0:
            out["gcum"] = k.lds(f"{nm}_gcum", u32, max(4, c.bins(self.q - 1)))
        appends = (self.compacts or self.defers) and k.W > 1  # the appends' wave counts
        append_words = 2 * (max(self.scan_rounds, LIST_UNROLL) if c.batched_append else 1) * k.W
        if (self.is_out or self.solo_runs or self.emits_early or self.finishes) and k.W > 1:
            # (sel_h2 finishing a row: the appends' room serves the emit too)
            out["emit"] = k.lds(f"{nm}_emit", i32,
                                max(2 * 2 * k.W, append_words if appends else 0))
        if appends and "emit" not in out:
            out["emit"] = k.lds(f"{nm}_emit", i32, append_words)
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
        c = self.cfg
        bad_n = (sl.n_raw < 0) | (sl.n_raw > c.capacity)
        io.env.fail(bad_n, INVALID_N)
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
        if self._lean and later_count:
            self._lean_scan(k, io, sl, lds, key_lo, run, nan_acc if nans else None)
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
        if later_count:
            _barrier(k)  # every wave's list stores, before any wave reads the list back
            self._scan_list(k, io, sl, lds, own=run.get())
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

    # -- the lean scan (SelectConfig.lean_scan) ---------------------------------------------
    def _lean_groups(self, k):
        """[(first, end)) iterations of each commit group of the lean copies."""
        n = self._lean_iterations(k)
        g = min(LEAN_GROUPS, n)
        return [(i * n // g, (i + 1) * n // g) for i in range(g)]

    def _lean_piece(self, k, it, j):
        """LDS word of iteration `it`'s 16-byte piece j (keys 4j .. 4j + 3 of the lane's 16)
        of this thread: the pieces j of a wave's lanes side by side, so a wave's LDS read of
        one piece is 512 contiguous bytes (no bank conflict)."""
        T = k.W * k.L
        return ((it * self._lean_pieces + j) * T + k.thread_id()) * LOAD_KEYS

    def _lean_first_position(self, k, sl, it):
        """The first of this thread's consecutive positions in lean iteration `it`."""
        n = self._lane_keys
        return sl.lo + it * (n * k.W * k.L) + n * k.thread_id()

    def _lean_count(self, k, sl):
        """Lean iterations over this slice (runtime)."""
        it_keys = self._lane_keys * k.W * k.L
        return (sl.hi - sl.lo + (it_keys - 1)) / it_keys

    def _lean_copy(self, k, io, sl, lds):
        """Every lane starts the async copies of its keys of the slice (16 consecutive keys
        an iteration, positions lo + it * 16T + 16 * thread), LEAN_GROUPS commit groups, all
        before the wait for message 0: the slice streams into LDS under the exchange.
        Iterations past the slice's end copy nothing (a group may be empty); a piece past
        the row's end is read at the row's last 4 keys (never counted)."""
        c = self.cfg
        n_it = self._lean_count(k, sl)
        src = getattr(io.args, self.scores.name)
        last = c.capacity - LOAD_KEYS
        for lo, hi in self._lean_groups(k):
            for it in k.range(lo, k.min(n_it, hi)):
                p0 = self._lean_first_position(k, sl, it)
                for j in range(self._lean_pieces):
                    k.async_copy(lds["lean"], self._lean_piece(k, it, j), src,
                                 sl.r * c.capacity + k.min(p0 + LOAD_KEYS * j, last), u32,
                                 LOAD_KEYS)
            k.async_commit()

    def _lean_scan(self, k, io, sl, lds, key_lo, run, nan_acc):
        """sel_h1's listing pass with the lean loop (SelectConfig.lean_scan): the list of
        `_append` (every selectable key >= key_lo, in position order) with far fewer
        instructions a key and shorter dependency chains. A lane's 16 consecutive keys an
        iteration, waves then lanes in position order, from registers loaded an iteration
        ahead (or, with lean_copies, from the lane's own async copies in LDS); keep =
        score >= t_lo, the least score whose key is >= key_lo (one float compare: the keys'
        order is the scores' order, NaN never compares true, -0.0 >= +0.0 as their one key
        says; sm_90a compares keep subnormals); the keeps as a 16-bit mask; the lanes'
        exclusive prefix of the masks' counts from one ballot a count bit (independent
        steps, not a chain of lane swaps); the waves' counts through LDS (one CTA barrier an
        iteration, buffers by parity); then rounds over the kept keys only, each lane
        storing its lowest remaining one (its raw score read back from the lane's own LDS
        words). nan_acc (None: no counts) gets the NaN / unselectable counts, taken only in
        a wave-uniform branch where a lane of the wave holds -inf or NaN."""
        c = self.cfg
        W, L = k.W, k.L
        w = k.wave_id()
        n_it = self._lean_count(k, sl)
        lk = c.max_slice_keys()
        last = c.capacity - LOAD_KEYS
        t_lo = score_floor(k, key_lo)
        neg_inf = k.bitcast(k.const(F32_NEG_INF_BITS, u32), f32)
        offs = k.load(lds["list_at"], 0, i64, 2)
        keys_at, pos_at = [k.ptr_add(io.env.arena, k.extract(offs, e)) for e in range(2)]
        em = lds.get("emit")
        n_lane = self._lane_keys
        count_bits = n_lane.bit_length()  # a lane's count is 0 .. n_lane

        def iteration(it, raws, pick, refill=None, refill_late=False):
            p0 = self._lean_first_position(k, sl, it)
            nv = k.max(k.min(sl.hi - p0, n_lane), 0)
            if n_lane < 32:  # nv <= 16: no shift past 31
                valid = _u(k, (k.const(1, i32) << nv) - 1)
            else:
                valid = _u(k, k.select(nv >= 32, k.const(-1, i32),
                                       (k.const(1, i32) << k.min(nv, 31)) - 1))
            def keep(f):
                return f >= t_lo

            def unselectable(f):  # -inf and NaN
                return ~(f > neg_inf)
            if nan_acc is None:
                mask, = _lane_masks(k, raws, [keep])
            else:
                mask, special = _lane_masks(k, raws, [keep, unselectable])
            mask = mask & valid
            if nan_acc is not None:  # the counts from masks too, where a wave holds one
                special = special & valid
                with k.if_(k.ballot(special.ne(0)).ne(0)):
                    nan, = _lane_masks(k, raws, [lambda f: f.ne(f)])  # unordered: NaN only
                    counts = k.popc(nan & valid) | (k.popc(special) << 16)
                    nan_acc.set(nan_acc.get() + _i(k, counts))
            own = _i(k, k.popc(mask))
            excl, tot = k.const(0, i32), k.const(0, i32)
            for b in range(count_bits):  # bit b of every lane's count: independent ballots
                bit = ((own >> b) & 1).ne(0)
                excl = excl + (k.prefix_count(bit) << b)
                tot = tot + (_i(k, k.cast(k.popc(k.ballot(bit)), u32)) << b)
            if refill is not None and not refill_late:  # the raws are dead from here on
                refill()
            if W > 1:
                par = it & 1
                k.store(em, par * W + w, tot)
                k.barrier()
                woff, rtot = k.const(0, i32), k.const(0, i32)
                for w2 in range(W):
                    x = k.load(em, par * W + w2, i32)
                    woff = woff + k.select(w > w2, x, 0)
                    rtot = rtot + x
            else:
                woff, rtot = k.const(0, i32), tot
            at = k.lane_var(run.get() + woff + excl)
            rest = k.lane_var(mask)
            with k.while_(lambda: k.ballot(rest.get().ne(0)).ne(0)):
                m = rest.get()
                has = m.ne(0)
                if n_lane < 32:
                    jj = k.min(_i(k, k.ctz(m | LEAN_SENTINEL)), n_lane - 1)
                else:  # no bit above a 32-bit mask: an empty one's ctz asked of 1 instead
                    jj = _i(k, k.ctz(k.select(has, m, k.const(1, u32))))
                rest.set(m & (m - 1))
                raw = pick(it, jj)
                i = k.min(at.get(), lk - 1)
                k.store(keys_at, i, _flipped(k, raw)[2], mask=has & io.ok)
                k.store(pos_at, i, p0 + jj, mask=has & io.ok)
                at.set(at.get() + k.cast(has, i32))
            run.set(run.get() + rtot)
            if refill is not None and refill_late:  # (the store rounds read the raws)
                refill()

        if self._lean_copies:
            def pick(it, jj):  # the lane's own copy
                return k.load(lds["lean"], self._lean_piece(k, it, jj >> 2) + (jj & 3), u32)
            groups = self._lean_groups(k)
            for g, (lo, hi) in enumerate(groups):
                k.async_wait(len(groups) - 1 - g)
                for it in k.range(lo, k.min(n_it, hi)):
                    iteration(it, [k.load(lds["lean"], self._lean_piece(k, it, j), u32,
                                          LOAD_KEYS) for j in range(self._lean_pieces)],
                              pick)
            return

        stage = lds.get("lean_stage")
        slot = k.thread_id() * n_lane
        if stage is not None:
            def pick(it, jj):  # the lane's own keys, put in LDS by this iteration
                return k.load(stage, slot + jj, u32)
        else:
            pick = None  # below: from the iteration's registers

        ahead = self._count_tunable("lean_prefetch_ahead", 0)
        coalesced = self._coalesced(lds)
        refill_mode = self._count_tunable("lean_refill", 0)
        if refill_mode > LEAN_REFILL_TURNS:
            raise ValueError(f"{self.name}: lean_refill = {refill_mode} must be 0, 1 or 2")

        def step(it, cur, nxt):
            """Iteration `it` on the keys in register set `cur`; the loads of iteration
            `nxt` into `cur` (lean_refill) or, with nxt None, iteration it + 1's into the
            one set, first (lean_refill 0)."""
            raws = [v.get() for v in cur]
            refill = None
            if nxt is None:
                for v, x in zip(cur, self._lean_loads(k, io, sl, it + 1, lds)):
                    v.set(x)
            else:
                def refill():
                    for v, x in zip(cur, self._lean_loads(k, io, sl, nxt, lds)):
                        v.set(x)
            if ahead:
                pa = self._lean_first_position(k, sl, it + ahead)
                self.scores.prefetch_line(k, io, sl.r, k.min(pa, last),
                                          n_lane * 4, pa < sl.hi)
            if coalesced:  # the wave's keys through LDS: a lane's consecutive keys
                k.wave_sync()  # the last iteration's store rounds have read their words
                for j, raw in enumerate(raws):
                    k.store(stage, self._coalesced_word(k, j), raw)
                k.wave_sync()
                raws = [k.load(stage, slot + LOAD_KEYS * j, u32, LOAD_KEYS)
                        for j in range(self._lean_pieces)]
            elif stage is not None:
                for j, raw in enumerate(raws):
                    k.store(stage, slot + LOAD_KEYS * j, raw)
            iteration(it, raws, pick or functools.partial(_pick16, k, raws), refill,
                      refill_late=pick is None and not coalesced)

        with k.if_(sl.lo < sl.hi):
            first = sl.lean_early or self._lean_loads(k, io, sl, 0, lds)
            ring = [k.lane_var(x) for x in first]
            if refill_mode < LEAN_REFILL_TURNS:
                for it in k.range(0, n_it):
                    step(it, ring, it + 1 if refill_mode else None)
                return
            # two register sets taking turns, each refilled with the keys two iterations on
            # (an odd count gets one iteration past the slice: no key valid, nothing listed
            # or counted; a conditional second turn let ptxas sink its loads to its end)
            other = [k.lane_var(x) for x in self._lean_loads(k, io, sl, 1, lds)]
            for it in k.range(0, n_it + (n_it & 1), 2):
                step(it, ring, it + 2)
                step(it + 1, other, it + 3)

    def _coalesced(self, lds) -> bool:
        """lean_coalesced, where the loop has its LDS staging to pass the keys through."""
        return bool(self._count_tunable("lean_coalesced", 0)) and "lean_stage" in lds

    def _coalesced_word(self, k, j):
        """Word of the LDS staging for this lane's coalesced load j: the key's offset in the
        iteration (the wave's block of lane_keys * L keys, load j's 4 L of them, the lane's
        4), so that lane t's consecutive keys are words t * lane_keys .. of its wave's block."""
        n, L = self._lane_keys, k.L
        return k.wave_id() * (n * L) + j * (LOAD_KEYS * L) + LOAD_KEYS * k.lane_id()

    def _lean_loads(self, k, io, sl, it, lds):
        """Lean iteration `it`'s score loads of this lane (4-vectors at clamped positions:
        entries past hi are read, never counted): its consecutive keys, or with
        lean_coalesced the wave's keys in whole 16-byte pieces side by side (load j of lane
        t: the iteration's keys at `_coalesced_word`)."""
        last = self.cfg.capacity - LOAD_KEYS
        if self._coalesced(lds):
            it0 = sl.lo + it * (self._lane_keys * k.W * k.L)

            def position(j):
                return it0 + self._coalesced_word(k, j)
        else:
            p0 = self._lean_first_position(k, sl, it)

            def position(j):
                return p0 + LOAD_KEYS * j
        return [self.scores.load4(k, io, sl.r, k.min(position(j), last), None)
                for j in range(self._lean_pieces)]

    def _prefetch_slice_lines(self, k, io, sl):
        """lean_prefetch_early: the waves but wave 0 ask the L2 for every line of the slice
        [lo, hi), lines spread over their threads (lo is whole segments, so whole lines)."""
        c, L = self.cfg, k.L
        keys = L2_LINE_BYTES // 4
        if c.segment % keys:
            raise ValueError(f"segment {c.segment} is not whole {L2_LINE_BYTES}-byte lines")
        T = (k.W - 1) * L
        u = k.thread_id() - L
        lines = (sl.hi - sl.lo + (keys - 1)) / keys
        with k.if_(k.wave_id() > 0):
            for j in range(-(-c.max_slice_keys() // (keys * T))):
                line = u + j * T
                self.scores.prefetch_line(k, io, sl.r, sl.lo + k.min(line, lines - 1) * keys,
                                          L2_LINE_BYTES, line < lines)

    @staticmethod
    def _scan_positions(k, base, unroll: int = SCAN_UNROLL):
        """The first of a lane's 4 consecutive positions in each of an iteration's
        `unroll` rounds (lanes, then waves, then rounds in position order)."""
        T = k.W * k.L
        return [base + (u * 4 * T) + 4 * k.thread_id() for u in range(unroll)]

    def _scan_loads(self, k, io, sl, base, ps=None):
        """An iteration's score loads (from `base`, or at positions `ps`): unmasked, at a
        clamped position (a lane mask each would be a live SGPR pair on AMD): entries past
        hi are read but never counted."""
        last = self.cfg.capacity - 4
        ps = self._scan_positions(k, base, self.scan_rounds) if ps is None else ps
        return [self.scores.load4(k, io, sl.r, k.min(p, last), None) for p in ps]

    def _rare_specials(self, k, raw, pv, hi, nan_acc):
        """The ordered keys of a round's 4 scores a lane (SelectConfig.rare_specials): the
        special cases (-inf, NaN: key 0) and the NaN / unselectable counts (into nan_acc
        unless None) only where a lane of the wave holds one, behind a wave-uniform branch."""
        key, special = keys_and_specials(k, raw)
        anyone = special[0] | special[1] | special[2] | special[3]
        out = k.lane_var(key)
        with k.if_(k.ballot(anyone).ne(0)):
            exact = k.select(special, k.vec(*[k.const(0, u32)] * 4), key)
            out.set(exact)
            if nan_acc is not None:
                nan_acc.set(nan_acc.get() + self._nan_counts(k, raw, exact, pv, hi))
        return out.get()

    @staticmethod
    def _nan_counts(k, raw, key, pv, hi):
        """A lane's NaNs (low half) and unselectable keys (high half) among 4 keys at
        positions pv < hi, in integer arithmetic only: LLVM sinks these sums to the end of
        the unrolled rounds, where compare results would each hold an SGPR pair on AMD."""
        valid = _u(k, (pv - hi) >> 31)  # all ones below hi (an arithmetic shift)
        nan = (0x7F800000 - (raw & 0x7FFFFFFF)) >> 31  # |bits| past +inf's
        unsel = ((key | (0 - key)) >> 31) ^ 1  # key 0
        cnt = _i(k, valid & (nan | (unsel << 16)))
        return k.extract(cnt, 0) + k.extract(cnt, 1) + k.extract(cnt, 2) + k.extract(cnt, 3)

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

    # -- publish message q ----------------------------------------------------------------
    def _publish(self, k, io, sl, lds):
        """Wave 0: the cum histogram (unless done) and the state -> message q; release;
        announce with the tagged pair."""
        c = self.cfg
        q = self.q
        B = c.bins(q)
        S = c.max_slices
        mw = c.msg_words(q)
        msg = c.msg(q)
        with _wave0(k):
            st = _State.load(k, lds["state"], 0)
            mb = (sl.r * S + sl.s) * mw
            if q == 1:
                cnt = k.load(lds["cnt"], 0, u32, 2)
                st[X_NAN] = k.extract(cnt, 0)
                st[X_UNSEL] = k.extract(cnt, 1)
            with k.if_(~st.done):
                _suffix_sums(k, lds["hist"], B,
                             lambda bb, v, m: io.store(msg, mb + bb, v, mask=m))
            for j, v in enumerate(st.vecs()):
                io.store(msg, mb + c.state_word + 4 * j, v)
            if self.release:
                k.fence("release", "device")
            flag = st[X_DONE] + 1
            if q == 1 and c.solo:  # whether the row finishes solo (read by sel_h2 on)
                flag = flag + st[X_SOLO] * RDY_SOLO
            io.publish(c.rdy(q), sl.r * S + sl.s, flag)

    # -- consume message q-1: the decision -------------------------------------------------
    def _consume(self, k, io, sl, lds, solo=None):
        """Leave in LDS `state` this slice's state after deciding on message q-1 (`solo`:
        uniform i1, the row finishes solo: no placement among the slices)."""
        c = self.cfg
        p = self.q - 1
        S = c.max_slices
        mw = c.msg_words(p)
        msg, rdy = c.msg(p), c.rdy(p)
        L = k.L

        def wait_all():
            for grp in range((S + L - 1) // L):
                s2 = grp * L + k.lane_id()
                io.wait(rdy, sl.r * S + k.min(s2, S - 1), mask=s2 < sl.sc)
            if self.acquire:
                k.fence("acquire", "device")
        with _wave0(k):
            if self.one_wait:  # every slice's pair (its own among them), one acquire
                wait_all()
                st = self._load_msg_state(k, io, msg, (sl.r * S + sl.s) * mw + c.state_word)
            else:  # its own first: a final decision needs no other slice's message
                io.wait(rdy, sl.r * S + sl.s)
                if self.acquire:
                    k.fence("acquire", "device")
                st = self._load_msg_state(k, io, msg, (sl.r * S + sl.s) * mw + c.state_word)
                with k.if_(~st.done):
                    wait_all()
            st.store_lds(lds["state"])
            if self.finishes:
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
        if p == 0 and c.defers:  # a crowded threshold bin: sel_h2 builds the lists
            crowded = (gb - ga) > k.max(sl.n >> DEFER_SHIFT, DEFER_MIN_TOPKS * c.topk)
            new[X_DEFER] = k.select(~takeall & crowded, k.const(1, u32), 0)
        if self.finishes:  # few candidates left in the row, every slice's list complete
            go = ~done & ((gb - ga) <= c.finish_max)
            if self.q == 2 and c.defers:  # a deferred row's lists are sel_h2's own
                go = go & st[X_DEFER].eq(0)
            fin = lds["fin"]
            k.store(fin, FIN_GO, k.select(go, k.const(1, i32), 0))
            k.store(fin, FIN_COUNT, k.const(0, i32))
            k.store(fin, FIN_B, b)
            k.store(fin, FIN_HAS_HI, k.select(has_hi, k.const(1, i32), 0))
            k.store(fin, FIN_T, k.const(0, i32))
            k.store(fin, FIN_T_ABOVE, k.const(0, i32))
        own = (sl.r * S + sl.s) * mw
        hi_own = k.select(takeall | ~has_hi, 0, _i(k, io.load(msg, own + k.min(b + 1, Bp - 1))))
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
        c = self.cfg
        S = c.max_slices
        lk = c.max_slice_keys()
        off = lds["fin_off"]
        s = k.const(0, i32)
        start = k.const(0, i32)
        step = 1 << max(0, (S - 1).bit_length() - 1) if S > 1 else 0
        while step:
            cand = s + step
            at = k.load(off, k.min(cand, S - 1), i32)
            inside = (cand < sl.sc) & (at <= i)
            s = k.select(inside, cand, s)
            start = k.select(inside, at, start)
            step //= 2
        lim = k.select(i < nv, k.load(lds["fin_len"], s, i32), 0)
        j = k.min(i - start, lk - 4)
        return keys_at((sl.r * S + s) * lk + j), s, j, lim

    # -- solo finish (sel_h2, slice 0 of a solo row) ----------------------------------------
    def _row_is_solo(self, k, io, sl, lds):
        """Uniform i1: this job's row finishes solo, from the value of its own slice's rdy1
        pair (published by sel_h1, an earlier stage, long before: one poll, no fence)."""
        c = self.cfg
        flag = lds["solo"]
        with _wave0(k):
            v = io.wait(c.rdy(1), sl.r * c.max_slices + sl.s)
            k.store(flag, 0, v & RDY_SOLO)
        _barrier(k)
        return k.load(flag, 0, u32).ne(0)

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
        S = c.max_slices
        lk = c.max_slice_keys()
        off = lds["solo_off"]
        s = k.const(0, i32)
        start = k.const(0, i32)
        step = 1 << max(0, (S - 1).bit_length() - 1) if S > 1 else 0
        while step:
            cand = s + step
            at = k.load(off, k.min(cand, S - 1), i32)
            inside = (cand < sl.sc) & (at <= i)
            s = k.select(inside, cand, s)
            start = k.select(inside, at, start)
            step //= 2
        lim = k.select(i < nv, k.load(lds["solo_len"], s, i32), 0)
        j = k.min(i - start, lk - 4)
        at = (sl.r * S + s) * lk + j
        key = io.load(c.list_keys, at, 4)
        p = io.load(c.list_pos, at, 4) if pos else None
        return key, p, j, lim


# ----------------------------------------------------------------------------- producers
# (standalone launches: what the scoring will publish in the fused index launch)

class ScoreHistStage(Stage):
    """The scoring's first-digit histograms, as the scoring publishes them: per (row,
    segment) job, the 64 counts of key >> 26 over the segment's visible keys (key 0, i.e.
    -inf and NaN, in bin 0; positions >= n_keys not counted) -> tagged pairs `score_hist`."""

    def __init__(self, cfg: SelectConfig, scores):
        self.cfg = cfg
        self.scores = scores
        self.name = f"{cfg.prefix}_feed_hist"

    def jobs(self):
        c = self.cfg
        return [Job(j, cost_bytes=c.segment * 4, cost_flops=c.segment)
                for j in range(c.rows * c.segments)]

    def regions(self):
        c = self.cfg
        return [TaggedPairs(c.names.score_hist, (c.rows, c.segments, FIRST_DIGIT_BINS), u32)]

    def buffers(self):
        c = self.cfg
        out = {c.names.n_keys: Buffer(i32, (c.rows,))}
        out.update(self.scores.buffers())
        return out

    def reads(self, j):
        return list(self.scores.reads(j // self.cfg.segments))

    def writes(self, j):
        return [Use(self.cfg.names.score_hist, j * FIRST_DIGIT_BINS, (j + 1) * FIRST_DIGIT_BINS)]

    def reference(self, env):
        import torch
        c = self.cfg
        h = segment_histograms(c, env[c.names.scores].cpu().numpy().astype(np.float32),
                               c.n_of(env[c.names.n_keys].cpu().numpy()))
        return {c.names.score_hist: torch.as_tensor(h.astype(np.int64), dtype=torch.float64)}

    def body(self, k, job, io):
        io = _flat(io)
        c = self.cfg
        r = job / c.segments
        g = job % c.segments
        n = k.load(getattr(io.args, c.names.n_keys), r, i32) + (1 if c.positions else 0)
        n = k.min(k.max(n, 0), c.capacity)
        lo = g * c.segment
        hi = k.min(lo + c.segment, n)
        hist = k.lds(f"{self.name}_hist", u32, FIRST_DIGIT_BINS)
        t = k.thread_id()
        T = k.W * k.L
        for i in range((FIRST_DIGIT_BINS + T - 1) // T):
            idx = t + i * T
            k.store(hist, k.min(idx, FIRST_DIGIT_BINS - 1), k.const(0, u32),
                    mask=idx < FIRST_DIGIT_BINS)
        _barrier(k)
        self.scores.prepare(k, io)
        one = k.const(1, u32)
        with k.if_(lo < hi):
            for base in k.range(lo, hi, 4 * T):
                p = base + 4 * t
                m = p < hi
                key, _ = ordered_keys(k, self.scores.load4(k, io, r, p, m))
                valid = k.vec(p, p + 1, p + 2, p + 3) < hi
                digit = key >> FIRST_DIGIT_SHIFT
                for e in range(4):
                    k.atomic("add", hist, _i(k, k.extract(digit, e)), one,
                             mask=k.extract(valid, e), scope="cta")
        _barrier(k)
        for i in range((FIRST_DIGIT_BINS + T - 1) // T):
            b = t + i * T
            m = b < FIRST_DIGIT_BINS
            bb = k.min(b, FIRST_DIGIT_BINS - 1)
            v = k.load(hist, bb, u32, mask=m)
            io.publish(c.names.score_hist, job * FIRST_DIGIT_BINS + bb, v, mask=m)


class ScoresFeed(Stage):
    """Copies the input scores into the arena region the selection reads (a BulkBuffer, one
    publisher per row): the fused launch's scoring writes the region instead."""

    def __init__(self, cfg: SelectConfig, source_name: str = "scores_in"):
        self.cfg = cfg
        self.src = source_name
        self.name = f"{cfg.prefix}_feed_scores"

    def jobs(self):
        c = self.cfg
        return [Job(r, cost_bytes=c.capacity * 8) for r in range(c.rows)]

    def regions(self):
        c = self.cfg
        return [BulkBuffer(c.names.scores, f32, (c.rows, c.capacity), publishers=c.rows)]

    def buffers(self):
        c = self.cfg
        return {self.src: Buffer(f32, (c.rows, c.capacity))}

    def writes(self, r):
        c = self.cfg
        return [Use(c.names.scores, r * c.capacity, (r + 1) * c.capacity)]

    def reference(self, env):
        return {self.cfg.names.scores: env[self.src]}

    def body(self, k, job, io):
        io = _flat(io)
        c = self.cfg
        t = k.thread_id()
        T = k.W * k.L
        for base in k.range(0, c.capacity, 4 * T):
            p = base + 4 * t
            m = p < c.capacity
            v = k.load(getattr(io.args, self.src), job * c.capacity + p, f32, 4, mask=m)
            io.store(c.names.scores, job * c.capacity + p, v, mask=m)
        io.release(c.names.scores)


class ScoringModel(Stage):
    """The index launch's scoring protocol (stages/index.py), on injected scores: job r
    writes row r's visible scores to the plain region `scores` and their first-digit counts
    per segment to the plain region `score_hist` (segments past the row's last key
    untouched), then a release fence and its `score_done` pair. A consumer waits for all of
    them (`score_done_ready`): as with the scoring, any job may write any row."""

    def __init__(self, cfg: SelectConfig, source_name: str = "scores_in"):
        self.cfg = cfg
        self.src = source_name
        self.name = f"{cfg.prefix}_feed_scoring"

    def jobs(self):
        c = self.cfg
        return [Job(r, cost_bytes=c.capacity * 8) for r in range(c.rows)]

    def regions(self):
        c, nm = self.cfg, self.cfg.names
        return [PlainBuffer(nm.scores, f32, (c.rows, c.capacity)),
                PlainBuffer(nm.score_hist, u32, (c.rows, c.segments, FIRST_DIGIT_BINS)),
                TaggedPairs(nm.score_done, (c.rows,), u32)]

    def buffers(self):
        c = self.cfg
        return {self.src: Buffer(f32, (c.rows, c.capacity)), c.names.n_keys: Buffer(i32, (c.rows,))}

    def writes(self, r):
        c, nm = self.cfg, self.cfg.names
        w = c.segments * FIRST_DIGIT_BINS
        return [Use(nm.scores, r * c.capacity, (r + 1) * c.capacity),
                Use(nm.score_hist, r * w, (r + 1) * w), Use(nm.score_done, r, r + 1)]

    def reference(self, env):
        return {self.cfg.names.scores: env[self.src]}  # (the visible part is what is read)

    def body(self, k, job, io):
        io = _flat(io)
        c, nm = self.cfg, self.cfg.names
        n = k.load(getattr(io.args, nm.n_keys), job, i32) + (1 if c.positions else 0)
        n = k.min(k.max(n, 0), c.capacity)
        t = k.thread_id()
        T = k.W * k.L
        hist = k.lds(f"{self.name}_hist", u32, FIRST_DIGIT_BINS)
        one = k.const(1, u32)
        row = job * c.capacity
        for g in k.range(0, (n + (c.segment - 1)) / c.segment):
            for i in range((FIRST_DIGIT_BINS + T - 1) // T):
                b = t + i * T
                k.store(hist, k.min(b, FIRST_DIGIT_BINS - 1), k.const(0, u32),
                        mask=b < FIRST_DIGIT_BINS)
            _barrier(k)
            lo = g * c.segment
            hi = k.min(lo + c.segment, n)
            for base in k.range(lo, hi, 4 * T):
                p = base + 4 * t
                m = p < hi
                v = k.load(getattr(io.args, self.src), row + p, u32, 4, mask=m)
                valid = k.vec(p, p + 1, p + 2, p + 3) < hi
                for e in range(4):  # the scoring stores visible scores only
                    io.store(nm.scores, row + p + e, k.bitcast(k.extract(v, e), f32),
                             mask=k.extract(valid, e))
                key, _ = ordered_keys(k, v)
                digit = key >> FIRST_DIGIT_SHIFT
                for e in range(4):
                    k.atomic("add", hist, _i(k, k.extract(digit, e)), one,
                             mask=k.extract(valid, e), scope="cta")
            _barrier(k)
            for i in range((FIRST_DIGIT_BINS + T - 1) // T):
                b = t + i * T
                m = b < FIRST_DIGIT_BINS
                bb = k.min(b, FIRST_DIGIT_BINS - 1)
                io.store(nm.score_hist, (job * c.segments + g) * FIRST_DIGIT_BINS + bb,
                         k.load(hist, bb, u32, mask=m), mask=m)
            _barrier(k)
        k.fence("release", "device")
        _barrier(k)
        with _wave0(k):
            io.publish(nm.score_done, job, _u(k, n))


# ----------------------------------------------------------------------------- composition

def select_stages(cfg: SelectConfig, *, scores="buffer", hist=None, ready=None,
                  **fences) -> list:
    """The selection's stages (sel_h0 .. sel_out). `scores`: "buffer" (input [rows,
    capacity] f32), "region" (an arena BulkBuffer of that shape written earlier in the
    launch) or a source object; `hist`: None (local first pass), "buffer" (input [rows,
    segments, 64] u32) or "region" (the scoring's tagged pairs)."""
    if scores == "buffer":
        scores = BufferScores(cfg)
    elif scores == "region":
        scores = RegionScores(cfg)
    elif scores == "plain":
        scores = RegionScores(cfg, bulk=False)
    if hist == "buffer":
        hist = HistBuffer(cfg)
    elif hist == "region":
        hist = HistRegion(cfg)
    elif hist == "plain":
        hist = HistPlain(cfg)
    elif hist is not None and not hasattr(hist, "read"):
        raise ValueError(f"hist {hist!r}: None, 'buffer', 'region' or 'plain'")
    return [SelectPass(cfg, q, scores, hist, ready=ready, **fences)
            for q in range(cfg.passes + 1)]


def select_launch(cfg: SelectConfig, *, grid: int, waves: int = 1, hist=None, scores="buffer",
                  name: str = "select", release=True, acquire=True, **kw) -> Launch:
    """A standalone selection launch.
    scores: "buffer" (the input `scores`), "stage" (a producer copies the input `scores_in`
            into an arena BulkBuffer first) or "scoring" (a producer follows the index
            launch's protocol: plain `scores` and `score_hist` behind `score_done` pairs);
    hist:   None (a local first pass), "buffer" (score_hist an input), "stage" (a producer
            publishes score_hist as tagged pairs) or "scoring" (with scores="scoring": the
            producer's plain score_hist)."""
    pre = []
    ready = None
    if scores == "stage":
        pre.append(ScoresFeed(cfg))
        src = RegionScores(cfg)
    elif scores == "buffer":
        src = BufferScores(cfg)
    elif scores == "scoring":
        pre.append(ScoringModel(cfg))
        src = RegionScores(cfg, bulk=False)
        ready = score_done_ready(cfg, cfg.rows)
    else:
        raise ValueError(f"scores {scores!r}: 'buffer', 'stage' or 'scoring'")
    if hist == "stage":
        pre.append(ScoreHistStage(cfg, src))
        h = "region"
    elif hist == "scoring":
        if scores != "scoring":
            raise ValueError("hist='scoring' needs scores='scoring' (its producer writes both)")
        h = "plain"
    elif hist in (None, "buffer"):
        h = hist
    else:
        raise ValueError(f"hist {hist!r}: None, 'buffer', 'stage' or 'scoring'")
    L = Launch(name, pre + select_stages(cfg, scores=src, hist=h, ready=ready, release=release,
                                         acquire=acquire), grid=grid, waves=waves, **kw)
    L.select_cfg = cfg
    L.select_mode = dict(hist=hist, scores=scores)
    return L


# ----------------------------------------------------------------------------- host side

def segment_histograms(cfg: SelectConfig, scores: np.ndarray, n_keys) -> np.ndarray:
    """[rows, segments, 64] u32: what the scoring publishes in score_hist."""
    R, seg = scores.shape[0], cfg.segment
    out = np.zeros((R, cfg.segments, FIRST_DIGIT_BINS), np.uint32)
    for r in range(R):
        n = int(n_keys[r])
        keys = ordered_key(scores[r, :n]) >> FIRST_DIGIT_SHIFT
        for g in range(-(-n // seg)):
            out[r, g] = np.bincount(keys[g * seg:(g + 1) * seg], minlength=FIRST_DIGIT_BINS)
    return out


def validate_inputs(cfg: SelectConfig, scores, n_keys, block_table):
    """The host's check of what the kernel also rejects (sel_h0's error word): a clear
    ValueError naming the bad value, before anything is launched."""
    n_keys = np.asarray(n_keys)
    bt = np.asarray(block_table)
    if np.asarray(scores).shape != (cfg.rows, cfg.capacity):
        raise ValueError(f"scores shape {np.asarray(scores).shape} != ({cfg.rows}, {cfg.capacity})")
    if bt.shape != (cfg.rows, cfg.bt_width):
        raise ValueError(f"block table shape {bt.shape} != ({cfg.rows}, {cfg.bt_width})")
    for r in range(cfg.rows):
        n = int(n_keys[r])
        if n > MAX_KEYS:
            raise ValueError(f"row {r}: {n} keys exceed the selection's limit of {MAX_KEYS} "
                             "(512K keys)")
        if not 0 <= n <= cfg.capacity:
            raise ValueError(f"row {r}: n_keys = {n} outside 0..{cfg.capacity} (the scores' "
                             "capacity)")
        pages = bt[r, :-(-n // PAGE)]
        bad = np.flatnonzero((pages < 0) | (pages > MAX_PAGE))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"row {r}: block_table[{r}, {i}] = {int(pages[i])} for visible "
                             f"keys {i * PAGE}..{min(n, (i + 1) * PAGE) - 1} (a page must be "
                             f">= 0)")


def reference_select(scores, n_keys, block_table, k: int = TOPK):
    """(slots [rows, k] int32, diag [rows, 4] u32: NaNs, selected, -inf or NaN, visible) by
    the independent reference layouts.scores.exact_topk_positions."""
    scores = np.asarray(scores, np.float32)
    R = scores.shape[0]
    out = np.full((R, k), -1, np.int32)
    diag = np.zeros((R, DIAG_WORDS), np.uint32)
    for r in range(R):
        n = int(n_keys[r])
        pos = exact_topk_positions(scores[r, :n], k)
        pages = np.asarray(block_table[r], np.int64)[pos // PAGE]
        if (pages < 0).any():
            raise ValueError(f"row {r}: a selected key's page is {int(pages.min())}")
        out[r, :pos.size] = (pages * PAGE + pos % PAGE).astype(np.int32)
        row = scores[r, :n]
        diag[r] = (int(np.isnan(row).sum()), pos.size,
                   int((np.isnan(row) | np.isneginf(row)).sum()), n)
    return out, diag


def make_inputs(cfg: SelectConfig, scores, n_keys, block_table, *, hist=None,
                scores_in_stage=False) -> dict:
    """The launch's input dict from visible key counts (stored as positions, n - 1, with
    cfg.positions); outputs pre-filled with a sentinel the kernel must overwrite (-2 in
    every slot, all-ones diagnostics); `scores_in_stage`: the scores go to `scores_in`, the
    input of a producer stage."""
    nm = cfg.names
    counts = np.asarray(n_keys, np.int64) - (1 if cfg.positions else 0)
    d = {nm.n_keys: counts.astype(np.int32),
         nm.block_table: np.asarray(block_table, np.int32).copy(),
         nm.out: np.full((cfg.rows, cfg.topk), -2, np.int32),
         nm.diag: np.full((cfg.rows, DIAG_WORDS), 0xFFFFFFFF, np.uint32)}
    d["scores_in" if scores_in_stage else nm.scores] = np.asarray(scores, np.float32).copy()
    if hist == "buffer":
        d[nm.score_hist] = segment_histograms(cfg, np.asarray(scores, np.float32), n_keys)
    return d


def request_positions(pos: int, rows: int) -> np.ndarray:
    """n_keys of the rows of one request at context position P: row j of n sees keys
    0 .. P - n + j (so n_keys = P - n + j + 1)."""
    n = np.array([pos - rows + j + 1 for j in range(rows)], np.int64)
    if (n < 0).any():
        raise ValueError(f"position {pos} leaves row(s) with no keys for {rows} rows")
    return n


def random_block_table(cfg: SelectConfig, rng, *, shared: bool = True) -> np.ndarray:
    """Distinct random pages (rows of one request share one table when `shared`)."""
    pages = cfg.bt_width
    if shared:
        row = rng.permutation(pages * 3)[:pages].astype(np.int32)
        return np.tile(row, (cfg.rows, 1))
    return np.stack([rng.permutation(pages * 3)[:pages] for _ in range(cfg.rows)]).astype(np.int32)


# ----------------------------------------------------------------------------- launch kinds

# the SelectConfig options measured faster on the H200 (bench/NOTES.md v7, v8) and left off
# on AMD, where each costs registers (the fused AMD kernel sits at its SGPR ceiling) and is
# unmeasured: every builder of a config sets them through measured_options
MEASURED_ON_NVIDIA = ("batched_append", "prefetch", "defer_fat_bins", "rare_specials",
                      "count_from_list", "early_loads", "wide_segment_sums", "list_bases",
                      "one_wait", "lean_scan")


def measured_options(on: bool) -> dict:
    """SelectConfig keywords: the NVIDIA-measured options all on (NVIDIA, the interpreter)
    or all off (AMD)."""
    return {name: on for name in MEASURED_ON_NVIDIA}


def config_for(spec, *, max_slices: int | None = None, digits=None,
               lean_lists: bool | None = None, finish_max: int | None = None) -> SelectConfig:
    """The selection of a build spec: capacity = the config's context limit (512K keys for
    GLM-5.x), segments of 1024 keys (512 below 256K), slices per row = CTAs / rows (<= 64;
    4 in the interpreter), the radix plan `digits` (None: SELECT_KIND_DIGITS, or
    SELECT_KIND_DIGITS_WIDE past WIDE_ROW_SLICES slices a row; DEFAULT_DIGITS on AMD,
    unmeasured there), `lean_lists` (None: on off AMD), `finish_max` (None or 0: no row
    finish)."""
    cap = spec.config.max_context
    seg = 1024 if cap >= (1 << 18) else 512
    if max_slices is None:
        if spec.target == "interp":
            max_slices = 4
        else:
            max_slices = max(1, min(MAX_SLICES, spec.target_info.num_ctas // spec.rows))
    amd = spec.target != "interp" and spec.target_info.is_amd
    return SelectConfig(ScoresLayout(spec.rows, cap, seg), max_slices=max_slices,
                        topk=spec.config.index_topk,
                        digits=digits or (DEFAULT_DIGITS if amd else
                                          SELECT_KIND_DIGITS_WIDE if max_slices > WIDE_ROW_SLICES
                                          else SELECT_KIND_DIGITS),
                        **measured_options(not amd),
                        lean_lists=(not amd) if lean_lists is None else bool(lean_lists),
                        finish_max=finish_max or None)


def _waves_for(spec) -> int:
    if spec.target == "interp":
        return 1
    return 4 if spec.target_info.is_amd else 8


def _grid_for(spec) -> int:
    return 8 if spec.target == "interp" else spec.target_info.num_ctas


def _kind_launch(spec, hist=None, *, select_digits=None, waves=None, lean_lists=None,
                 finish_max=None):
    cfg = config_for(spec, digits=select_digits, lean_lists=lean_lists, finish_max=finish_max)
    return select_launch(cfg, grid=_grid_for(spec), waves=waves or _waves_for(spec), hist=hist,
                         name="select_hist" if hist else "select")


def _kind_inputs(launch, spec, rng, pos=None):
    """Normal scores; the rows of one request at position `pos` (default: the last one the
    capacity holds); one shared block table of distinct random pages."""
    cfg = launch.select_cfg
    n = request_positions(cfg.capacity - 1 if pos is None else pos, cfg.rows)
    scores = rng.standard_normal((cfg.rows, cfg.capacity)).astype(np.float32)
    return make_inputs(cfg, scores, n, random_block_table(cfg, rng),
                       hist=launch.select_mode["hist"])


from .kinds import Kind, register  # noqa: E402

register(Kind("select", "exact top-k selection of injected scores (scores, n_keys, "
              "block_table -> topk slots, topk_diag)", _kind_launch, _kind_inputs,
              launch_tunables=("waves", "select_digits", "lean_lists", "finish_max")))
register(Kind("select_hist", "the selection with first digits given (score_hist [rows, "
              "segments, 64] u32, as the scoring publishes them)",
              lambda spec, **kw: _kind_launch(spec, hist="buffer", **kw), _kind_inputs,
              default=False, launch_tunables=("waves", "select_digits", "lean_lists", "finish_max")))
