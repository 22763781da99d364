#!/usr/bin/env bash
# v49: the tail finish or the rounds chosen per row by its key count (SelectConfig.
# tail_min_keys, `--tune launch.tail_min_keys=N`): every job computes its row's form from
# n_keys, so nothing is polled for it (v47's choice by the bin polled rdy1: 64K 1.087, 512K
# 1.026). v45: the static five-option form (group maxima, tail, 16-wide fold) 19.64 us at
# 512K x 8 but 26.77 at 64K. Here: exact first (rows 8, two contexts either side of the
# bound, every distribution, after the first A/Bs: every timed run is checked too); A/Bs in one process at rows 8 against the defaults and
# against the static form, by context, and the group skip only in those rows
# (`sel_h1.group_skip_min_keys`; v45: the maxima cost 64K +3.4%); then v48's steps (the
# fused index's tail on W2; at 64K by key count, i.e. the rounds; its group skip at 64K,
# v47: launch.group_max=0 0.953 there, against the skip by key count), packed after each.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v49
K=launch.tail_min_keys=${MIN_KEYS:-98304}  # (96K: 64K rows the rounds, 128K rows the tail)
G=launch.group_max=1
U=sel_h1.segment_unroll=16
M=sel_h1.group_skip_min_keys=${MIN_KEYS:-98304}  # (the group skip in the same rows only)
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda --rows 8 --reps 5"
TOPK="python3 -m tools.check_topk --config glm5 --backend cuda --first-digits buffer"
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8 --reps 5"
OUT=$LOGS step vs_keyed 120 $SH --pos 65535,131071,524287 --versus $K,$G,$U --rounds 2; pack
OUT=$LOGS step vs_gskip 80 $SH --pos 65535,524287 --tune $K,$G,$U --versus $M --rounds 2; pack
OUT=$LOGS step topk_keyed 80 $TOPK --pos 65535,524287 --rows 8 \
    --dist normal,nan,neginf,few,above2048,allequal --tune $K,$G; pack
OUT=$LOGS step vs_w2 90 $IX --pos 524287 --workload W2 --tune launch.tail_finish=0 \
    --versus launch.tail_finish=1 --rounds 2; pack
OUT=$LOGS step vs_ix_keyed 70 $IX --pos 65535,524287 --workload W1 --versus $K --rounds 1; pack
OUT=$LOGS step vs_ix_gskip 50 $IX --pos 65535 --workload W1 --versus $M --rounds 1; pack
OUT=$LOGS step vs_static 80 $SH --pos 65535,524287 --tune launch.tail_finish=1,$G,$U \
    --versus launch.tail_finish=0,$K --rounds 1; pack
OUT=$LOGS step vs_keyed_only 80 $SH --pos 65535,524287 --versus $K --rounds 1; pack
rm -rf "$LOGS"
