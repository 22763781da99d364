#!/usr/bin/env bash
# v45: sel_h1's latency chain before its scan (bench/NOTES.md v44: select_hist 512K x 8 with
# the group maxima 23.54 us, sel_h1 p0 -> p1 3.9 us (the block table's check, then the
# first digits' fold), p2 -> p3 7.2 us (two round trips an iteration of maxima)).
# A = the current settings, B = + sel_h1.group_maxima_early (the wave span's maxima loaded
# before the fold, one round trip after the decision) and sel_h1.late_input_checks (the
# block table's loads issued before the fold, reduced after it): exact first, then A/Bs in
# one process, select_hist (with the maxima, and the checks alone on the defaults) and the
# fused index r8 (its group skip is the default there), then both timelines; and the tail
# finish at rows 8 on top (v27: at noise there, 25.34 / 24.79 us, when sel_h1 was slower).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v45
G=launch.group_max=1
E=sel_h1.group_maxima_early=1,sel_h1.late_input_checks=1
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --pos 524287 --backend cuda"
IX="python3 -m tools.time_layers --kind index --config glm5 --pos 524287 --backend cuda"
OUT=$LOGS step topk_sel 150 python3 -m tools.check_topk --config glm5 --pos 524287 \
    --rows 2,8 --backend cuda --first-digits buffer --dist normal,nan,neginf,few,above2048 \
    --tune $G --tune sel_h1.group_maxima_early=1 --tune sel_h1.late_input_checks=1; pack
OUT=$LOGS step vs_sel 120 $SH --rows 8,2 --reps 5 --tune $G --versus $E --rounds 3; pack
OUT=$LOGS step vs_late 90 $SH --rows 8 --reps 5 --versus sel_h1.late_input_checks=1 \
    --rounds 3; pack
OUT=$LOGS step vs_unroll 90 $SH --rows 8 --reps 5 --tune $G --versus sel_h1.segment_unroll=16 \
    --rounds 3; pack
OUT=$LOGS step vs_tail 90 $SH --rows 8 --reps 5 --tune $G --tune sel_h1.group_maxima_early=1 \
    --tune sel_h1.late_input_checks=1 --versus launch.tail_finish=1 --rounds 3; pack
OUT=$LOGS step tl_sel 60 $SH --rows 8 --reps 3 --timeline --tune $G \
    --tune sel_h1.group_maxima_early=1 --tune sel_h1.late_input_checks=1; pack
OUT=$LOGS step topk_ix 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda \
    --tune sel_h1.group_maxima_early=1 --tune sel_h1.late_input_checks=1; pack
OUT=$LOGS step vs_ix 200 $IX --rows 8 --workload W1,W2 --reps 5 --versus $E --rounds 3; pack
OUT=$LOGS step tl_ix 80 $IX --rows 8 --workload W1 --reps 3 --timeline \
    --tune sel_h1.group_maxima_early=1 --tune sel_h1.late_input_checks=1; pack
rm -rf "$LOGS"
