#!/usr/bin/env bash
# v40 (next session, prepared in session 33): what v39 left untimed, on the fused index r8 at
# 512K. (1) sel_h1.lean_any_special=1 (the lean scan's hot path 238 -> 212 SASS instructions)
# exact first, then A/B in one process; (2) launch.lean_spans=1 (each wave lists its own span,
# no CTA barrier in the scan loop: v39's Nsight Compute puts 18% of the scan's samples at that
# barrier; timed only in select_hist before, v31) A/B; (3) the default's timeline, whose
# critical path time_layers now prints; (4) the group skip (launch.group_max with lean_spans:
# sel_h1 lists only the 16-key groups whose maximum reaches its threshold) exact, then A/B
# against lean_spans alone, and its timeline. Logs packed after every step (~9 min).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v40
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda \
    --tune sel_h1.lean_any_special=1,launch.lean_spans=1; pack
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
OUT=$LOGS step vs_special 200 $TL --workload W1,W2 --reps 5 \
    --versus sel_h1.lean_any_special=1 --rounds 2; pack
OUT=$LOGS step vs_spans 200 $TL --workload W1,W2 --reps 5 --versus launch.lean_spans=1 \
    --rounds 2; pack
OUT=$LOGS step tl 45 $TL --workload W1 --reps 3 --timeline --jobs-csv "$LOGS/default.csv"; pack
OUT=$LOGS step topk_groups 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda \
    --tune launch.lean_spans=1,launch.group_max=1; pack
OUT=$LOGS step vs_groups 200 $TL --workload W1,W2 --reps 5 --tune launch.lean_spans=1 \
    --versus launch.group_max=1 --rounds 2; pack
OUT=$LOGS step tl_groups 45 $TL --workload W1 --reps 3 --timeline \
    --tune launch.lean_spans=1,launch.group_max=1 --jobs-csv "$LOGS/groups.csv"; pack
rm -rf "$LOGS"
