#!/usr/bin/env bash
# v22 call 5: the lean loop's NaN / unselectable counts from masks (its special-value block
# 300 -> ~50 SASS instructions; the loop 527 -> 282): exactness and one same-call A/B
# against the old loop. Run as: timeout 200 bash bench/h200_v22_nanmask.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-3}
OLD=sel_h1.lean_scan=0,sel_h2.lean_scan=0
step topk_hist 60 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --first-digits buffer
step topk_index 50 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1 --backend cuda
SC=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5)
step sel_new 25 python3 -m tools.time_layers "${SC[@]}"
step sel_old 25 python3 -m tools.time_layers "${SC[@]}" --tune $OLD
step ix_new 60 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1 --backend cuda --reps 5
