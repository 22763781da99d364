#!/usr/bin/env bash
# v27 call 7: the bucketed tail finish (sel_h1 buckets its candidates, bucket starts by
# CTA-parallel suffix sums; sel_out gathers every slice's threshold bucket, CTA-parallel
# histogram passes by default, ranked with sel_out.tail_rank=1) against the rounds.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
TF=launch.tail_finish=1
step topk_t 170 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $TF
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
step sel_r 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF --tune sel_out.tail_rank=1
step sel2 45 python3 -m tools.time_layers "${SC[@]}"
step sel_t2 45 python3 -m tools.time_layers "${SC[@]}" --tune $TF
TAIL=8 step tl_t 60 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 65535,524287 --backend cuda --timeline --tune $TF
