#!/usr/bin/env bash
# v27 call 5: the tail finish with the lists' lengths and keys-above counted in the one pass
# over the lists (no directory round trip), CTA-parallel suffix sums and threshold in its
# histogram passes; ranked (default) and by passes (sel_out.tail_rank=0) against the rounds.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
TF=launch.tail_finish=1
step topk_t 170 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $TF
step topk_p 100 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --first-digits buffer --tune $TF --tune sel_out.tail_rank=0
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
step sel_p 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF --tune sel_out.tail_rank=0
step sel2 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t2 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
TAIL=8 step tl_t 60 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 65535,524287 --backend cuda --timeline --tune $TF
