#!/usr/bin/env bash
# One H200 call (~5 min): sel_h2 counting a deferred row's next digit from its new list (the
# default since v13) against counting in its scan (--tune sel_h2.count_from_list=0), on the
# fused index (512K, rows 2 / 8, W1 / W2) and on select_hist fed the indexer's scores
# (bench/select_on_index_scores.py), then the new default's exactness end to end.
#   run:  bash bench/h200_count2_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
OLD=sel_h2.count_from_list=0
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_new 150 python3 -m tools.time_layers "${IX[@]}"
step index_old 150 python3 -m tools.time_layers "${IX[@]}" --tune "$OLD"
TAIL=20
step index_new_timeline 100 python3 -m tools.time_layers --kind index --config glm5 --rows 8 \
    --pos 524287 --workload W1 --backend cuda --reps 3 --timeline
TAIL=6
step topk_index 200 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda
