#!/usr/bin/env bash
# v28 call 2: sel_h1 summing its row's first digits itself (SelectConfig.fold_first_digits,
# --tune launch.fold_first_digits=1: no sel_h0, no message 0) and the publish's second form
# (cta_publish: the sums in place in LDS, wave 0 copying and releasing), against the
# default in the same call: exact top-k first, then select_hist rows 2 / 4 / 8 and the fused
# index r8 W1.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
FOLD=(--tune launch.fold_first_digits=1)
PUB=(--tune launch.cta_publish=1)
step topk_fold 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer "${FOLD[@]}"
step topk_pub 60 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 2,8 \
    --backend cuda --first-digits buffer "${PUB[@]}"
step topk_index 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda "${FOLD[@]}"
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fold 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}"
step sel_pub 40 python3 -m tools.time_layers "${SC[@]}" "${PUB[@]}"
step sel2 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fold2 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}"
step sel_pub2 40 python3 -m tools.time_layers "${SC[@]}" "${PUB[@]}"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1 --backend cuda --reps 5)
step ix 60 python3 -m tools.time_layers "${IX[@]}"
step ix_fold 60 python3 -m tools.time_layers "${IX[@]}" "${FOLD[@]}"
step ix2 60 python3 -m tools.time_layers "${IX[@]}"
step ix_fold2 60 python3 -m tools.time_layers "${IX[@]}" "${FOLD[@]}"
