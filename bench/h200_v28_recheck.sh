#!/usr/bin/env bash
# v28 call 6: the final tree after the review (the fold's redundant marker store removed):
# exact top-k of select_hist at rows 2 / 4 / 8 and its figures, against sel_h0's round.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
step topk_hist 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_h0 40 python3 -m tools.time_layers "${SC[@]}" --tune launch.fold_first_digits=0
