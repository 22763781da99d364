#!/usr/bin/env bash
# v31 call 4 (session 27, short: ~5 min): the fused index's NVIDIA defaults (refined first
# digits at every row width, folded into sel_h1 at rows 8: stages.index) exact at rows 2 / 4 /
# 8 and timed against the coarse plan (launch.fine_digits=0) at rows 2 / 4, with the fold at
# rows 2 / 4 too (unmeasured there), in one call.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-7}
step topk_index 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
IX=(--kind index --config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_new 100 python3 -m tools.time_layers "${IX[@]}" --rows 2,4,8
step ix_old 80 python3 -m tools.time_layers "${IX[@]}" --rows 2,4 --tune launch.fine_digits=0
step ix_fold 80 python3 -m tools.time_layers "${IX[@]}" --rows 2,4 --tune launch.fold_first_digits=1
tar czf /tmp/v31-call4-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v31-call4-logs.tgz "$OUT"/
