#!/usr/bin/env bash
# v27 call 1: the bucketed finish (SelectConfig.bucket_finish: sel_h1 buckets its candidates
# by their second digit, sel_out finishes the row after two exchanged digits) against the
# exchange rounds, exactness first, every comparison within this call.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
BF=launch.bucket_finish=1
step topk_b 170 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $BF
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 45 python3 -m tools.time_layers "${SC[@]}"
step sel_b 45 python3 -m tools.time_layers "${SC[@]}" --tune $BF
step sel2 45 python3 -m tools.time_layers "${SC[@]}"
step sel_b2 45 python3 -m tools.time_layers "${SC[@]}" --tune $BF
step tl_b 45 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 524287 --backend cuda --timeline --tune $BF
SL=(--kind select --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5)
step loc 30 python3 -m tools.time_layers "${SL[@]}"
step loc_b 30 python3 -m tools.time_layers "${SL[@]}" --tune $BF
