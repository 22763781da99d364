#!/usr/bin/env bash
# v28 call 1: the rounds' publish by every wave (SelectConfig.cta_publish, --tune
# launch.cta_publish=1) against wave 0's walk, same call: exact top-k first, then select_hist
# rows 2 / 4 / 8 and the fused index r8, each A/B twice.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
ON=(--tune launch.cta_publish=1)
step topk_hist 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer "${ON[@]}"
step topk_index 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda "${ON[@]}"
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_pub 40 python3 -m tools.time_layers "${SC[@]}" "${ON[@]}"
step sel2 40 python3 -m tools.time_layers "${SC[@]}"
step sel_pub2 40 python3 -m tools.time_layers "${SC[@]}" "${ON[@]}"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix 50 python3 -m tools.time_layers "${IX[@]}"
step ix_pub 50 python3 -m tools.time_layers "${IX[@]}" "${ON[@]}"
step ix2 50 python3 -m tools.time_layers "${IX[@]}"
step ix_pub2 50 python3 -m tools.time_layers "${IX[@]}" "${ON[@]}"
