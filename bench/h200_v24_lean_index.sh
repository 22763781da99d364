#!/usr/bin/env bash
# v24 call 5: lean lists in the fused index (call 1: W2 -1.9 .. -2.4 us), exactness and a
# second A/B pair in one call.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 3)
step topk_lean_ix 90 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune launch.lean_lists=1
step ix_default 50 python3 -m tools.time_layers "${IX[@]}"
step ix_lean 50 python3 -m tools.time_layers "${IX[@]}" --tune launch.lean_lists=1
step ix_default2 50 python3 -m tools.time_layers "${IX[@]}"
step ix_lean2 50 python3 -m tools.time_layers "${IX[@]}" --tune launch.lean_lists=1
