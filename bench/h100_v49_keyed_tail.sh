#!/usr/bin/env bash
# v49: the tail finish or the rounds chosen per row by its key count (SelectConfig.
# tail_min_keys, `--tune launch.tail_min_keys=N`): every job computes its row's form from
# n_keys, so nothing is polled for it (v47's choice by the bin polled rdy1: 64K 1.087, 512K
# 1.026). v45: the static five-option form (group maxima, tail, 16-wide fold) 19.64 us at
# 512K x 8 but 26.77 at 64K; the maxima alone cost 64K +3.4%, hence also the group skip by
# key count (`sel_h1.group_skip_min_keys`). Each kind's variants in one process
# (`time_layers --versus B --also C ...`, every timed run checked), then the exactness sweep
# on every distribution; the fused index's step takes over v48's (its tail on W2, at 64K,
# its group skip at 64K: v47, launch.group_max=0 0.953 there). ~9 min; packed after each.
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
# select_hist r8: B = the keyed form (tail by key count, maxima, 16-wide fold), C = v45's
# static form, D = B with the group skip by key count too, E = the keyed tail alone
OUT=$LOGS step vs_sel 240 $SH --pos 65535,131071,524287 --versus $K,$G,$U \
    --also launch.tail_finish=1,$G,$U --also $K,$G,$U,$M --also $K --rounds 2; pack
OUT=$LOGS step topk_keyed 80 $TOPK --pos 65535,524287 --rows 8 \
    --dist normal,nan,neginf,few,above2048,allequal --tune $K,$G; pack
# the fused index r8: B = the static tail (v47: W1 512K 0.975), C = the tail by key count
# (64K rows the rounds), D = the group skip by key count (v47: group_max=0 at 64K 0.953)
OUT=$LOGS step vs_ix 200 $IX --pos 65535,524287 --workload W1,W2 --versus launch.tail_finish=1 \
    --also $K --also $M --rounds 1; pack
rm -rf "$LOGS"
