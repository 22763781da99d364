"""The index scoring (stages/index.py): ix_score, the scores of every visible cached key,
and the consumer side of its protocol (wait_scored, scored_reads).

    ix_score[j]  J jobs (one a CTA). The plan (wave 0, one row a lane): row r joins row r-1's
                 group iff it sits at the next position and its page of pos[r-1] is row
                 r-1's (same request); a group is scored together, read through its last
                 row's block table. A unit is (group, segment of S keys) and costs the
                 group's row PAIRS; units are split over the J jobs by cost prefix (even at
                 every context: a long row's keys are split evenly across CTAs;
                 `score_runs` is the same map on the host). Scores go to `scores` by logical
                 position, first-digit counts to an LDS histogram per (row, segment) (LDS
                 atomics), flushed to `score_hist` after a CTA barrier; each job then
                 announces itself in `score_done` (release fence, then the pair).
                 share_pages (on sm_90a): requests of one length sharing their pages score
                 those once, in one group of all their rows (stages/index_share.py).

Scoring tilings (stages/index_tiling.py: the head's 128 bytes are permuted onto the atom's K
so a lane loads 32 contiguous key bytes, two 16-byte nontemporal loads, straight into
registers as the A operand, DEPTH (2) steps ahead; no LDS copy, no barrier, no branch on the
key path):

    gfx950  v_mfma_f32_16x16x128_f8f6f4: A = 16 keys x 128 B, B = 16 heads of one row
            (registers, from ix_qb), one MFMA a head half. A wave scores a row PAIR, at
            every build width (below 4 rows too: simplest; the pair's second row is masked
            when a group has an odd row count): per 16 keys 2 rows x ceil(heads/16) MFMAs (4
            for 32 heads), each key read and converted once for both rows. Waves are spread
            over the group's pairs with power-of-two strides (P rounded up to P2 = 2^lp: wave
            w takes pair w % P2 and every (W/P2)-th 16-key group: shifts, no division; a
            wave idles only for groups of 5-6 rows). relu, the head weights and the head
            halves in registers; the 16 head lanes are reduced by a reduce-scatter of lane
            swaps (8, 4, 2, 1: 8 swaps for 2 rows x 4 keys), one score a lane pair.
    gfx942  v_mfma_f32_16x16x32_fp8 (e4m3fnuz): the same with 4 chained MFMAs a head half
            (16 per pair and 16 keys).
    sm_90a  wgmma m64n(2*HP)k32 e4m3: a warpgroup takes 64 keys (one page) as the register
            A operand, every row pair of the group reads its queries from shared memory as
            B (staged once a job, K-major), 4 chained wgmmas a pair: all rows of the CTA
            share each key load. A group of all the plan's pairs runs them in one chain
            (N = 2 x pairs x HP). Head sums (`head_sum`, default "auto" = "mma" here): a
            chain of several pairs packs relu(acc) to bf16 pairs in place (one
            cvt.rn.relu.bf16x2 a pair), the A operand of 16 wgmma m64n8k16 bf16 a step
            against the staged block-diagonal bf16 head weights (D column n = row n); a
            one-pair chain: FMAs on the same bf16 values, in-thread then 2 lane swaps
            (t = lane % 4). "fma": f32 relu and FMAs everywhere (the AMD form). Groups of
            fewer pairs than the plan run a chain a pair; in rows-2 builds two pages a step
            (`pages_per_step`: both chains issued before one wait).
            The group's loop and its measured alternatives (halves, alternation, turns,
            keys in shared memory, 16 warps with the pairs split: all off by default) are
            stages/index_score_sm90.py's `WgmmaGroup`; the pipelines it hands its steps to
            (`_pipeline`, `_pipeline_halves`, `_pipeline_alternate`) and the SS staging
            (`_group_ss`) are here.

Keys this launch writes: a row's new key lands in a slot that the group's key loop also
reads. Every job's key loop starts after its acquire of ix_nb, and ix_key stores the new keys
to the cache before it releases ix_nb, so no slot is read while it is being written and the
loop reads the launch's new keys (`cached_new_keys`: the sm_90a default, measured faster,
bench/NOTES.md v35). Where it is off (AMD, or sm_90a with tma_keys, whose async-proxy loads
that generic acquire does not order) the loop's value there is discarded: after the CTA
barrier `_fixup` recomputes exactly those scores from the launch's own new key (ix_nb, f32
dot products of exact fp8 products) and moves their histogram count from the stale digit to
the new one. Only the jobs whose range holds such a slot do anything there.

Scores/selection contract (layouts/scores.py; the region protocol is this module's):
    scores      PlainBuffer f32 [R, capacity]: scores[r, p] for p <= pos[r] (others untouched)
    score_hist  PlainBuffer u32 [R, capacity / S, 64]: first-digit (ordered_key >> 26)
                counts of the stored scores of row r in segment s (segments past the row's
                last key are untouched)
    score_fine  PlainBuffer u32 [J, R, 1024] (IndexPlan.fine_digits only): job j's counts
                of the refined first digit (ordered_key >> 22) of every score it stored,
                row by row (zeros for rows it scored none of); SelectConfig.fine_digits
    score_done  TaggedPairs u32 [J]: job j's pair is published after its scores and
                histograms (device-scope release fence first). A consumer polls all J pairs,
                takes an acquire fence (`wait_scored`; declare `scored_reads`), then reads
                both plain regions. Every scoring job may write any row's scores (the split
                follows the runtime contexts), so a consumer depends on all of them.
"""
from __future__ import annotations

import math

from layouts.regions import PlainBuffer, TaggedPairs
from layouts.scores import (FIRST_DIGIT_BINS, GROUP_KEYS, GROUP_MAX_REGION, REFINED_BINS,
                            REFINED_SHIFT, group_max_word)
from monokernel.atoms.base import DESC_SHIFT, desc_units
from monokernel.atoms.nvidia import WGMMA_B_LBO, WGMMA_B_SBO, wgmma_bf16, wgmma_e4m3
from monokernel.ir import TMA_SWIZZLE_128B, TensorMap
from monokernel.types import bf16, f32, i32, i64, u8, u16, u32, u64

from .base import Buffer, Job, Stage, Use
from .cycles import CycleTally
from .index_score_sm90 import WgmmaGroup
from .index_share import (count_divergent, counter_words, entries_scored, for_entries,
                          plan_entries, hist_slots as share_hist_slots,
                          plan_runs, plan_shared)
from .index_tiling import LANE_BYTES, SM90, KeyTiling
from .index_plan import HD, KEY_WORDS, PAGE, PAGE_BYTES, PAGE_ROWS, PAGE_SHIFT, PAGE_WORDS, SCALE_WORD0, QW, NW0, DEPTH, IndexPlan
from .index_dsl import (BF16_SHIFT, _has_bit, _lane, _tid, _scan, ordered_digit, ordered_digit_canonical,
                        refined_digit_canonical,
                        stage_body, wait_flags)

# Key steps in the ring of the alternating one-pair pipeline (`_pipeline_alternate`): its
# loads run ALT_SLOTS - 1 steps ahead, as DEPTH's (one-pair chains are short: W2's keys one
# step ahead measured 157 us against 104 with two, bench/NOTES.md v9); 4 made the fused
# rows-2 kernel spill
ALT_SLOTS = 3
# a row of a no-swizzle core matrix: 16 contiguous K bytes (PTX ISA, matrix descriptors)
CORE_ROW_BYTES = 16
WORD_BYTES = u32.bits // 8  # LDS staging words
# words of a 16-byte access (a vector load or store): a core-matrix row is one
ROW_WORDS = CORE_ROW_BYTES // WORD_BYTES
# IndexScore.share_pages / fixup_ballot where the chip is sm_90a (measured there: the
# class's comments); AMD keeps both off
SHARE_PAGES_ON_NVIDIA = True
FIXUP_BALLOT_ON_NVIDIA = True
# IndexScore.cached_new_keys where the chip is sm_90a (no fix-up: the key loop's reads of
# the launch's new keys follow ix_key's release); AMD keeps the fix-up
CACHED_NEW_KEYS_ON_NVIDIA = True
# IndexScore.nb_first where the chip is sm_90a (measured there: the class's comment); AMD
# keeps the q heads' wait first (its paths' ends are unmeasured)
NB_FIRST_ON_NVIDIA = True
# IndexScore.tails_last where the chip is sm_90a (measured there: the class's comment); AMD
# keeps the cost order (its schedule's late starters are unmeasured)
TAILS_LAST_ON_NVIDIA = True
# IndexScore.one_poller where the chip is sm_90a (measured there: the class's comment); AMD
# keeps every wave polling (unmeasured there; its code objects unchanged)
ONE_POLLER_ON_NVIDIA = True


def _record_parts(sources, piece_words):
    """The stores of a staged record split into independent parts: `sources[b][r]` lists
    the record words of store r into layout b; two stores share a part when they read a
    word of the same `piece_words` load. Returns [[(b, r, words)]] in first-store order."""
    parent = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    stores = [(b, r, src) for b, rows in enumerate(sources) for r, src in enumerate(rows)]
    for i, (_, _, src) in enumerate(stores):
        for w in src:
            parent[root(("store", i))] = root(("piece", w // piece_words))
    parts = {}
    for i, st in enumerate(stores):
        parts.setdefault(root(("store", i)), []).append(st)
    return list(parts.values())


def _store_or_defer(k, stores, buf, index, value, mask):
    """An LDS store made now, or appended to `stores` (when a list) to be made later."""
    if stores is None:
        k.store(buf, index, value, mask=mask)
    else:
        stores.append((buf, index, value, mask))


class IndexScore(Stage):
    """Scores of every visible cached key (module doc)."""
    name = "ix_score"
    rel_tol = 1e-5
    # the measured alternatives a user may set per run (tools' --tune ix_score.ATTR=VALUE)
    TUNABLES = ("ss_keys", "alternate_one_pair", "pipeline_min_pairs", "prefetch_pages",
                "turns", "split_pairs", "depth", "head_sum", "pages_per_step", "sum_accs",
                "defer_stores", "sum_mma", "grouped_hist", "narrow_depth", "narrow_prefetch",
                "async_keys", "late_loads", "key_piece", "tma_keys", "tma_slots", "tma_overlap",
                "share_pages", "fixup_ballot", "tail_rows", "cached_new_keys", "nb_first",
                "defer_narrow_gmax", "l2_ahead", "turn_split", "query_records",
                "warm_first", "tails_last", "waits_aside", "lean_plan", "one_poller")
    # Hopper: how a chain's accumulators become scores. "fma": relu, one f32 FMA a head by its
    # weight, in-thread sums and two lane swaps (f32 throughout: ~2 instructions an
    # accumulator). "mma": relu and the bf16 rounding in one cvt a PAIR of accumulators
    # (cvt.rn.relu.bf16x2.f32), then the head sums AND the quad's reduction on the tensor
    # cores: the packed pairs are, in place, the A operand of a bf16 wgmma m64n8k16 whose B
    # holds the head weights (bf16) block-diagonally by row, so D's column n is row n's score
    # (WgmmaGroup.finish_mma). Precision: relu(q . k) and w rounded to bf16 (8 significant
    # bits, 2**-9 relative), an order below the FP8 quantization of q and k (4 bits); the
    # own-operands references model both roundings (index_ref.scores_from_kernel).
    # "auto" (the default): "mma" on Hopper's plain / split / turns pipelines, measured faster
    # (H200, 512K keys, same call: index_scoring r8 W1 75.6 -> 64.5 us, W2 100.6 -> 103.2; r4
    # 52.4 -> 51.7 / 62.9 -> 63.7; r2 46.0 -> 45.3 / 45.9 -> 45.7; index r8 W1 143.5 -> 133.0,
    # W2 166.7 -> 167.0: bench/NOTES.md v11), "fma" elsewhere (AMD, and the measured-slower
    # Hopper pipelines: ss_keys, pipeline_min_pairs, alternate_one_pair)
    HEAD_SUMS = ("auto", "fma", "mma")
    head_sum = "auto"
    # Hopper: the queries' staging into wgmma B after their wait, a (head, row) record a
    # thread by 16-byte loads (`_query_records`); off: a 4-byte load a B word, a thread a
    # column (`_query_words`), which the H100's cycle accounts put at ~9000 clocks on every
    # job's critical path (bench/NOTES.md v56). H100, A/B in one process (v57):
    # index_scoring r8 512K W1 63.70 -> 60.79 us, 128K W2 38.94 -> 35.74 (two rounds)
    query_records = True
    # the first-digit count of the stored scores adds once a distinct digit a wave
    # (KernelBuilder.count grouped: match.any, sm_90a only; a wave's scores share one or two
    # first digits). Measured SLOWER on the H200 (bench/NOTES.md v18, same call:
    # index_scoring r8 W1 74.0 vs 62.5 us, W2 109.3 vs 100.3): off, a tunable (--tune
    # ix_score.grouped_hist=1); AMD has no match instruction
    grouped_hist = False
    _fine = None  # the job's LDS refined first-digit counts (body; IndexPlan.fine_digits)
    _entries_scored = None  # share_pages: the job's entries to score, a bit each (body)
    SUM_MMAS = ("wgmma", "sync")  # the head sum's MMA (`sum_mma`, below)
    # the head-sum wgmma: N = 8 output columns, one a row (rows <= 8)
    SUM_ATOM = wgmma_bf16(8)
    # The three below are measured alternatives of the rows-4 / rows-8 epilogue, all off
    # (H200, 512K keys, each against the default in the same call; bench/NOTES.md v15). Each
    # moved work that the cycle accounts charge to the epilogue (~900 clocks a step), and
    # none moved the step time: the key loop is not bound by that work's own latency.
    #
    # sum_accs: independent accumulators of the head-sum MMAs: row r's K chunks (run r's,
    # when a chunk holds several rows) go to accumulator r mod sum_accs, added after the
    # wait. A row's chunks stay in one accumulator, in order, and every other accumulator
    # holds an exact +0.0 in its column (relu >= 0 times B's zeros): the scores' bits do not
    # depend on it (the H200's digests equal). Against the one chain of 2 x rows dependent
    # m64n8k16: index_scoring r8 W1 63.40 / 62.86 / 63.85 us at 1 / 2 / 4, r4 47.04 / 46.41 /
    # 46.55; index r8 W1 127.82 vs 128.23 at 4. Noise.
    sum_accs = 1
    # defer_stores: step t - 1's scores stored and counted while step t's chain runs
    # (WgmmaGroup._wide_deferred). index_scoring r8 W1 63.40 vs 64.40 us but its tail 55.0
    # vs 53.1, W2 159.7 vs 99.7 (the build spills 48 bytes: ptxas 255 registers); index r8 W1
    # 130.6 vs 128.0. Its accounts: the stores' issue ~800 clocks under the chain, the chain
    # then done 1190 clocks after its issue (805-1017 without): what the stores gave back, the
    # chain took. (Carrying the head-sum D instead of the scaled scores drew ptxas's injected
    # wait, C7517: a register a wgmma wrote, read while another wgmma is in flight.)
    defer_stores = False
    # IndexPlan.group_max on the one-pair chains (sm_90a, W2's requests of one pair): each
    # chain's group-maximum swaps and store issued after the next chain's, under it
    # (WgmmaGroup._narrow_gmax_deferred; the all-pairs chain always defers them, v40: B/A
    # 0.987). Fused index r8 512K W2 on an H100 (bench/NOTES.md v43): 106.13 -> 105.66 us,
    # faster in each of three rounds. False: the four dependent swaps after the epilogue's
    # butterfly, at once
    defer_narrow_gmax = True
    # sum_mma: the bf16 head sum on "wgmma" (m64n8k16 a K chunk) or "sync" (each warp's
    # mma.sync m16n8k16 on the same packed A, B fragments loaded from the staged weights; no
    # spill, 244 registers at index_scoring r8). Bit-identical in the interpreter; on the
    # H200 index_scoring r8 W1 68.29 vs 64.66 us (with sum_accs 2: 65.39), r4 47.21 vs 47.25;
    # index r8 W1 132.78 vs 128.15; epilogue ~930 clocks a step either way.
    sum_mma = "wgmma"
    # K elements (bf16) in a row of the head-sum B's core matrices: LBO bytes apart
    SUM_CORE_K = CORE_ROW_BYTES // SUM_ATOM.b_smem.elem_bytes
    # The key loop's block-table entries load `depth` steps before the key loads that use them
    # (`_pipeline`). Without it (False) a step's key loads address through an entry loaded a
    # few instructions before: in the sm_90a rows-8 SASS the second step of each unrolled
    # pair issues its four key loads ~20 instructions after their block-table load, so the
    # warp waits one memory latency (a DRAM miss every 8 entries) before its next wgmma.
    prefetch_pages = False
    # Hopper, two warpgroups a CTA: they take turns at the tensor cores (named barriers 1
    # and 2: a warpgroup waits for its turn, issues its chain, hands the turn over, then
    # waits for its chain and runs its epilogue while the other's chain runs). Without it the
    # timeline's cycle accounts (v10) show the two in step: each waits ~1000 clocks for a
    # ~600-clock chain and runs its epilogue while the other runs its own. Measured: no gain
    # with the FMA epilogue (v10), slower with the bf16 head sum (v55, H200, index_scoring
    # 512K r8 W1 / W2 1.038 / 1.052): off
    turns = False
    # With turns, the all-pairs chain of the bf16 head sum in three turns a step: its first
    # `turn_split` K chunks, the rest, then the head-sum wgmmas; warpgroup 1 starts every
    # all-pairs loop one turn late (and 0 ends it with an idle one), so the tensor cores see
    # 0's head sum between 1's two chain parts and 1's between 0's (FA3's ping-pong with the
    # head sum inside it). Why: with one turn a chain, a warpgroup's head sum queues behind
    # the other's whole chain (the tensor pipe takes wgmmas in issue order), so each step's
    # epilogue still waits for both chains; with the split, the other's first part runs
    # while this one packs its accumulators (the relu-bf16 cvts), and the head sum goes next.
    # Measured SLOWER on an H200 (bench/NOTES.md v55, same process, index_scoring 512K): r8
    # W1 / W2 1.058 / 1.056 at 1, 1.104 / 1.107 at 2; r4 1.12-1.16. The cycle accounts: the
    # chain's wait 794 -> 973 clocks a step, the epilogue 904 -> 1128: the epilogue beside
    # the other's chain is no faster than beside the other's epilogue (v15's probe: ALU work
    # beside a chain costs about half again). None (the default): one turn a chain (`turns`).
    turn_split = None
    # Hopper, four warpgroups a CTA (waves=16): two page streams, each page's row pairs
    # split over a warpgroup pair (N = 128 at 8 rows: 64 accumulator registers, not 128),
    # for more warps to hide the epilogue's latencies. Off: prepared, not yet timed.
    split_pairs = False
    # key steps the register pipeline keeps in flight (`_pipeline`): DEPTH; 1 fits the
    # split path's 128 registers a thread (16 warps) without spills
    depth = DEPTH
    # Hopper groups of fewer pairs than the plan taking one page a step (W2's one-pair
    # requests in rows-4 / rows-8 builds): their own key-ring depth (None: `depth`) and
    # block-table prefetch (True: the entries load `depth` steps before the key loads that
    # address through them; an int n: n steps; False: none; None: as `prefetch_pages`).
    # Nsight Compute on index_scoring r8 W2 (bench/NOTES.md v19): 72% of the warps' stall
    # samples in that loop, 17% of them long-scoreboard waits, most at the block-table entry
    # that addresses the next key loads. H200, 512K keys, same call: index_scoring r8 W2
    # 99.2 / 101.1 -> 96.8 us, r4 W2 60.2 / 60.5 -> 58.6, W1 unchanged (r8 63.0 / 63.2 ->
    # 62.8, r4 47.8 / 47.2 -> 48.2); index r8 W2 160.9 -> 153.5, W1 122.9 -> 123.4. One step
    # ahead was slower (r8 W2 104.9), a ring of 3 too (102.3), and every loop's prefetch
    # (prefetch_pages) slowed the all-pairs chains (r4 W1 52.6, index r8 W1 130.0). The rows-8
    # builds then hold one value of the job loop in local memory (4 bytes, one reload a job,
    # none in a key loop: test_index.test_sm90a_ptx_builds)
    narrow_depth = None
    narrow_prefetch = True
    # Hopper one-page steps of groups of fewer pairs (as narrow_prefetch): the keys and
    # scales through a lane-private LDS ring of depth + 1 steps filled by async copies
    # (cp.async), a counted wait retiring exactly the step read, instead of loads into
    # registers. Why: ptxas gives a step's key loads and the next step's one scoreboard, so
    # the wait for one step's keys waits for the loads issued a step later too (the SASS of
    # index_scoring r8: every load of the loop on SB5, the loop's only wait at its top;
    # Nsight Compute: 10.8% of the W2 loop's samples there) and the ring is one step deep in
    # effect. With it the loop's SASS has the counted wait (LDGSTS, LDGDEPBAR, DEPBAR.LE
    # SB0, 1) and the top-k through index is exact, but it is much SLOWER (H200, 512K keys,
    # same call: index_scoring r8 W2 166.8 vs 98.0 us, r4 W2 95.2 vs 59.5, W1 unchanged:
    # bench/NOTES.md v19): off, a tunable (--tune ix_score.async_keys=1)
    async_keys = False
    # Hopper register-key loops (`_pipeline` with a `warm` hook: WgmmaGroup.pipeline): each
    # warp asks the L2 for its quarter of the page of step t + depth + l2_ahead at step t
    # (one bulk prefetch a warp a step, its block-table entry loaded a step earlier), so the
    # ring's register loads find their keys in the L2. Why: the ring hides one step of
    # latency in effect (ptxas gives every load of the loop one scoreboard, async_keys
    # above), and W2's step spends ~30% outside its work there (bench/NOTES.md v20); a
    # prefetch holds no register and no scoreboard. Exact (the same bits), but SLOWER (H100,
    # 512K keys, same process, bench/NOTES.md v52: index_scoring r8 W1 / W2 1.079 / 1.079 at
    # 2 steps, 1.093 / 1.098 at 4; r2 1.040 / 1.039, 1.096 / 1.092): the loop is not waiting
    # on DRAM latency. 0: off, a tunable (--tune ix_score.l2_ahead=N)
    l2_ahead = 0
    # Hopper: before the queries' wait (a job waits ~6 us for them in index_scoring, v55),
    # the first warm_first pages of each entry the job scores are asked of the L2 (a bulk
    # prefetch a page from wave 0, the block-table entry loaded for it), so the first steps'
    # ring loads and `locate`s find them there instead of in DRAM. Exact, no faster (H100,
    # index_scoring r8 512K, A/B in one process, bench/NOTES.md v57: W1 0.987 in one round,
    # then W1 / W2 1.000 / 0.998 in two; 128K W1's timeline: every job's p0 waits for the
    # queries ~1 us after the last q job ends, its ring's first loads not the long pole).
    # 0: off, a tunable (--tune ix_score.warm_first=N, N <= a wave's lanes)
    warm_first = 0
    # When a step's ring slot is refilled (`_pipeline`): "off" (default) before the step
    # computes, so step t + depth's loads are in flight during step t's chain; "narrow" (the
    # one-page steps of groups of fewer pairs) or "all" (every register pipeline) after it,
    # once the chain reading the slot has retired. Why: with the slot refilled first, the
    # slot's old and new values live at once and LLVM's loop phis copy the old one into the
    # wgmma's A registers (44 moves a two-step iteration in the sm_90a rows-8 W2 loop), and a
    # move of a loaded register waits for the load's scoreboard, which ptxas gives every
    # load of the loop (SB5): the ring covers one step of latency, not depth. Refilled after,
    # the W2 loop's loads spread over four scoreboards (tools.sass, bench/NOTES.md v19)
    LATE_LOADS = ("off", "narrow", "all")
    late_loads = "off"
    # Hopper: contiguous key bytes of a lane's load (KeyTiling.key_byte). 32: a lane's two
    # 16-byte loads of a key are its 32 contiguous bytes, so one load instruction of the
    # key's four holder lanes reads half of each of the key's four 32-byte sectors and the
    # next the other halves (Nsight Compute on index_scoring r8 W2: "49% excessive
    # sectors", L1 hit 52%, L2 hit 62%). 16: the holders' first loads read bytes [0, 64),
    # the second [64, 128): whole sectors, half the sector requests. The queries' staged K
    # order follows the tiling, so the scores' bits do not change. AMD's register-B atoms
    # keep 32 (a lane's query bytes in one 32-byte window)
    key_piece = LANE_BYTES
    # Hopper, the one-page steps of groups of fewer pairs (W2's one-pair chains): each
    # warpgroup's pages copied by TMA (keys and scales, one 128B-swizzled box a page) into a
    # ring of tma_slots LDS slots, an mbarrier phase a use, and scored by SS wgmma straight
    # from the slot (WgmmaGroup.narrow_tma; the queries staged a second time, in key-byte
    # order). Why: keys loaded into registers cannot hide their latency, ptxas waits for
    # every load of the loop at its top (bench/NOTES.md v20: ~30% of the W2 step outside the
    # loop's work); an mbarrier wait is exact a slot. Exact (top-k through index on the
    # H200) but SLOWER (H200, 512K keys, same call, 2 slots, overlapped: index_scoring r8 W2
    # 109.9 vs 96.0 us, r4 63.4 vs 59.1, r2 43.9 vs 39.0): off, a tunable; it frees the key
    # registers (rows-2 index_scoring 150 a thread vs 254), for more warps, untried
    tma_keys = False
    # pages a warpgroup keeps in flight (9 KB of LDS each: the fused rows-8 index, at 148.6
    # KB before, fits two a warpgroup beside the key-order query staging)
    tma_slots = 2
    # with tma_keys, a one-pair group's chain of step s runs while step s - 1's epilogue does
    # (WgmmaGroup._tma_overlapped). Nsight Compute on the TMA loop without it (bench/NOTES.md
    # v20): the keys are no longer waited for, the chain's wait is 14% of the samples. H200,
    # 2 slots, same-shape runs in two calls: r8 W2 109.9 overlapped, 114.0 in turn
    tma_overlap = True
    TMA_BARRIERS = (3, 4)  # named barrier of warpgroup 0 / 1 (after TURN_BARRIERS)
    TMA_MAP = "index_cache_tmap"  # the kernel argument of the cache's tensor map
    # the string tunables' values (tools' --tune)
    CHOICES = {"head_sum": HEAD_SUMS, "sum_mma": SUM_MMAS, "late_loads": LATE_LOADS}
    # Hopper groups of fewer pairs than the plan (W2's one-pair requests; every group of a
    # rows-2 build) take this many pages a step: with 2, both pages' chains are issued
    # before one wait (a narrow N = 64 chain leaves the tensor cores idle while a warpgroup
    # waits for it), then both epilogues (WgmmaGroup.compute_two). None (default): 2 in
    # builds of one row pair (rows 2: no all-pairs chain shares the kernel's registers), 1
    # otherwise. H200, 512K keys, same call (bench/NOTES.md v11): index_scoring r2 W1 / W2
    # 46.0 / 45.9 -> 43.2 / 43.1 us, r4 52.6 / 64.2 -> 52.6 / 61.1, r8 66.2 / 103.4 -> 65.2 /
    # 102.6, index r8 unchanged (132.3 / 167.3) but spilling 52 bytes (r4: 8)
    pages_per_step = None
    # Requests of one length sharing their pages (prefix sharing; workload W2) scored as one
    # group over the pages all of them read, each page's keys loaded once for all their rows
    # (stages/index_share.py: the plan's super groups, a per-job test that the pages agree,
    # each run alone where they do not); on sm_90a W2's rows 8 become one N = 8 x HP chain.
    # None: on where the chip is sm_90a (SHARE_PAGES_ON_NVIDIA, __init__), off on AMD (its
    # split stays uniform and is unmeasured). H100, 512K keys (bench/NOTES.md v32-v33, the
    # split weighing the chains): index_scoring r8 W2 99.4-99.8 -> 74.4-75.6 us, r4 W2 62.8
    # -> 57.8, W1 (no super group) +1.1-1.7 at rows 8; the fused index r8 (with row_parts
    # and fixup_ballot) W1 / W2 111.0-111.3 / 143.3-144.2 -> 110.1 / 121.3
    share_pages = None
    # The fix-up's search for the launch's new keys in an entry's range: every (entry, row u)
    # loads pos[u], then its page in the entry's table and in row u's, one u after the other
    # (2 dependent round trips a row: ~2.4-2.9 us a job between the key loop's barrier and
    # the next, on an H100, bench/NOTES.md v32 call 3, in every job, most of which have no
    # new key at all). fixup_ballot: lane u does those loads for row u at once and the
    # rows in range come from one ballot; the rescoring itself is unchanged. None: on where
    # the chip is sm_90a (FIXUP_BALLOT_ON_NVIDIA); H100 (v33): index_scoring r8 W1 66.9 ->
    # 65.1 us, with share_pages W2 74.4 -> 72.3, the fused index within noise
    fixup_ballot = None
    # (The rescoring itself, a row's found keys in one straight block instead of the row
    # loop's 3 dependent round trips a key, measured slower on an H100 both with masked loads
    # (v34) and unmasked (v35: the fused index r8 W1 / W2 1.16 / 1.26x): removed.)
    # share_pages' split with a run's tail (its fix-up, after its last segment) costed by its
    # rows (index_share.RUN_TAIL_FIXED / RUN_TAIL_ROW, fitted to v33's clocks: bench/NOTES.md
    # v34) instead of RUN_TAIL_COST a run: off until timed
    tail_rows = False
    # share_pages' split with the super entries first in its cost order and the runs' own
    # entries (their last segments, new keys and histogram flushes: the tails) after them, so
    # the tails go to the split's last jobs. Why: the first jobs are those the schedule puts
    # behind an ix_q / ix_key job on their CTA (index_scoring r8: jobs 0-5 and 21-47), which
    # start when the queries are in rather than waiting for them, and W2's job holding the 4
    # runs' tails ended last (H100, r8 128K W2: ix_score[2], 27.4 us against a 25.1 median,
    # 5.6 us after W1's last end; bench/NOTES.md v56). W1 (no super entry) is unchanged.
    # None: on where the chip is sm_90a (TAILS_LAST_ON_NVIDIA), off on AMD. H100, W2, A/B in
    # one process (bench/NOTES.md v57): index_scoring r8 at 128K 35.74 -> 32.12 us (two
    # rounds) and 36.21 -> 31.97, the fused index r8 at 128K 75.85 -> 69.90 (two rounds);
    # elsewhere within noise: r8 256K / 512K 1.003 / 0.998, r4 128K / 256K 0.987 / 0.994,
    # r2 1.018 / 0.998, W1 1.003, the fused index at 512K W1 / W2 1.009 / 1.007 (one round)
    tails_last = None
    # The launch's new keys as the key loop reads them from the cache, no fix-up: every key
    # load follows the job's acquire of ix_nb (the head weights need it), and ix_key stores
    # the new keys to the cache before that release, so no slot is read while it is being
    # written (the relaxed interpreter checks the order: test_index_fixup). It drops the
    # fix-up's search from every job (~1.0-1.5 us, v34) and its rescores from the job that
    # holds the runs' last segments (10.4 / 13.7 us at the fused index r8 W1 / W2, which end
    # it 5.6 / 12.7 us after the others). Not with tma_keys: the tensor maps' loads are the
    # async proxy's, which that generic acquire does not order. None: on where the chip is
    # sm_90a and the keys are not TMA's (CACHED_NEW_KEYS_ON_NVIDIA, `reads_cached_new_keys`),
    # off on AMD (unmeasured there). H100, 512K keys, A/B in one process (bench/NOTES.md v35):
    # the fused index r8 W1 / W2 111.3 / 121.1 -> 108.3 / 110.0 us, r4 95.8 / 101.7 -> 93.3 /
    # 92.0, r2 93.0 / 93.0 -> 88.3 / 87.3; index_scoring r8 66.3 / 72.1 -> 64.8 / 65.4
    cached_new_keys = None
    # The job's two waits in the other order: ix_nb's counter (ix_key's release) before the q
    # heads' pairs. A satisfied poll still costs a round trip, and the second wait's comes
    # after the first's: first the path that ends earlier. In every timeline so far the key
    # path ended first (the fused index r8 W1: ix_nb 16.0 us, the q heads 24.1, the scoring's
    # p0 25.8; v38: ~19 and ~25), so ix_nb first takes ~one round trip off the scoring's
    # start. None: on where the chip is sm_90a (NB_FIRST_ON_NVIDIA), off on AMD. H100, the
    # fused index r8 at 512K W1, A/B in one process, two device calls (bench/NOTES.md v38):
    # 107.5 -> 106.7 us and 107.4 -> 106.0; index_scoring r8 W1 64.1 -> 63.6
    nb_first = None
    # Hopper, the waits beside the plan: waves 1 .. W - 1 wait for the job's inputs (wave 1
    # ix_nb, the others the q heads) while wave 0 builds the job's plan (positions, block
    # tables: three dependent round trips), then the CTA's barrier and its agreement on a
    # failed wait (Mailbox's contract: a wave that did not wait sees the data through the
    # barrier after the waves that did). Why: the jobs the schedule starts behind an ix_q /
    # ix_key job on their CTA find their inputs ready, and spent ~3.7 us from their start to
    # the queries' wait's end (H100, index_scoring r8 128K W1: jobs 1-5 reach p0 at 14.3-14.6
    # us from starts at 10.5-10.7, and end 29.4-30.1 against the others' 26.4-28.1;
    # bench/NOTES.md v57), five round trips one after the other. Exact (top-k through the
    # fused index on the H200) but no gain where it counts: H200, A/B in one process (v57),
    # index_scoring r8 128K W1 / W2 0.987 / 0.984, 512K 0.997 / 0.981, the fused index r8
    # 512K W1 / W2 1.014 / 1.003 (two rounds). Off, a tunable (--tune ix_score.waits_aside=1);
    # only with share_pages (its barrier after the plan) and more than 2 waves (sm_90a's
    # wgmma scoring has whole warpgroups)
    waits_aside = False
    # share_pages' plan with one round trip fewer and no empty comparison: each row's page 0
    # loaded beside its position (the runs' page 0 then a lane swap, not a load after the
    # runs are known), and the page comparison's loop skipped when the job has no super
    # entry (W1; unrelated requests). Why: the late starters' stretch before the queries'
    # wait (bench/NOTES.md v57, H200 probe: the plan ~2700 clocks, three dependent round
    # trips; the comparison ~800 over 8 empty entries). Off until timed
    # (--tune ix_score.lean_plan=1)
    lean_plan = False
    # Wave 0 alone polls the job's inputs (ix_nb's counter, then the q heads' pairs a lane
    # each), then the CTA's agreement (its barriers) and every wave's acquire, as wait_flags'
    # CTA form does. Why: with each wave polling, ~130 waiting jobs x 8 waves poll the same
    # three lines: one poller a CTA is 8x fewer polls of the lines the q heads' and ix_key's
    # publishes land on. H100, A/B in one process, two device calls (bench/NOTES.md v59):
    # index_scoring r8 128K W1 / W2 0.970 / 0.987 and 0.969 / 0.971, 512K 0.987 / 0.985 and
    # 0.982 / 0.984; the fused index r8 512K 1.002 / 1.001 (one round). (Polling less often
    # instead, --tune launch.poll_backoff=8: 1.003-1.014, slower.) None: on where the chip is
    # sm_90a (ONE_POLLER_ON_NVIDIA), off on AMD; not with waits_aside (its waves wait apart)
    one_poller = None

    @property
    def hist_slots(self) -> int:
        """(row, segment) histograms a job holds in LDS: the plan's bound, and with
        share_pages index_share.hist_slots (its range may touch 2R entries, and on sm_90a
        its split weighs the chains)."""
        return share_hist_slots(self.p, self.tail_rows) if self.share_pages \
            else self.p.hist_slots

    @property
    def segment_hist(self) -> bool:
        """Whether the job counts first digits per (row, segment) into `score_hist`: not with
        IndexPlan.row_parts, whose only reader (the fused selection's fold) then sums the
        jobs' `score_rows` and reads no segment (refined digits take a slice's keys above the
        prefix from its list): an LDS atomic a score, the digit's instructions, the fix-up's
        moves and the flush of R x segments histograms a job fewer."""
        return not self.p.row_parts

    @property
    def hist_words(self) -> int:
        """u32 words of the job's LDS segment histograms (one, never touched, without them)."""
        return self.hist_slots * FIRST_DIGIT_BINS if self.segment_hist else 1

    @property
    def plan_entries(self) -> int:
        """Entries of the LDS plan: a row each, and with share_pages index_share's 3R."""
        return plan_entries(self.p.rows, self.share_pages)

    @property
    def narrow_pages(self) -> int:
        """Pages a step of the one-pair chains (`pages_per_step`, resolved)."""
        if self.pages_per_step is None:
            return 2 if self.p.pairs == 1 and not (self.prefetch_pages or self.turns or
                                                   self.tma_keys) else 1
        return self.pages_per_step
    TURN_BARRIERS = (1, 2)  # named barrier of warpgroup 0 / 1 (0 is the CTA barrier's)
    # a timeline build's cycle accounts from the queries' wait (phase 0) to the key loop's
    # end (phase 1), per wave (stages/cycles.py): every clock in one part, so they add up to
    # the stretch (v56 found 5 us of it in no part): the LDS zeroing and the queries'
    # staging; the rest outside the steps' work (groups' setup, the loads' issue, the loop's
    # own); the chains (issue + wait for their results); the epilogues (relu, weights, lane
    # swaps, store, count); and the steps run (a count)
    TALLIES = ("staging", "rest", "chain", "epilogue", "steps")

    def __init__(self, p: IndexPlan):
        self.p = p
        nvidia = p.chip == SM90  # (the chip's defaults; a --tune set afterwards overrides)
        if self.share_pages is None:
            self.share_pages = nvidia and SHARE_PAGES_ON_NVIDIA
        if self.fixup_ballot is None:
            self.fixup_ballot = nvidia and FIXUP_BALLOT_ON_NVIDIA
        if self.nb_first is None:
            self.nb_first = nvidia and NB_FIRST_ON_NVIDIA
        if self.tails_last is None:
            self.tails_last = nvidia and TAILS_LAST_ON_NVIDIA
        if self.one_poller is None:
            self.one_poller = nvidia and ONE_POLLER_ON_NVIDIA

    @property
    def reads_cached_new_keys(self) -> bool:
        """Whether the key loop's scores of the launch's new keys stand (no fix-up):
        `cached_new_keys`, or where it is None the chip's default (sm_90a without tma_keys)."""
        if self.cached_new_keys is None:
            return self.p.chip == SM90 and CACHED_NEW_KEYS_ON_NVIDIA and not self.tma_keys
        if self.cached_new_keys and self.tma_keys:
            raise ValueError("ix_score: cached_new_keys reads the new keys from the cache after "
                             "a generic acquire; tma_keys loads them through the async proxy, "
                             "which it does not order: not both")
        return bool(self.cached_new_keys)

    @property
    def t(self) -> KeyTiling:
        """The scoring's key tiling (the plan's, with this stage's `key_piece`)."""
        if self.key_piece == LANE_BYTES:
            return self.p.tiling
        return KeyTiling.of(self.p.atom, self.key_piece)

    @property
    def bf16_head_sum(self) -> bool:
        """Whether the scores' head sums run on the tensor cores in bf16 (`head_sum`)."""
        if self.head_sum not in self.HEAD_SUMS:
            raise ValueError(f"ix_score: head_sum {self.head_sum!r}; one of {self.HEAD_SUMS}")
        if self.head_sum == "auto":
            return bool(self.p.wgmma and self.p.rows <= self.SUM_ATOM.n and not (
                self.ss_keys or self.pipeline_min_pairs is not None or self.alternate_one_pair))
        if self.head_sum == "fma":
            return False
        if not self.p.wgmma:
            raise ValueError(f"ix_score: head_sum 'mma' is the Hopper (wgmma) path; "
                             f"{self.p.chip} sums heads with FMAs")
        if self.p.rows > self.SUM_ATOM.n:
            raise ValueError(f"ix_score: head_sum 'mma' takes at most {self.SUM_ATOM.n} rows "
                             f"(one a column of its m64n{self.SUM_ATOM.n}k16), got {self.p.rows}")
        return True

    @property
    def head_sum_accs(self) -> int:
        """`sum_accs`, checked: a positive number of head-sum accumulators."""
        n = self.sum_accs
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"ix_score: sum_accs {n!r}; the head-sum wgmmas need at least 1 "
                             f"accumulator")
        return n

    @property
    def head_sum_on_sync(self) -> bool:
        """`sum_mma`, checked: whether the head sums run on mma.sync ("sync")."""
        if self.sum_mma not in self.SUM_MMAS:
            raise ValueError(f"ix_score: sum_mma {self.sum_mma!r}; one of {self.SUM_MMAS}")
        return self.sum_mma == "sync"

    def jobs(self):
        p = self.p
        keys = p.capacity * p.rows // max(p.score_jobs, 1)
        return [Job(j, cost_bytes=keys * (HD + 4) // 2, cost_flops=keys * HD * p.heads * 2,
                    lds_bytes=(self.hist_words + self.fine_words) * 4)
                for j in range(p.score_jobs)]

    @property
    def fine_words(self) -> int:
        """u32 words of a job's refined first-digit counts (IndexPlan.fine_digits): one
        REFINED_BINS histogram a row, in LDS and in its `score_fine` part."""
        return self.p.rows * REFINED_BINS if self.p.fine_digits else 0

    keys_read = 8192  # the byte floor's context (kind inputs with `pos` set it)

    def bytes_moved(self):
        """The visible keys read once (workload W1: one request's keys) and the block table."""
        p = self.p
        keys = min(self.keys_read, p.capacity)
        return {"index_cache keys": keys * (HD + 4), "index block_table": 4 * (-(-keys // PAGE))}

    def regions(self):
        p = self.p
        fine = [PlainBuffer("score_fine", u32, (p.score_jobs, p.rows, REFINED_BINS))] \
            if p.fine_digits else []
        if p.row_parts:
            fine.append(PlainBuffer("score_rows", u32, (p.score_jobs, p.rows, FIRST_DIGIT_BINS)))
        if p.group_max:
            fine.append(PlainBuffer(GROUP_MAX_REGION, f32, (p.rows, p.capacity // GROUP_KEYS)))
        return [PlainBuffer("scores", f32, (p.rows, p.capacity)),
                PlainBuffer("score_hist", u32, (p.rows, p.segments, FIRST_DIGIT_BINS)),
                *fine, TaggedPairs("score_done", (p.score_jobs,), u32)]

    def kernel_args(self) -> dict:
        out = super().kernel_args()
        if self.tma_keys:
            out[self.TMA_MAP] = TensorMap(of="index_cache", row_bytes=HD, box_rows=PAGE_ROWS,
                                          swizzle=TMA_SWIZZLE_128B)
        return out

    def buffers(self):
        p = self.p
        return {"positions": Buffer(i32, (p.rows,)),
                "block_table": Buffer(i32, (p.rows, p.max_pages)),
                "index_cache": Buffer(u8, (p.cache_pages, PAGE_BYTES), output=True)}

    def reads(self, j):
        p = self.p
        R = p.rows
        return [Use("ix_qb", 0, p.heads * R * QW), Use("ix_qdone", 0, p.heads),
                Use("ix_nb", 0, R * p.nb_words)]

    def writes(self, j):
        p = self.p
        fine = [Use("score_fine", j * self.fine_words, (j + 1) * self.fine_words)] \
            if p.fine_digits else []
        if p.row_parts:
            rw = p.rows * FIRST_DIGIT_BINS
            fine.append(Use("score_rows", j * rw, (j + 1) * rw))
        hist = [Use("score_hist", 0, p.rows * p.segments * FIRST_DIGIT_BINS)] \
            if self.segment_hist else []
        if p.group_max:
            fine.append(Use(GROUP_MAX_REGION, 0, p.rows * (p.capacity // GROUP_KEYS)))
        return [Use("scores", 0, p.rows * p.capacity), *hist, *fine,
                Use("score_done", j, j + 1)]

    # -- the plan, in LDS -------------------------------------------------------------------
    PW = 12  # plan words a row

    def _plan(self, k, io, job, tab, counters=None):
        """Wave 0, one row a lane (VGPRs, not SGPRs): per row r the words [active, n, s_lo,
        s_hi, slot_base, pos, btrow] (score_runs' formula; a group is listed at its first
        row; btrow = its last row, whose block table the group reads). All waves read it
        after a barrier. share_pages: 2R entries and their divergence counters
        (stages/index_share.py)."""
        p = self.p
        a = io.args
        if self.share_pages:
            return plan_shared(self, k, io, job, tab, counters)
        R, S, J = p.rows, p.segment, p.score_jobs
        with k.if_(k.wave_id().eq(0)):
            lane, one, z0, valid, li, pos, n, start, zero = plan_runs(self, k, a)
            segs = k.select(start, (pos + n - 1) / S + 1, zero)
            pairs = (n + 1) >> 1
            cost = segs * pairs
            pre = _scan(k, cost, R) - cost
            C = k.wave_sum(cost)
            den = pairs * J
            lo = k.min((k.max(job * C - pre * J, 0) + den - 1) / den, segs)
            hi = k.min((k.max((job + 1) * C - pre * J, 0) + den - 1) / den, segs)
            act = start & (lo < hi)
            nsl = k.select(act, n * (hi - lo), zero)
            base = _scan(k, nsl, R) - nsl
            last = li + n - 1
            vals = [k.select(act, one, z0), n, lo, hi, base, pos, last, zero, zero, zero, zero, zero]
            for q in range(self.PW // 4):
                k.store(tab, li * self.PW + 4 * q, k.vec(*vals[4 * q:4 * q + 4]), mask=valid)

    def _warm_first_pages(self, k, io, tab, counters):
        """IndexScore.warm_first: each scored entry's first pages asked of the L2 by wave 0,
        a lane a page (its block-table entry, then one bulk prefetch of the page's keys and
        scales). With share_pages the entries scored are known once the divergence counts
        are final (a barrier), so the job's mask is taken here rather than after the
        queries' staging."""
        n = self.warm_first
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= k.L:
            raise ValueError(f"ix_score: warm_first {n!r}; pages an entry, 0 .. {k.L}")
        p, a = self.p, io.args
        self._entries_scored = None
        if self.share_pages:
            if k.W > 1:
                k.barrier()
            self._entries_scored = entries_scored(self, k, tab, counters)
        lane = _lane(k)
        first = k.wave_id().eq(0)

        def warm(gi, g):
            key_lo, pages, _ = self._key_steps(k, g, PAGE)
            m = first & (lane < k.min(pages, n))
            page = k.load(a.block_table, g[6] * p.max_pages + (key_lo >> PAGE_SHIFT) +
                          k.min(lane, n - 1), i32, mask=m)
            k.prefetch_l2(a.index_cache, k.cast(page, i64) * PAGE_BYTES, PAGE_BYTES, mask=m)
        for_entries(self, k, tab, warm, counters)

    def _row(self, k, tab, gi):
        out = []
        for q in range(self.PW // 4):
            v = k.load(tab, gi * self.PW + 4 * q, i32, 4)
            out += [v[i] for i in range(4)]
        return out

    # -- body -------------------------------------------------------------------------------
    @stage_body
    def body(self, k, job, io):
        cached = self.reads_cached_new_keys
        p = self.p
        R = p.rows
        T = k.W * k.L
        tid = _tid(k)
        tab = k.lds("ix_plan", i32, self.plan_entries * self.PW)
        hist = k.lds("ix_hist", u32, self.hist_words)
        counters = k.lds("ix_share", u32, counter_words(R)) if self.share_pages else None
        aside = self.waits_aside and self.share_pages and k.W > 2
        if aside:
            with k.if_(k.wave_id().ne(0)):  # (wave 0 plans meanwhile)
                self._wait_inputs(k, io, split=True)
        self._plan(k, io, job, tab, counters)
        if self.share_pages:  # the block tables are inputs: compared before the queries' wait
            if k.W > 1:
                k.barrier()  # the plan, for every thread (its counters: after the next one)
            if aside:  # a wave's failed wait, every wave's (the CTA's agreement's barriers)
                io.env.cta_ok()
            count_divergent(self, k, io, tab, counters)
        if self.warm_first and p.wgmma:
            self._warm_first_pages(k, io, tab, counters)
        if not aside:
            self._wait_inputs(k, io)
        io.env.phase(0)  # the q heads and the new keys are in
        self._cyc = CycleTally(k, io.env, self.TALLIES)
        nh = self.hist_slots * FIRST_DIGIT_BINS if self.segment_hist else 0
        for i0 in range(0, nh, T):
            k.store(hist, k.min(tid + i0, nh - 1), k.const(0, u32), mask=(tid + i0) < nh)
        self._fine = self._fine_lds(k) if p.fine_digits else None
        if self._fine is not None:
            zero4 = k.vec(k.const(0, u32), 0, 0, 0)
            for i0 in range(0, self.fine_words, 4 * T):
                i = i0 + 4 * tid
                k.store(self._fine, k.min(i, self.fine_words - 4), zero4, mask=i < self.fine_words)
        # the queries staged in LDS are wgmma's B: the barrier after them fences the stores
        # for the async proxy (KernelBuilder.async_proxy_lds; no other barrier needs it)
        with k.async_proxy_lds():
            stage = self._stage_queries(k, io) if p.wgmma else None
            if k.W > 1:
                k.barrier()
        self._cyc.mark("staging")
        self._turns_open(k)
        group = self._group_wgmma if p.wgmma else self._group_mfma
        if not (self.warm_first and p.wgmma):  # (else _warm_first_pages took the mask)
            self._entries_scored = None
            if self.share_pages and p.wgmma:  # (the divergence counters are final: the
                self._entries_scored = entries_scored(self, k, tab, counters)  # barrier above)
        for_entries(self, k, tab, lambda gi, g: group(k, io, gi, g, hist, stage), counters)
        self._turns_close(k)
        if k.W > 1:
            k.barrier()
        self._cyc.mark("rest")
        io.env.phase(1)  # every key of the job is scored
        self._cyc.flush()
        if not cached:
            self._fixup(k, io, tab, hist, counters)
            if k.W > 1:
                k.barrier()
        io.env.phase(2)  # the launch's own new keys are rescored (or read from the cache)
        if self.segment_hist:
            self._flush(k, io, tab, hist, counters)
        if self._fine is not None:
            self._flush_fine(k, io, job)
        if k.W > 1:
            k.barrier()
        io.env.phase(3)  # the job's histograms are stored
        w0 = k.wave_id().eq(0)
        with k.if_(w0 & io.ok):
            k.fence("release", "device")
        io.publish("score_done", job, k.const(1, u32), mask=w0 & _lane(k).eq(0))

    def _wait_inputs(self, k, io, split=False):
        """The job's two waits: ix_nb's counter (ix_key's release: the new keys, the head
        weights' scales) and the q heads' pairs, in nb_first's order. `split` (waits_aside,
        waves 1 .. W - 1 calling, W > 2): wave 1 takes ix_nb and the others the q heads,
        both waits' round trips at once."""
        p = self.p

        if self.one_poller and not split and k.W > 1:
            self._wait_inputs_one_poller(k, io)
            return

        def nb():
            io.acquire("ix_nb")

        def heads():
            wait_flags(k, io, 0, p.heads, "ix_qdone", each_wave=True)
        if split:
            first = k.wave_id().eq(1)
            with k.if_(first):
                nb()
            with k.if_(~first):
                heads()
            return
        for wait in ((nb, heads) if self.nb_first else (heads, nb)):
            wait()

    def _wait_inputs_one_poller(self, k, io):
        """one_poller's waits: wave 0 polls ix_nb's counter and the q heads' pairs (its lanes,
        a pair each, in nb_first's order), then the CTA's agreement on a failed wait (its
        barriers) and every wave's device acquire: a wave that did not poll sees the data
        through the barrier after the wave that did (Mailbox's contract)."""
        p = self.p
        first = k.wave_id().eq(0)
        lane = _lane(k)

        def nb():
            io.acquire("ix_nb", mask=first, fence=False)

        def heads():
            for h0 in range(0, p.heads, k.L):
                h = h0 + lane
                io.wait("ix_qdone", k.min(h, p.heads - 1), mask=first & (h < p.heads))
        for wait in ((nb, heads) if self.nb_first else (heads, nb)):
            wait()
        io.env.cta_ok()
        k.fence("acquire", "device")

    def _flush(self, k, io, tab, hist, counters=None):
        p = self.p
        T = k.W * k.L
        tid = _tid(k)

        def entry(gi, g):
            n, lo, hi, base, posf = g[1], g[2], g[3], g[4], g[5]
            tot = (hi - lo) * n * FIRST_DIGIT_BINS
            for i0 in k.range(0, tot, T):
                idx = i0 + tid
                sl = idx >> 6
                b = idx & (FIRST_DIGIT_BINS - 1)
                seg = lo + sl / n
                rho = sl % n
                # a segment past this row's last key (the group's last row sees further)
                # stays untouched
                m = (idx < tot) & (seg * p.segment <= posf + rho)
                v = k.load(hist, (base + sl) * FIRST_DIGIT_BINS + b, u32, mask=m)
                io.store("score_hist", ((gi + rho) * p.segments + seg) * FIRST_DIGIT_BINS + b,
                         v, mask=m)
        for_entries(self, k, tab, entry, counters)

    def _fine_lds(self, k):
        """The job's refined first-digit counts in LDS (fine_words u32), or a DSLError that
        names fine_digits where the chip's LDS cannot hold them beside the rest (gfx942)."""
        from monokernel.dsl import DSLError
        try:
            return k.lds("ix_fine", u32, self.fine_words)
        except DSLError as e:
            raise DSLError(f"fine_digits: the scoring's {self.fine_words * 4} bytes of refined "
                           f"first-digit counts do not fit: {e}") from None

    def _flush_fine(self, k, io, job):
        """The job's refined first-digit counts, every row's (zeros where the job scored none
        of it: the consumer sums every part of a row), to its `score_fine` part, 16 bytes a
        store; with row_parts also their sums by first digit (16 sub-bins: 4 adjacent lanes'
        words) to its `score_rows` part; released with score_hist by the job's fence."""
        T = k.W * k.L
        tid = _tid(k)
        W = self.fine_words
        V = 4  # u32 words of a 16-byte access
        sub = REFINED_BINS // FIRST_DIGIT_BINS  # a first digit's sub-bins
        quad = sub // V  # the lanes holding them
        rw = self.p.rows * FIRST_DIGIT_BINS
        for i0 in range(0, W, V * T):
            i = i0 + V * tid
            m = i < W
            at = k.min(i, W - V)
            dst = job * W + at
            v = k.load(self._fine, at, u32, V)
            io.store("score_fine", dst, v, mask=m)
            if self.p.row_parts:  # the first digit's count: its sub-bins, `quad` lanes' words
                tot = k.extract(v, 0)
                for e in range(1, V):
                    tot = tot + k.extract(v, e)
                swap = 1
                while swap < quad:
                    tot = tot + k.lane_swap(tot, swap)
                    swap *= 2
                io.store("score_rows", job * rw + at / sub, tot,
                         mask=m & (tid % quad).eq(0))

    # -- shared pieces ----------------------------------------------------------------------
    def _fixup(self, k, io, tab, hist, counters=None):
        """The scores of keys this launch writes. The key loops read every visible slot from
        the cache; a slot a row of this launch writes held a stale value there (the key job
        may be writing it), so its score and its histogram count are redone here, after the
        CTA barrier, from the launch's own new key (ix_nb): a wave a (row, new key), f32 dot
        products (fp8 products are exact), one decrement of the stale digit and one increment
        of the new one. Only jobs whose range holds such a key do anything."""
        p = self.p
        a = io.args
        R, S, MP, NB = p.rows, p.segment, p.max_pages, p.nb_words
        lane = _lane(k)
        if self.fixup_ballot and R > k.L:
            raise ValueError(f"ix_score: fixup_ballot tests a row a lane: {R} rows exceed a "
                             f"{k.L}-lane wave")

        def written_here(u, btrow, key_lo, key_hi):
            """(pos[u], whether row u's new key is a slot of this entry's range)."""
            pu = k.load(a.positions, u, i32)
            pg = k.max(pu, 0) >> PAGE_SHIFT
            same = k.load(a.block_table, btrow * MP + pg, i32).eq(
                k.load(a.block_table, u * MP + pg, i32))
            return pu, same & (pu >= key_lo) & (pu < key_hi)

        def move(g, rr, row, idx, pu, old, score, one):
            """The rescored key's store and its count moved from the stale digit."""
            n, lo, base = g[1], g[2], g[4]
            if self.segment_hist:
                slot = (base + ((pu >> p.segment_shift) - lo) * n + rr) * FIRST_DIGIT_BINS
                k.atomic("add", hist, slot + k.bitcast(ordered_digit(k, old), i32),
                         k.const(0xFFFFFFFF, u32), mask=one, scope="cta")
                k.atomic("add", hist, slot + k.bitcast(ordered_digit(k, score), i32),
                         k.const(1, u32), mask=one, scope="cta")
            if self._fine is not None:  # (the same move at 10 bits)
                fs = row * REFINED_BINS
                k.atomic("add", self._fine, fs + k.bitcast(
                    ordered_digit(k, old, REFINED_SHIFT), i32),
                    k.const(0xFFFFFFFF, u32), mask=one, scope="cta")
                k.atomic("add", self._fine, fs + k.bitcast(
                    ordered_digit(k, score, REFINED_SHIFT), i32),
                    k.const(1, u32), mask=one, scope="cta")
            io.store("scores", idx, score, mask=one)
            self._group_unknown(k, io, row, pu, one)

        def entry(gi, g):
            n, lo, hi, posf, btrow = g[1], g[2], g[3], g[5], g[6]
            key_lo = lo * S
            key_hi = k.min(hi * S, posf + n)
            if self.fixup_ballot:  # lane u tests row u: every row in one round trip
                _, here = written_here(k.min(lane, R - 1), btrow, key_lo, key_hi)
                hits = k.ballot(here & (lane < R))
            for u in k.range(R):
                if self.fixup_ballot:
                    found = _has_bit(k, hits, u)
                else:
                    pu, found = written_here(u, btrow, key_lo, key_hi)
                with k.if_(found):
                    if self.fixup_ballot:
                        pu = k.load(a.positions, u, i32)  # a hit's row alone
                    for rr in k.range(k.wave_id(), n, k.W):
                        row = gi + rr
                        with k.if_(pu <= posf + rr):
                            score = self._new_dot(k, io, row, u) * k.bitcast(
                                io.load("ix_nb", u * NB + KEY_WORDS), f32)
                            idx = row * p.capacity + pu
                            old = io.load("scores", idx)
                            move(g, rr, row, idx, pu, old, score, lane.eq(0))
        for_entries(self, k, tab, entry, counters)

    def _head_weight(self, k, io, row, head, mask=None):
        """Row `row`'s weight of head `head` (f32): (W_w h from ix_nb * s_q from ix_qb) * coef,
        in that order (the reference's kernel_operands forms the same bits). The q scale is
        folded in here, not by ix_key, so ix_key waits only for the key jobs' partial sums and
        is off the q path (the q heads' scales were its last wait)."""
        p = self.p
        wn = k.bitcast(io.load("ix_nb", row * p.nb_words + NW0 + head, mask=mask), f32)
        # unmasked: `row` and `head` are in range (callers clamp them) and a scale is finite,
        # so a masked-off weight (0) makes the product 0
        sq = k.bitcast(io.load("ix_qb", (head * p.rows + row) * QW + KEY_WORDS), f32)
        return (wn * sq) * p.head_weight_coef

    def _fp8_products(self, k, word_pairs):
        """The lane's products of a head's q and key bytes summed in f32 (exact fp8 products,
        then FMAs in byte order): 16 lanes' sums a 4-word pair, from (q words, key words)
        pairs in order."""
        fp8 = self.p.fp8
        acc = None
        for qw, kw in word_pairs:
            qf = k.cast(k.bitcast(qw, fp8, 16), f32)
            kf = k.cast(k.bitcast(kw, fp8, 16), f32)
            acc = qf * kf if acc is None else k.fma(qf, kf, acc)
        return acc

    @staticmethod
    def _dot_lanes(k):
        """The rescoring dots' lane map: (lane, lanes a head, q words a lane, heads a pass,
        the lane's part of its head's 128 bytes); a head's 32 words over 1 or 2 lanes."""
        lane = _lane(k)
        lph = max(1, k.L // KEY_WORDS)
        words = KEY_WORDS // lph
        return lane, lph, words, k.L // lph, lane & (lph - 1)

    def _head_term(self, k, acc, lph, keep, weight):
        """The wave's sum over its heads of relu(d) x w, d a head's dot from its lanes' 16
        products `acc` (`weight()` the head's weight, loaded where the dot is done; `keep`:
        the lanes that add their head's term)."""
        d = acc[0]
        for i in range(1, 16):
            d = d + acc[i]
        for sh in range(int(math.log2(lph))):
            d = d + k.lane_swap(d, 1 << sh)
        w = weight()
        if self.bf16_head_sum:  # the key loop's precision: relu(d) and w in bf16
            r = k.bitcast(k.relu_bf16x2(d, d) << BF16_SHIFT, f32)
            t = k.select(keep, r * k.cast(k.cast(w, bf16), f32), k.const(0.0, f32))
        else:
            t = k.select(keep, k.max(d, 0.0) * w, k.const(0.0, f32))
        return k.wave_sum(t)

    def _new_dot(self, k, io, row, u):
        """sum_h w[row, h] * relu(q8[row, h] . k8[u]) (uniform f32): lanes over (head, part of
        the 128 bytes), f32 FMAs of exact fp8 products, then lane swaps and a wave sum (the
        bf16 head sum: relu(.) and w rounded to bf16 first, as the key loop does)."""
        p = self.p
        R, H, NB = p.rows, p.heads, p.nb_words
        lane, lph, words, hpb, part = self._dot_lanes(k)
        tot = None
        for hb in range(-(-H // hpb)):
            head = hb * hpb + lane / lph
            m = head < H
            hc = k.min(head, H - 1)
            # (a word pair loaded as its products are summed: the generator keeps that order)
            acc = self._fp8_products(k, ((
                io.load("ix_qb", (hc * R + row) * QW + part * words + 4 * c, 4),
                io.load("ix_nb", u * NB + part * words + 4 * c, 4)) for c in range(words // 4)))
            s = self._head_term(k, acc, lph, m & part.eq(0),
                                lambda: self._head_weight(k, io, row, hc))
            tot = s if tot is None else tot + s
        return tot

    def _store(self, k, io, hist, g, gi, row_rel, kpos, step_key, score, valid):
        """One score a lane: scores[row, kpos] and its first digit into the LDS histogram.
        `step_key`: the step's first key (uniform; a step's keys lie in one segment, a
        segment being whole pages), so the histogram's segment is the step's, not a lane's;
        `score` is never -0.0 (made +0.0 by the scale's FMA), for the 5-operation digit."""
        p = self.p
        row, _, ok = self._store_mask(g, gi, row_rel, kpos, valid)
        n, lo, base = g[1], g[2], g[4]
        io.store("scores", row * p.capacity + kpos, score, mask=ok)
        if self.segment_hist:
            slot = base + ((step_key >> p.segment_shift) - lo) * n + row_rel
            digit = ordered_digit_canonical(k, score)
            k.count(hist, slot * FIRST_DIGIT_BINS + k.bitcast(digit, i32), ok,
                    grouped=self.grouped_hist)
        if self._fine is not None:  # the row's refined first digit (IndexPlan.fine_digits)
            k.count(self._fine, row * REFINED_BINS + k.bitcast(
                refined_digit_canonical(k, score), i32), ok, grouped=self.grouped_hist)

    @staticmethod
    def _store_mask(g, gi, row_rel, kpos, valid):
        """(row, whether it is a row of the group (and `valid`), whether a lane's score of
        key kpos is stored: that and the key within the row's bound)."""
        n, posf = g[1], g[5]
        row = gi + row_rel
        in_group = valid & (row_rel < n)
        return row, in_group, in_group & (kpos <= posf + row_rel)

    def _group_unknown(self, k, io, row, kpos, mask):
        """IndexPlan.group_max: key kpos's group maximum of row `row` as +inf (never skipped),
        where a score is stored after its group's maximum was (the fix-up's rescored keys:
        the maximum may be stale)."""
        if self.p.group_max:
            io.store(GROUP_MAX_REGION, group_max_word(self.p.capacity, row, kpos),
                     k.const(math.inf, f32), mask=mask)

    @staticmethod
    def _scaled(k, val, scale):
        """The stored score: val x the key's scale in an FMA adding +0.0, which makes a -0.0
        product +0.0 (equal in the selection's order) and changes no other bit."""
        return k.fma(val, scale, k.const(0.0, f32))

    def _lookahead(self, depth=None, prefetch=None) -> tuple:
        """(depth, ahead) of a key loop: its ring's steps in flight (None: IndexScore.depth)
        and how many steps before their key loads the block-table entries load (`prefetch`
        True: depth; an int n: n; False / 0: none; None: as prefetch_pages), checked."""
        depth = self.depth if depth is None else depth
        prefetch = self.prefetch_pages if prefetch is None else prefetch
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"ix_score: depth {depth!r}; the key ring holds at least 1 step")
        ahead = depth if prefetch is True else int(prefetch or 0)
        if ahead and (ahead > depth or depth % ahead):
            raise ValueError(f"ix_score: block-table prefetch {prefetch!r} steps ahead; "
                             f"1 .. depth ({depth}), dividing it")
        return depth, ahead

    @staticmethod
    def _page_source(k, locate, depth, ahead):
        """next_page(t, d): the page of step t + depth, the key loads' address, at step t
        (d = t mod depth, static in the unrolled loop). With `ahead`, a ring of entries
        loaded `ahead` steps earlier (pages[i]: step t + depth with t = i mod ahead, past the
        end the last step's page); else looked up then."""
        if not ahead:
            return lambda t, d: locate(t + depth)
        pages = [k.lane_var(locate(k.const(depth + i, i32))) for i in range(ahead)]

        def next_page(t, d):
            page = pages[d % ahead].get()
            pages[d % ahead].set(locate(t + depth + ahead))
            return page
        return next_page

    @property
    def narrow_ring_depth(self) -> int:
        """The one-page steps' ring depth (narrow_depth, else depth)."""
        return self.depth if self.narrow_depth is None else self.narrow_depth

    def _pipeline(self, k, my_n, locate, load, compute, n_all=None, idle=None, depth=None,
                  prefetch=None, narrow=False, warm=None):
        """`depth` (IndexScore.depth, DEPTH by default) steps in flight: step t + depth's
        loads issue before step t computes, straight from memory into registers (past the
        end, loads repeat the last step). `locate(t)` loads step t's cache page from the
        block table, `load(t, page)` its keys; with `prefetch_pages` the block-table
        entries load `depth` steps before the key loads that address through them (past
        the end, locate repeats the last step's page).
        With `n_all` (warpgroups taking turns) the loop runs n_all steps, every warpgroup the
        same count, and a step past my_n runs `idle()` (its turns' barriers) instead.
        `depth` / `prefetch`: this loop's own (None: IndexScore.depth / prefetch_pages);
        `narrow`: the loop runs the one-page steps of groups of fewer pairs (which
        IndexScore.late_loads "narrow" refills after their compute); `warm(pages)`: asks
        the L2 for a step's pages (a list: `locate`'s page or pages), l2_ahead steps before
        its loads."""
        c = lambda v: k.const(v, i32)  # noqa: E731
        depth, ahead = self._lookahead(depth, prefetch)
        late = self._late_loads(narrow)
        warm_step = self._warm_source(k, locate, depth, warm)
        ring = [[k.lane_var(x) for x in load(c(d), locate(c(d)))] for d in range(depth)]
        next_page = self._page_source(k, locate, depth, ahead)

        def refill(t, d):
            page = next_page(t, d)
            for v, x in zip(ring[d], load(t + depth, page)):
                v.set(x)
            self._cyc.mark("rest")

        for t0 in k.range(0, my_n if n_all is None else n_all, depth):
            for d in range(depth):
                cur = [v.get() for v in ring[d]]
                t = t0 + d
                self._cyc.mark("rest")
                if not late:
                    refill(t, d)
                warm_step(t)

                def step():
                    compute(t, cur)
                    self._cyc.count("steps")
                if n_all is None:
                    with k.if_(t < my_n):
                        step()
                else:
                    with k.if_else(t < my_n) as (run, skip):
                        with run:
                            step()
                        with skip:
                            idle()
                if late:
                    refill(t, d)

    def _warm_source(self, k, locate, depth, warm):
        """warm_step(t) for `_pipeline` (l2_ahead): at step t, warm the pages of step t +
        depth + l2_ahead, whose block-table entry step t - 1 loaded (so the prefetch waits
        for no load of its own step); before the loop, the steps between the ring's first
        loads and the first warmed step. Without `warm` or l2_ahead, nothing."""
        ahead = self.l2_ahead
        if isinstance(ahead, bool) or not isinstance(ahead, int) or ahead < 0:
            raise ValueError(f"ix_score: l2_ahead {ahead!r}; steps (0: off)")
        if warm is None or not ahead:
            return lambda t: None
        def pages(t):  # locate's page, or pages (two-page steps), as a list
            found = locate(t)
            return found if isinstance(found, list) else [found]
        for s in range(depth, depth + ahead):
            warm(pages(k.const(s, i32)))
        held = [k.lane_var(p) for p in pages(k.const(depth + ahead, i32))]

        def warm_step(t):
            warm([v.get() for v in held])
            for v, p in zip(held, pages(t + depth + ahead + 1)):
                v.set(p)
        return warm_step

    def _late_loads(self, narrow: bool) -> bool:
        """Whether a `_pipeline` loop refills a ring slot after its step (late_loads)."""
        if self.late_loads not in self.LATE_LOADS:
            raise ValueError(f"ix_score: late_loads {self.late_loads!r}; one of "
                             f"{self.LATE_LOADS}")
        return self.late_loads == "all" or (narrow and self.late_loads == "narrow")

    def _pipeline_async(self, k, my_n, locate, issue, read, compute, depth=None,
                        prefetch=None):
        """`_pipeline` with the steps' operands copied into a lane-private LDS ring of depth +
        1 slots (IndexScore.async_keys): step t's copies issue at step t - depth as one group
        (`issue(t, page, slot)`); at step t, a wait leaving depth - 1 groups in flight
        retires exactly step t's, `read(slot)` brings it into registers, then step t +
        depth's copies go to the slot step t - 1 read (its registers consumed by then).
        Every loop iteration commits a group (past the end, the last page again), so the
        counts stay regular; after the loop a wait for all, before the ring is refilled."""
        c = lambda v: k.const(v, i32)  # noqa: E731
        depth, ahead = self._lookahead(depth, prefetch)
        if depth > k.MAX_ASYNC_PENDING + 1:
            raise ValueError(f"ix_score: depth {depth!r}; the async key ring holds 1 .. "
                             f"{k.MAX_ASYNC_PENDING + 1} steps in flight")
        slots = depth + 1
        slot_of = lambda t: t - (t / slots) * slots  # noqa: E731
        for d in range(depth):
            issue(c(d), locate(c(d)), c(d))
        next_page = self._page_source(k, locate, depth, ahead)
        for t0 in k.range(0, my_n, depth):
            for d in range(depth):
                t = t0 + d
                self._cyc.mark("rest")
                k.async_wait(depth - 1)
                cur = read(slot_of(t))
                page = next_page(t, d)
                issue(t + depth, page, slot_of(t + depth))
                self._cyc.mark("rest")
                with k.if_(t < my_n):
                    compute(t, cur)
                    self._cyc.count("steps")
        k.async_wait(0)

    def _pipeline_halves(self, k, my_n, locate, load, issue, finish, nacc):
        """Hopper, all pairs: the chain split in two halves A, B (own accumulators, own
        commit groups) that alternate, so one half's wgmmas run while the other half's
        epilogue runs. Step t (t = 0 .. my_n; a wgmma group is at most one in flight):

            wait(0): B(t-1) retired    load step t+1's keys (its ring slot held t-1's)
            issue A(t)                 epilogue B(t-1)    (t >= 1)
            wait(0): A(t) retired
            issue B(t)                 epilogue A(t)      (t < my_n)

        Only wait(0), one group in flight: a deeper pipeline (A(t+1) issued before B(t)
        is retired, wait_group 1 retiring a group of the previous iteration) made ptxas
        13.0 serialize every wgmma of the kernel (advisory C7514, "non wgmma instructions
        reading accumulator registers ... between start and end of the pipeline stage"),
        also in minimal PTX loops; this schedule assembles without it (test). B's pending
        accumulator is carried to the next step in a variable. A wgmma's A registers (its
        ring slot) are not written before the wait that retires it: slot t % 2 is reloaded
        at step t+1's first wait. Step my_n's
        chains (and a whole step past it when the step count rounds up to even) run on
        the repeated last keys, as the loads past the end; the final wait(0) retires them
        unread. `issue(h, cur)` issues and commits half h on the keys `cur` (pending
        result; `nacc` accumulator slots), `finish(h, t, acc, scale)` is half h's epilogue
        of step t."""
        f32z = k.const(0.0, f32)
        first = load(k.const(0, i32), locate(k.const(0, i32)))
        ring = [[k.lane_var(x) for x in first],
                [k.lane_var(k.vec(*[k.const(0, u32)] * x.n) if x.n > 1 else f32z)
                 for x in first]]
        acc_b = k.lane_var(k.vec(*[f32z] * nacc))
        steps = my_n + 1
        for t0 in k.range(0, steps, 2):
            for d in range(2):
                t = t0 + d
                page = locate(t + 1)
                k.wgmma_wait(0)
                prev_sc = ring[1 - d][-1].get()  # load()'s last entry: the page's key scale
                for v, x in zip(ring[1 - d], load(t + 1, page)):
                    v.set(x)
                cur = [v.get() for v in ring[d]]
                acc_a = issue(0, cur)
                with k.if_((t >= 1) & (t <= my_n)):
                    finish(1, t - 1, acc_b.get(), prev_sc)
                k.wgmma_wait(0)
                acc_b.set(issue(1, cur))
                with k.if_(t < my_n):
                    finish(0, t, acc_a, cur[-1])
        k.wgmma_wait(0)

    def _pipeline_alternate(self, k, my_n, locate, load, issue, finish, nacc, slots=ALT_SLOTS):
        """Hopper, a group of one row pair: step s's chain runs while step s-1's epilogue
        does (its result carried in a variable, retired by the wait(0) that starts step s:
        one group in flight, the schedule `_pipeline_halves` assembles without ptxas
        serializing the wgmmas). The keys come from a ring of `slots` steps: step s-1's
        slot, free once its chain is retired, is reloaded with step s-1+slots's keys, so the
        loads run slots-1 steps ahead. Steps past my_n run on the repeated last keys (as the
        loads past the end) and are retired unread by the final wait(0). `issue(cur)` issues
        and commits a chain on keys `cur` (pending result, `nacc` accumulator slots),
        `finish(s, acc, scales)` is step s's epilogue (scales: load()'s entries from 4 on)."""
        c = lambda v: k.const(v, i32)  # noqa: E731
        ring = [[k.lane_var(x) for x in load(c(d), locate(c(d)))] for d in range(slots)]
        acc = k.lane_var(k.vec(*[k.const(0.0, f32)] * nacc))
        for t0 in k.range(0, my_n + 1, slots):
            for d in range(slots):
                s = t0 + d
                pd = (d - 1) % slots
                k.wgmma_wait(0)  # step s-1's chain, the one reading slot pd's keys
                prev = acc.get()
                prev_sc = [v.get() for v in ring[pd][4:]]
                for v, x in zip(ring[pd], load(s - 1 + slots, locate(s - 1 + slots))):
                    v.set(x)
                acc.set(issue([v.get() for v in ring[d]]))
                with k.if_((s >= 1) & (s <= my_n)):
                    finish(s - 1, prev, prev_sc)
        k.wgmma_wait(0)

    # -- AMD: MFMA, a row pair a wave ---------------------------------------------------------

    def _key_steps(self, k, g, keys_per_step: int):
        """A group's first key (its job's first segment), its steps of `keys_per_step` keys
        (the atom's M: one MMA's keys) up to the group's last row's bound, and its row pairs."""
        p = self.p
        n, lo, hi, posf = g[1], g[2], g[3], g[5]
        bound = posf + n - 1
        key_lo = lo * p.segment
        key_hi = k.min(hi * p.segment, bound + 1)
        steps = (key_hi - key_lo + keys_per_step - 1) >> int(math.log2(keys_per_step))
        return key_lo, steps, (n + 1) >> 1

    def _group_mfma(self, k, io, gi, g, hist, stage):
        p, T = self.p, self.t
        at = T.atom
        a = io.args
        R, H, MP = p.rows, p.heads, p.max_pages
        n, btrow = g[1], g[6]
        key_lo, ngroups, P = self._key_steps(k, g, at.m)
        w = k.wave_id()
        lane = _lane(k)
        ki, hq = lane & 15, lane >> 4
        kf = hq * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1)  # key after the reduction
        rf = (lane >> 3) & 1  # row of the pair after the reduction
        store_lane = (lane & 1).eq(0)
        # waves over pairs with power-of-two strides (no runtime division): P2 = 2^lp >= P
        # pair slots; wave w takes pair w % P2 and every nsub-th 16-key group from w / P2
        lp = k.cast(P > 1, i32) + k.cast(P > 2, i32) + k.cast(P > 4, i32)
        lw = int(math.log2(k.W))
        lns = k.max(lw - lp, 0)
        nsub = k.const(1, i32) << lns
        j = w >> lp
        for pp in k.range(w & ((k.const(1, i32) << lp) - 1), P, k.W):
            rows = [gi + 2 * pp, gi + 2 * pp + 1]
            have = [k.const(True, "i1"), (2 * pp + 1) < n]
            Bq, Wq = [], []
            zero_u = k.const(0, u32)
            for rho in range(2):
                rb, hb = [], []
                r_ = k.min(rows[rho], R - 1)
                for eta in range(p.halves):
                    head = eta * 16 + ki
                    m = (head < H) & have[rho]
                    qb = (k.min(head, H - 1) * R + r_) * QW + hq * 8
                    v0, v1 = io.load("ix_qb", qb, 4), io.load("ix_qb", qb + 4, 4)
                    wd = [k.select(m, x, zero_u) for x in
                          [v0[i] for i in range(4)] + [v1[i] for i in range(4)]]
                    rb.append([k.bitcast(k.vec(*[wd[wi] for wi in T.b_words[c]]), at.b_dtype,
                                         4 * len(T.b_words[c])) for c in range(T.chunks)])
                    wt = self._head_weight(k, io, r_, k.min(head, H - 1))
                    hb.append(k.select(m, wt, k.const(0.0, f32)))
                Bq.append(rb)
                Wq.append(hb)
            my_n = (ngroups - j + nsub - 1) >> lns

            def first_key(t):  # past the end: the last step again
                return key_lo + (j + k.min(t, my_n - 1) * nsub) * 16

            def locate(t):
                return k.load(a.block_table, btrow * MP + (first_key(t) >> 6), i32)

            def load(t, page):
                p0 = first_key(t)
                base = page * PAGE_WORDS + ((p0 & 63) + ki) * 32 + hq * 8
                lo4 = k.load(a.index_cache, base, u32, 4, nontemporal=True)
                hi4 = k.load(a.index_cache, base + 4, u32, 4, nontemporal=True)
                sc = k.load(a.index_cache, page * PAGE_WORDS + SCALE_WORD0 + (p0 & 63) + kf, f32,
                            nontemporal=True)
                return [lo4, hi4, sc]

            def compute(t, cur):
                p0 = key_lo + (j + t * nsub) * 16
                kw = k.vec(*[cur[0][i] for i in range(4)], *[cur[1][i] for i in range(4)])
                sc = cur[2]
                A = [k.bitcast(k.vec(*[kw[wi] for (_, wi) in T.a_words[c]]), at.a_dtype,
                               4 * len(T.a_words[c])) for c in range(T.chunks)]
                zero4 = k.vec(*[k.const(0.0, f32)] * 4)
                vals = []
                for rho in range(2):
                    v = None
                    for eta in range(p.halves):
                        acc = zero4
                        for c in range(T.chunks):
                            acc = k.mma(at, A[c], Bq[rho][eta][c], acc)
                        term = k.max(acc, 0.0) * Wq[rho][eta]
                        v = term if v is None else v + term
                    vals += [v[i] for i in range(4)]
                for m in (8, 4, 2):
                    half = len(vals) // 2
                    bit = (lane & m).ne(0)
                    keep = [k.select(bit, vals[half + i], vals[i]) for i in range(half)]
                    send = [k.select(bit, vals[i], vals[half + i]) for i in range(half)]
                    vals = [keep[i] + k.lane_swap(send[i], m) for i in range(half)]
                val = vals[0] + k.lane_swap(vals[0], 1)
                score = self._scaled(k, val, sc)
                self._store(k, io, hist, g, gi, 2 * pp + rf, p0 + kf, p0, score, store_lane)

            with k.if_(my_n > 0):
                self._pipeline(k, my_n, locate, load, compute)

    # -- Hopper: wgmma, all row pairs on each key load ----------------------------------------
    def _stage_queries(self, k, io):
        """Queries of every row as wgmma B (K-major, per MMA chunk), (R + 1) rows so an odd
        group's last pair reads zeros, and the head weights in the threads' column order."""
        p, T = self.p, self.t
        at = T.atom
        R, H, HP = p.rows, p.heads, p.heads_pad
        tid = _tid(k)
        Tn = k.W * k.L
        cb = (R + 1) * HP // 8 * WGMMA_B_SBO  # bytes a chunk: a SBO a core matrix's 8 columns
        # the RS path's K order is the tiling's permutation (its A fragments); the SS path's
        # keys sit in shared memory in head-byte order, so its B copy is in that order too
        layouts = [("ix_qstage", T.perm)] + ([("ix_qstage_ss", range(HD))]
                                             if self.ss_keys or self.tma_keys else [])
        bufs = [(k.lds(name, u32, T.chunks * cb // 4), perm) for name, perm in layouts]
        # query_records: the weights' loads issue before the queries' and their stores after
        # them, so the staging waits for one round of loads, not three
        if not self.query_records:
            self._query_words(k, io, bufs, cb)
        # the weights' stores (buffer, index, value, mask), made after the queries' loads
        stores = [] if self.query_records else None
        # weights: wl[(row * 4 + t) * NH + jj] = w[row, head of thread t's jj-th column]
        NH = HP // 4
        heads_t = self._wg_heads()
        wl = k.lds("ix_wstage", f32, R * 4 * NH)
        for i0 in range(0, R * 4 * NH, Tn):
            i = i0 + tid
            m = i < R * 4 * NH
            row = i / (4 * NH)
            t = (i / NH) % 4
            jj = i % NH
            head = self._pick_head(k, heads_t, t, jj)
            mm = m & (head < H)
            v = self._head_weight(k, io, k.min(row, R - 1), k.min(head, H - 1), mask=mm)
            if self.bf16_head_sum:  # the one-pair chains' FMAs take bf16 weights too
                v = k.cast(k.cast(v, bf16), f32)
            _store_or_defer(k, stores, wl, k.min(i, R * 4 * NH - 1), v, m)
        out = dict(wl=wl, NH=NH)
        if self.bf16_head_sum:
            out["sum_desc"], out["sum_lds"] = self._stage_sum_weights(k, io, stores)
        if self.query_records:
            self._query_records(k, io, bufs, cb)
        for buf, index, value, mask in stores or ():
            k.store(buf, index, value, mask=mask)
        descs = {name: [at.smem_descriptor(k.lds_offset(name) + c * cb)
                        for c in range(T.chunks)] for name, _ in layouts}
        return dict(out, descs=descs["ix_qstage"], descs_ss=descs.get("ix_qstage_ss"))

    def _query_words(self, k, io, bufs, cb):
        """The staging's word-by-word form (`query_records` off): a thread a B column, one
        4-byte load a K word. Every warp's load touches 32 records 144 bytes apart (a sector
        each for 4 bytes) and every CTA reads the whole ix_qb that way: ~9000 clocks before
        the key loop on an H100 (bench/NOTES.md v56)."""
        p, T = self.p, self.t
        R, H, HP = p.rows, p.heads, p.heads_pad
        ncol = (R + 1) * HP
        tid = _tid(k)
        Tn = k.W * k.L
        chunk_words = T.atom.k // WORD_BYTES  # an MMA chunk's K words (K fp8 bytes)
        for qs, perm in bufs:
            for c in range(T.chunks):
                for kk4 in range(chunk_words):
                    wsrc = perm[WORD_BYTES * (c * chunk_words + kk4)] // WORD_BYTES
                    for n0 in range(0, ncol, Tn):
                        nn = n0 + tid
                        row, head = nn / HP, nn % HP
                        m = (nn < ncol) & (row < R) & (head < H)
                        v = io.load("ix_qb", (k.min(head, H - 1) * R + k.min(row, R - 1)) * QW
                                    + wsrc, mask=m)
                        boff = c * cb + (nn >> 3) * WGMMA_B_SBO + \
                            (kk4 // ROW_WORDS) * WGMMA_B_LBO + (nn & 7) * CORE_ROW_BYTES + \
                            (kk4 % ROW_WORDS) * WORD_BYTES
                        k.store(qs, boff >> 2, v, mask=nn < ncol)

    def _query_records(self, k, io, bufs, cb):
        """The queries into wgmma B, a (head, row) record a thread: its KEY_WORDS words by
        16-byte loads (a sector each, where the word-by-word form spends one a 4-byte word),
        then each core-matrix row of its B column (ROW_WORDS consecutive K words of one MMA
        chunk) assembled from them in registers and stored at once; the columns no record
        fills (row R's, the padding heads') get zeros. The same bits as `_query_words`.
        A record goes in parts (`_record_parts`) so that fewer of its words are live at
        once: the rows-8 fused index spilled holding all 32."""
        p, T = self.p, self.t
        R, H, HP = p.rows, p.heads, p.heads_pad
        tid = _tid(k)
        Tn = k.W * k.L
        recs = H * R
        chunk_words = T.atom.k // WORD_BYTES  # an MMA chunk's K words (K fp8 bytes)
        # core-matrix rows a column holds: (chunk c, K words ROW_WORDS * j ..) at its bytes
        rows = [(c, j, c * cb + j * WGMMA_B_LBO) for c in range(T.chunks)
                for j in range(chunk_words // ROW_WORDS)]
        # each row's record words, per layout (perm: K byte -> record byte)
        sources = [[[perm[WORD_BYTES * (c * chunk_words + j * ROW_WORDS + e)] // WORD_BYTES
                     for e in range(ROW_WORDS)] for c, j, _ in rows] for _, perm in bufs]

        def column_bytes(nn):  # the first core-matrix row of B column nn
            return (nn >> 3) * WGMMA_B_SBO + (nn & 7) * CORE_ROW_BYTES

        for part in _record_parts(sources, ROW_WORDS):
            for r0 in range(0, recs, Tn):
                rec = r0 + tid
                m = rec < recs
                at = k.min(rec, recs - 1)  # record head * R + row, B column row * HP + head
                words = {}
                for q in sorted({w // ROW_WORDS for (_, _, src) in part for w in src}):
                    v = io.load("ix_qb", at * QW + q * ROW_WORDS, ROW_WORDS, mask=m)
                    for e in range(ROW_WORDS):
                        words[q * ROW_WORDS + e] = k.extract(v, e)
                col = column_bytes((at % R) * HP + at / R)
                for b, r, src in part:
                    k.store(bufs[b][0], (col + rows[r][2]) // WORD_BYTES,
                            k.vec(*[words[w] for w in src]), mask=m)
        # the blank columns: row R's HP, then each row's HP - H padding heads
        pad = HP - H
        zeros = k.vec(*[k.const(0, u32)] * ROW_WORDS)
        items = (HP + R * pad) * len(rows)
        per_chunk = chunk_words // ROW_WORDS
        for i0 in range(0, items, Tn):
            i = k.min(i0 + tid, items - 1)
            b, r = i / len(rows), i % len(rows)
            nn = R * HP + b
            if pad:
                nn = k.select(b < HP, nn, ((b - HP) / pad) * HP + H + (b - HP) % pad)
            off = (r / per_chunk) * cb + (r % per_chunk) * WGMMA_B_LBO
            for qs, _ in bufs:
                k.store(qs, (column_bytes(nn) + off) // WORD_BYTES, zeros,
                        mask=(i0 + tid) < items)

    def _stage_sum_weights(self, k, io, stores=None):
        """The head-sum wgmma's B (`head_sum` "mma"): K = (R + 1) x HP (row, head) by N = 8
        (rows), W[(r, h), n] = bf16(w[r, h]) if n == r else 0, K-major without swizzle at
        SUM_ATOM's LBO (the 8 x 8 core matrices of successive K back to back, one column block):
        byte (kk // CK) * LBO + n * CORE_ROW_BYTES + (kk % CK) * 2, CK = SUM_CORE_K. A chain
        starting at row ra reads it from K = ra x HP on, so D's column n is row n's sum.
        Returns the descriptor of K = 0 and the words (sum_mma "sync" loads its fragments);
        `stores`: a list to append the stores to (_store_or_defer) instead of making them."""
        p, at = self.p, self.SUM_ATOM
        R, H, HP = p.rows, p.heads, p.heads_pad
        ck, lbo_words = self.SUM_CORE_K, at.b_smem.lbo // WORD_BYTES
        per_word = WORD_BYTES // at.b_smem.elem_bytes  # bf16 a word: 2
        words = (R + 1) * HP // ck * lbo_words
        tid = _tid(k)
        Tn = k.W * k.L
        ws = k.lds("ix_wsum", u32, words)
        wpr = CORE_ROW_BYTES // WORD_BYTES  # words a core-matrix row (CK bf16 of K)
        for i0 in range(0, words, Tn):
            wd = i0 + tid
            m = wd < words
            kk0 = (wd / lbo_words) * ck + (wd % wpr) * per_word
            n = (wd % lbo_words) / wpr
            row, h0 = kk0 / HP, kk0 % HP
            on = m & n.eq(row) & (row < R)
            half = []
            for d in range(per_word):
                h = h0 + d
                v = self._head_weight(k, io, k.min(row, R - 1), k.min(h, H - 1), mask=on & (h < H))
                half.append(k.cast(k.bitcast(k.cast(v, bf16), u16), u32))
            _store_or_defer(k, stores, ws, k.min(wd, words - 1),
                            half[0] | (half[1] << BF16_SHIFT), m)
        return at.smem_descriptor(k.lds_offset("ix_wsum")), ws

    def _sum_slots(self):
        """[(key half hk, column offset)] of the head-sum D's slots: slot i of lane (warp w,
        g = lane // 4, t = lane % 4) is key 16w + g + 8 hk, column 2t + offset (checked on
        SUM_ATOM's lane table)."""
        sa = self.SUM_ATOM
        cr, cc = sa.c_rows(), sa.c_cols()
        out = []
        for i in range(sa.c_slots):
            hk, col = i >> 1, i & 1
            for lane in range(cr.shape[0]):
                w, g, t = lane // 32, (lane % 32) // 4, lane % 4
                if (int(cr[lane, i]), int(cc[lane, i])) != (16 * w + g + 8 * hk, 2 * t + col):
                    raise ValueError(f"{sa.name}: D slot {i} of lane {lane} is not key "
                                     f"{16 * w + g + 8 * hk}, column {2 * t + col}")
            out.append((hk, col))
        return out

    def _acc_to_sum_a(self, atom):
        """For the head-sum wgmma's A chunk c (K = 16c .. 16c + 15 of `atom`'s N), its four
        registers as (accumulator slot low, high) pairs of the same lane: the f32 accumulator
        IS the A fragment once packed (checked on the atoms' lane tables for every lane)."""
        sa = self.SUM_ATOM
        if atom.n % sa.k:
            raise ValueError(f"ix_score: head_sum 'mma' needs a chain N multiple of {sa.k}, "
                             f"got {atom.name}")
        cr, cc = atom.c_rows(), atom.c_cols()
        ar, ac = sa.a_rows(), sa.a_cols()
        where = {}
        for lane in range(cr.shape[0]):
            for i in range(cr.shape[1]):
                where[(int(cr[lane, i]), int(cc[lane, i]))] = (lane, i)
        out = []
        for c in range(atom.n // sa.k):
            regs = None
            for lane in range(ar.shape[0]):
                slots = []
                for s in range(sa.a_slots):
                    ln, i = where[(int(ar[lane, s]), c * sa.k + int(ac[lane, s]))]
                    if ln != lane:
                        raise ValueError(f"{atom.name}: A element {s} of lane {lane} (chunk {c}) "
                                         f"is held by lane {ln}")
                    slots.append(i)
                pairs = [tuple(slots[2 * j:2 * j + 2]) for j in range(sa.a_slots // 2)]
                if regs is not None and pairs != regs:
                    raise ValueError(f"{atom.name}: chunk {c}'s A slots differ across lanes")
                regs = pairs
            out.append(regs)
        return out

    @staticmethod
    def _acc_slots(atom, heads_pad: int, lane: int):
        """[(slot i, key half h, accumulator row of the group, head)] of `lane`'s accumulator
        slots: a wgmma's C rows are the warp's 16 keys (the lane's keys g and g + 8, h = 0
        / 1), its columns (group row) x heads_pad + head; checked."""
        rows, cols = atom.c_rows(), atom.c_cols()
        g = lane // 4
        out = []
        for i in range(atom.c_slots):
            r, n = int(rows[lane, i]), int(cols[lane, i])
            h = {g: 0, g + 8: 1}.get(r)
            if h is None:
                raise ValueError(f"{atom.name}: accumulator slot {i} of lane {lane} holds row {r}")
            out.append((i, h, *divmod(n, heads_pad)))
        return out

    def _wg_heads(self):
        """For thread t (lane % 4) of a warp: its columns' heads (row 0 of the pair), in slot
        order, and for each accumulator slot i: (key h, row rho, column index jj)."""
        p, at = self.p, self.t.atom
        per_t = {}
        slot_map = None
        for lane in range(32):
            t = lane % 4
            hs = []
            sm = []
            for _, h, rho, head in self._acc_slots(at, p.heads_pad, lane):
                if rho == 0 and head not in hs:
                    hs.append(head)
                sm.append((h, rho, head))
            if t in per_t and per_t[t] != hs:
                raise ValueError(f"{at.name}: columns of thread {t} differ across groups")
            per_t[t] = hs
            smt = [(h, rho, per_t[t].index(head)) for (h, rho, head) in sm]
            if slot_map is not None and slot_map != smt:
                raise ValueError(f"{at.name}: accumulator slots differ across lanes")
            slot_map = smt
        self._slot_map = slot_map
        return [per_t[t] for t in range(4)]

    def _wide_atom(self):
        """The wgmma whose N spans every pair of the plan's rows (None with one pair)."""
        p = self.p
        return wgmma_e4m3(2 * p.pairs * p.heads_pad) if p.pairs > 1 else None

    # The all-pairs path may split its chain in two halves (pairs [0, P/2) and [P/2, P))
    # software-pipelined against each other's epilogue (`_pipeline_halves`) from this many
    # pairs on (below it the halves' N <= 64 runs the tensor cores at the narrow chains'
    # rate). Off (None) by default: measured SLOWER on the H200 (512K x 8 W1 97.7 us against
    # 85.5 with one m64n256k32 chain, 128K 56.1 vs 52.4: bench/NOTES.md v7): a wgmma reads its
    # register A once per instruction, so two N = 128 chains cost the tensor cores about
    # twice one N = 256 chain, more than the epilogue overlap returns. PIPELINE_MIN_PAIRS is
    # the setting that was measured.
    PIPELINE_MIN_PAIRS = 4
    pipeline_min_pairs = None
    # Hopper: keys staged in shared memory and read by the SS wgmma (A and B from shared
    # memory: `_group_ss`), each warpgroup's chain overlapped with its previous step's
    # epilogue; groups of all the plan's pairs split the pairs over the warpgroups on one
    # staged page, one-pair groups (rows 2, workload W2) take a page a warpgroup. Off
    # (False: keys straight into registers, the issue's Hopper form) until measured: the
    # question bench/h200.py --overlap answers first (bench/NOTES.md v9).
    ss_keys = False

    # Hopper builds of ONE row pair (rows 2) may overlap step s's chain with step s-1's
    # epilogue (`_pipeline_alternate`). Off (False: chain, wait, epilogue) by default:
    # measured SLOWER on the H200 (index_scoring 512K x 2 W1 48.5 against 45.4 us, fused
    # index 97.9 against 93.5: bench/NOTES.md v9), like the halves above: a wgmma reading A
    # from registers does not overlap the CUDA-core work around it.
    alternate_one_pair = False

    def _half_atom(self):
        """The wgmma of half the pairs (None: the all-pairs chain stays one chain)."""
        p = self.p
        m = self.pipeline_min_pairs
        if m is None or p.pairs < max(m, 2) or p.pairs % 2:
            return None
        return wgmma_e4m3(p.pairs * p.heads_pad)

    def _wide_slot_maps(self, wide):
        """Per pair pp of the `wide` accumulator (N / (2 x heads) pairs): [(slot, key h, row
        rho of the pair, column index jj)], checked to repeat the narrow atom's per-thread
        head order (so the staged head weights serve both)."""
        HP = self.p.heads_pad
        narrow = self._slot_map
        npairs = wide.n // (2 * HP)
        maps = None
        for lane in range(32):
            per = [[] for _ in range(npairs)]
            for i, h, row, head in self._acc_slots(wide, HP, lane):
                per[row // 2].append((i, h, row % 2, head))
            if maps is None:
                maps = per
            elif [[x[:3] for x in m] for m in maps] != [[x[:3] for x in m] for m in per]:
                raise ValueError(f"{wide.name}: accumulator slots differ across lanes")
        out = []
        for m in maps:
            if [(h, rho) for (_, h, rho, _) in m] != [(h, rho) for (h, rho, _) in narrow]:
                raise ValueError(f"{wide.name}: a pair's slots do not follow the narrow atom's")
            out.append([(i, h, rho, jj) for (i, h, rho, _), (_, _, jj) in zip(m, narrow)])
        return out

    @staticmethod
    def _pick_head(k, heads_t, t, jj):
        out = k.const(heads_t[0][0], i32) + 0 * jj
        for tt in range(4):
            for q, hd in enumerate(heads_t[tt]):
                out = k.select(t.eq(tt) & jj.eq(q), k.const(hd, i32), out)
        return out

    def _group_wgmma(self, k, io, gi, g, hist, stage):
        """A group's key loop on sm_90a (stages/index_score_sm90.py)."""
        WgmmaGroup(self, k, io, gi, g, hist, stage).run()

    # -- Hopper, keys in shared memory (ss_keys) -------------------------------------------
    PAGE_SLOT_WORDS = (PAGE * HD + PAGE * 4) // 4  # a page's keys, then their 64 fp32 scales

    @staticmethod
    def _wg_lane_key(ww, g8, t4):
        """The key (of a wgmma's 64) whose scores a lane holds after a pair's quad butterfly:
        warp ww's 16 keys, the lane's row g8 of them or g8 + 8 (accumulator rows), by t4."""
        return ww * 16 + g8 + ((t4 >> 1) & 1) * 8

    def _taking_turns(self, k) -> bool:
        return self.turns and self.p.wgmma and k.W // 4 == len(self.TURN_BARRIERS)

    def _turns_open(self, k):
        """Warpgroup 1 hands the job's first turn to 0. Once a job, not once a group: a
        barrier counts arrivals, not who made them, so 1's last hand-over of one group and
        a first one of the next would complete 0's barrier without 0."""
        if self._taking_turns(k):
            with k.if_((k.wave_id() >> 2).eq(1)):
                k.named_barrier(self.TURN_BARRIERS[0], k.W, arrive=True)

    def _turns_close(self, k):
        """Warpgroup 0 takes the turn 1's last chain handed over (every completion has both
        warpgroups; the CTA barrier after it keeps the next job's hand-over apart)."""
        if self._taking_turns(k):
            with k.if_((k.wave_id() >> 2).eq(0)):
                k.named_barrier(self.TURN_BARRIERS[0], k.W)

    def _b_rows_offset(self, k, ra):
        """What a staged-queries descriptor adds to start at row ra (runtime): heads_pad B
        columns a row, a SBO per 8 of them, in the descriptor's 16-byte units."""
        return k.cast(ra * (self.p.heads_pad // 8) * WGMMA_B_SBO // (1 << DESC_SHIFT), u64)

    def _ss_on(self) -> bool:
        """Whether Hopper groups take the SS path (`_group_ss`): all the plan's pairs split
        over the warpgroups, or one pair, a page a warpgroup."""
        return self.ss_keys and self.p.wgmma

    def _group_ss(self, k, io, gi, g, hist, stage, key_lo, nblocks, finish, split_pairs):
        """A group's keys staged in shared memory for the SS wgmma, a step at a time (two
        slots; every thread copies 16-byte pieces to the canonical K-major places of A).
        `split_pairs` (a group of all the plan's pairs): a step is one page and warpgroup w
        takes pairs [w * ppw, (w + 1) * ppw) of it; otherwise (a group of ONE pair): a step
        is one page a warpgroup, each running the pair's chain on its own page. Step t's
        chain is issued, then step t-1's epilogue runs (the chain in flight), then step
        t+1's keys are stored into the other slot (its chains t-1 retired), step t+3's
        loaded into registers, wait(0), and one CTA barrier (with the proxy fence) hands the
        slots on. Pages past the last repeat it; their results go unread."""
        p = self.p
        a = io.args
        W, L = k.W, k.L
        nwg = W // 4
        if split_pairs and p.pairs % nwg:
            raise ValueError(f"ss_keys: {p.pairs} pairs do not split over {nwg} warpgroups")
        ppw = p.pairs // nwg if split_pairs else 1  # pairs a warpgroup's chain covers
        npg = 1 if split_pairs else nwg  # pages a step
        HP, MP = p.heads_pad, p.max_pages
        atom = wgmma_e4m3(2 * ppw * HP, a_smem=True)
        maps = self._wide_slot_maps(atom) if ppw > 1 else \
            [[(i, h, rho, jj) for i, (h, rho, jj) in enumerate(self._slot_map)]]
        PW = self.PAGE_SLOT_WORDS
        SW = npg * PW  # a slot: npg pages
        page_pieces = PAGE * HD // CORE_ROW_BYTES
        if page_pieces % (W * L):  # so each of a thread's pieces lies in one page (static)
            raise ValueError(f"ss_keys: {page_pieces} 16-byte pieces a page do not split over "
                             f"{W * L} threads")
        per = npg * page_pieces // (W * L)
        name = "ix_kslots" if split_pairs else "ix_kslots_pages"
        slots = k.lds(name, u32, 2 * SW)
        base = k.lds_offset(name)
        tid, w = _tid(k), k.wave_id()
        wg, ww, lane = w >> 2, w & 3, _lane(k)
        g8, t4 = lane >> 2, lane & 3
        kf = self._wg_lane_key(ww, g8, t4)
        btrow = g[6]
        chunk_bytes = atom.M * atom.K  # one K chunk of A: 64 keys x 32 bytes
        sa = atom.a_smem
        PPK = HD // CORE_ROW_BYTES  # 16-byte pieces a key
        lppk = int(math.log2(PPK))
        my_page = 0 if split_pairs else wg  # the page of a step this warpgroup scores

        def piece(i):
            """Thread piece i: (page of the step, piece within the page), the page static."""
            pc = tid + i * W * L
            return (i * W * L) // page_pieces, pc & (page_pieces - 1)

        def load(t):
            pages = []
            for pg in range(npg):
                blk = key_lo + k.min(t * npg + pg, nblocks - 1) * PAGE
                pages.append(k.load(a.block_table, btrow * MP + (blk >> 6), i32))
            out = []
            for i in range(per):  # piece pc: key pc / PPK, its 16 bytes pc % PPK
                pg, pc = piece(i)
                out.append(k.load(a.index_cache, pages[pg] * PAGE_WORDS + (pc >> lppk) * (HD // 4)
                                  + (pc & (PPK - 1)) * 4, u32, 4, nontemporal=True))
            for pg in range(npg):  # the scales: thread tid < PAGE, key tid of each page
                out.append(k.load(a.index_cache, pages[pg] * PAGE_WORDS + SCALE_WORD0
                                  + (tid & (PAGE - 1)), u32, nontemporal=True))
            return out

        def store(slot, vals):
            # key m's bytes [16j, 16j + 16) are chunk j / 2's K bytes [16 (j % 2), ...): the
            # canonical no-swizzle K-major place (core matrix = 8 keys x 16 bytes; the next 8
            # keys SBO on, the next 16 K bytes LBO on)
            for i in range(per):
                pg, pc = piece(i)
                m, j = pc >> lppk, pc & (PPK - 1)
                off = (j >> 1) * chunk_bytes + (m & 7) * CORE_ROW_BYTES + (m >> 3) * sa.sbo + \
                    (j & 1) * sa.lbo
                k.store(slots, slot * SW + pg * PW + (off >> 2), vals[i])
            for pg in range(npg):
                k.store(slots, slot * SW + pg * PW + PAGE * HD // 4 + (tid & (PAGE - 1)),
                        vals[per + pg], mask=tid < PAGE)

        def issue(slot):
            rows = self._b_rows_offset(k, gi + 2 * ppw * (wg if split_pairs else 0))
            # this warpgroup's page of the slot, in the descriptor's 16-byte units
            page_off = None if split_pairs else k.cast(my_page * desc_units(PW * 4), u64)
            # one opaque descriptor of each operand, offsets added in the loop (start address
            # field, 16-byte units, no carry below 256 KiB): a descriptor per chunk and slot
            # as a constant became a 64-bit register pair (constant + the CTA's shared-window
            # address) hoisted out of the persistent loop, and the fused rows-8 kernel spilled
            a0 = k.opaque(atom.a_smem_descriptor(base), u64)
            b0 = k.opaque(stage["descs_ss"][0], u64)
            k.wgmma_fence()
            acc = k.vec(*[k.const(0.0, f32)] * atom.c_slots)
            for c in range(self.t.chunks):
                da = a0 + desc_units(slot * SW * 4 + c * chunk_bytes)  # slot: a static 0 / 1
                db = b0 + (stage["descs_ss"][c] - stage["descs_ss"][0]) + rows
                acc = k.wgmma(atom, da if page_off is None else da + page_off, db, acc)
            k.wgmma_commit()
            return acc

        def scale(slot):
            """The lane's key scale (key kf of its page) of the step in `slot`: read right
            after the barrier that publishes the slot, carried to that step's epilogue (a wave
            still in it while another stores the next keys into the slot would read theirs)."""
            return k.bitcast(k.load(slots, slot * SW + my_page * PW + PAGE * HD // 4 + kf, u32),
                             f32)

        def epilogue(t, acc, sc):
            blk = t * npg + my_page
            with k.if_(blk < nblocks):  # a repeated last page scores nothing
                for q in range(ppw):
                    pp = ppw * wg + q if split_pairs else 0
                    finish(acc, maps[q], pp, key_lo + blk * PAGE, sc)

        steps = (nblocks + npg - 1) / npg
        with k.if_(nblocks > 0):
            store(0, load(k.const(0, i32)))
            ring = [[k.lane_var(x) for x in load(k.const(d, i32))] for d in (1, 2)]
            with k.async_proxy_lds():
                k.barrier()
            pending = k.lane_var(k.vec(*[k.const(0.0, f32)] * atom.c_slots))
            pending_sc = k.lane_var(k.const(0.0, f32))
            for t0 in k.range(0, steps + 1, 2):
                for d in range(2):  # step t's keys in slot d; ring[d] holds step t + 1's
                    t = t0 + d
                    sc = scale(d)
                    acc = issue(d)
                    prev = pending.get()
                    with k.if_((t >= 1) & (t <= steps)):
                        epilogue(t - 1, prev, pending_sc.get())
                    store(1 - d, [v.get() for v in ring[d]])
                    for v, x in zip(ring[d], load(t + 3)):
                        v.set(x)
                    k.wgmma_wait(0)
                    pending.set(acc)
                    pending_sc.set(sc)
                    with k.async_proxy_lds():
                        k.barrier()

    def reference(self, env):
        from .index_ref import score_reference
        return score_reference(self.p, env)


# ------------------------------------------------------------------------------ consumers

def wait_scored(k, io, p: IndexPlan):
    """For a consumer stage: wait for every scoring job's `score_done` pair, then an acquire
    fence; `scores` and `score_hist` may then be read with plain loads. Declare
    `scored_reads(p)` among the consumer's reads."""
    J = p.score_jobs
    lane = _lane(k)
    for j0 in range(0, J, k.L):
        j = j0 + lane
        io.wait("score_done", k.min(j, J - 1), mask=j < J)
    k.fence("acquire", "device")


def scored_reads(p: IndexPlan) -> list:
    return [Use("score_done", 0, p.score_jobs)]
