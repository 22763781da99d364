#!/usr/bin/env bash
# v27 call 6: the tail finish with the lists' longest taken after the cum sum (call 5's
# atomic on a just-loaded length stalled the cum sum's loads) and 16 groups a lane ahead.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
TF=launch.tail_finish=1
step topk_t 170 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $TF
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
step sel2 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t2 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
TAIL=8 step tl_t 60 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 65535,524287 --backend cuda --timeline --tune $TF
