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

Refined first digits (SelectConfig.fine_digits; layouts/scores.py; the fused index's default on
NVIDIA, stages.index.FINE_DIGITS_ON_NVIDIA, off elsewhere and in the select kinds). The
scoring also counts every score's top 10 bits per (job, row) into `score_fine`; sel_h1, once
it has decided the 64-bin first digit b, sums b's 16 sub-bins over the parts and decides 4
more bits, so its lists hold the keys at or above a 10-bit prefix (half a binade: 0.4-2.2% of
an indexer row at 512K, against 10-75% in b). No row is then deferred (defer_fat_bins off);
a slice's keys above the prefix are its list's length less its count at the prefix.

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

First digit folded (SelectConfig.fold_first_digits; select_hist's default off AMD). With the
scoring's segment histograms given as plain data (an input buffer or the fused launch's
plain region), there is no sel_h0: every slice's sel_h1 sums its row's segments itself (the
own slice's apart, for its keys above the threshold), decides the first digit as sel_h1 would
on message 0, and goes on. It reads the histograms in bands of `fold_bins` bins from the top
while the row holds fewer than K keys in the bands read; an unread bin's cum is then the
last band's, >= K, so the threshold search (the last bin with Gcum[b] >= need) finds the bin
a full read finds, and Gcum[b], Gcum[b + 1] and the own cum at b + 1 all lie in the bands
read. The same decision, lists and outputs as sel_h0's round, bit for bit.

Tail finish (SelectConfig.tail_finish; the select kinds' default off AMD for rows of more
than WIDE_ROW_SLICES slices: rows 2 and 4 on the H200). Only two digits are exchanged
(stages sel_h0, sel_h1, sel_out). sel_h1, after counting digit 1 of its candidates, writes
their keys into a bucketed list (a counting sort: bucket b at cum[b + 1], its start from
CTA-parallel suffix sums, slots by LDS atomics); sel_out, deciding on message 1, finds the
row's candidates left (prefix Q of 15 bits for (6, 9, ..)) as bucket b of every slice: cum[b]
- cum[b + 1] keys from entry cum[b + 1] of that slice's bucketed list. Its lanes (T / S a
slice) gather them into LDS, the plan's remaining digits are decided by LDS histogram
passes on the same counts the rounds would sum (CTA-parallel suffix sums and threshold),
each slice's candidates above and at the final prefix are counted, and the slice is placed
(as `_placement`, its keys above the 15-bit prefix X_ABOVE + cum[b + 1]) and emitted from
its position-ordered list: the rounds' outputs bit for bit. A row with more candidates than
TAIL_FINISH_LDS reads them from the buckets again in every pass (exact at any count:
all-equal scores make every key one). Measured (bench/NOTES.md v27): select_hist rows 2
-1.5..-2.3 us, rows 4 -0.3..-1.5; rows 8 slower (sel_h1's bucketing, +1.7 us at 512K, +4 at
64K where the first digit's bin holds half the row), so the coarse plan's rows 8 keep the
rounds. After refined first digits the bins are narrow: select_hist on sm_90a at rows 4 and 8
takes them with the tail and the group skip by default (launches.SELECT_HIST_TAIL_ON_NVIDIA;
r8 64K / 512K 18.02 / 24.62 -> 15.54 / 20.84 us on an H100, v51). The fused
index takes it after its refined first digits too (sel_h1 buckets its 10-bit prefix's
candidates by the next digit), by default on NVIDIA at rows 4 and 8 (stages.index.
TAIL_FINISH_ON_NVIDIA): r8 W1 512K 104.5 / 105.0 -> 101.9 / 102.3 us on an H100 (v47), W1 /
W2 0.974 / 0.927 at 64K, 0.975 / 0.971 at 512K (v50).

The tail or the rounds, per row (SelectConfig.tail_max_per_slice = N; `--tune
launch.tail_per_slice=N`; off by default). Every stage of the full plan is built; sel_h1,
deciding the first digit, sends a row to the tail when its threshold bin holds at most N keys
a slice of the row (the same count on every slice, so the same choice) and is not crowded
(a deferred row has no list of sel_h1's to bucket): X_SOLO in the state and the RDY_SOLO bit
of rdy1, as a solo row's. Per job of a tail row / of another row:

    sel_h1   buckets its candidates / does not
    sel_h2.. their own rdy1 (an earlier stage), then nothing / the rounds as before
    sel_out  its own rdy1, then tail_finish's sel_out (a SelectPass of the config's
             `tail_view`, its own LDS): decides on message 1, finishes from the buckets /
             the rounds' sel_out

Outputs and diagnostics are the rounds' bit for bit either way (test_select_tail_rows.py).
Why: which form is faster depends on the row's scores (the bucketing's cost grows with the
bin: normal scores hold ~750 keys a slice in it at 512K x 8, ~2K at 64K x 8). Measured
SLOWER on an H100 (bench/NOTES.md v47): select_hist r8 1.087 at 64K (a rounds row's sel_h3
and sel_out poll rdy1 before their own wait), 1.026 at 512K, 0.95-0.97 at 128K-256K; rows 2
and 4 1.14-1.39 against the static tail (a tail row's sel_h2 and sel_h3 jobs wait for their
slice's sel_h1, queued ahead of sel_out on their CTAs).

The same choice by key count (SelectConfig.tail_min_keys = N; `--tune launch.tail_min_keys=N`;
off by default). A row of at least N visible keys takes the tail, a shorter one the rounds;
every job computes that from n_keys, which it reads first anyway, so no job polls rdy1 for it
(sel_h1 still sets X_SOLO and RDY_SOLO, read by nobody): a tail row's sel_h2 .. return before
any wait, a rounds row's later jobs wait as the rounds do. A tail row is never deferred (it
buckets sel_h1's list; the tail finish is exact at any count). Why the key count: the
bucketing's cost grows with the threshold bin's share of a slice, which falls as the row
grows (normal scores at rows 8: ~2K keys a slice at 64K, ~750 at 512K). Not faster (v50,
H100, select_hist r8 with the maxima and the 16-wide fold): 64K 1.074 (the rounds' row pays
the maxima and the fold), 512K 21.0 us against the static tail's 19.6; the fused index 0.98-
1.00 against the static tail's 0.93-0.97: off.

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
the first digits as an input, on sm_90a at rows 4 / 8 the refined ones and the group maxima
too) selects on injected scores: any distribution can be checked
(tools/check_topk.py).
"""
from __future__ import annotations

from layouts.scores import (FINE_DIGIT_BINS, FINE_DIGIT_BITS, FIRST_DIGIT_BINS,
                            FIRST_DIGIT_BITS, FIRST_DIGIT_SHIFT, KEY_BITS, MAX_KEYS, MAX_SLICES,
                            REFINED_BINS, TOPK, ScoresLayout, exact_topk_positions, ordered_key,
                            refined_digit)  # noqa: F401

from .config import (DEFAULT_DIGITS, DEFER_MIN_TOPKS, DEFER_SHIFT, DIAG_WORDS, FINE_DIGITS,
                     FINE_MISMATCH, FINISH_MAX_LIMIT,
                     FINISH_TALLIES, FINISH_UNROLL, FIN_B, FIN_COUNT, FIN_GO, FIN_HAS_HI, FIN_T,
                     FIN_T_ABOVE, FIN_WORDS, INVALID_N, INVALID_PAGE, LEAN_GROUPS, LEAN_LANE_KEYS,
                     LEAN_REFILL_TURNS, LEAN_SENTINEL, LEAN_WIDE_KEYS, LIST_UNROLL, LOAD_KEYS,
                     MAX_PAGE, NEXTRA, Names, PAGE, PAGE_SHIFT, RDY_SOLO, SCAN_AHEAD, SCAN_UNROLL,
                     SCORE_PREFETCH_PIECE, SEGMENT_UNROLL, SELECT_KIND_DIGITS,
                     SELECT_KIND_DIGITS_WIDE, SOLO_MAX_CANDIDATES, SOLO_UNROLL, SelectConfig,
                     UNROLL, WIDE_ROW_SLICES, X_ABOVE, X_BASE, X_D, X_DEFER, X_DONE, X_EMITTED,
                     X_NAN, X_NANS, X_NEED, X_NLIST, X_Q, X_SOLO, X_TIEBASE, X_TOTAL, X_UNSEL,
                     X_UNSELS, check_digits, slice_bounds)  # noqa: F401
from .sources import (BufferScores, FineBuffer, FinePlain, HistBuffer, HistPlain, HistRegion,
                      Ready, RegionScores, score_done_ready)  # noqa: F401
from .lanes import (F32_NEG_INF_BITS, F32_QNAN_BITS, NORMAL_KEY_HI, NORMAL_KEY_LO, initial_state,
                    keys_and_specials, ordered_keys, score_floor, sign_flip)  # noqa: F401
from .reference import (fine_histograms, reference_select, segment_histograms,  # noqa: F401
                        validate_inputs)
from .passes import SelectPass  # noqa: F401
from .producers import ScoreHistStage, ScoresFeed, ScoringModel  # noqa: F401
from .launches import (MEASURED_ON_NVIDIA, _grid_for, _kind_inputs, _kind_launch, _waves_for,
                       config_for, make_inputs, measured_options, random_block_table,
                       request_positions, select_hist_choices, select_launch,
                       select_stages)  # noqa: F401
