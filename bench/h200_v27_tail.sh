#!/usr/bin/env bash
# v27: the tail finish (SelectConfig.tail_finish: sel_out finishes the row after two
# exchanged digits from every slice's list, loaded under the exchange) against the exchange
# rounds, exactness first, every comparison within this call. (Call 1 ran the bucketed form
# of 05eac16 with launch.bucket_finish=1.)
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
TL=(--kind select_hist --config glm5 --rows 8 --pos 65535,524287 --backend cuda --timeline)
step tl 45 python3 -m tools.time_layers "${TL[@]}"
step tl_t 45 python3 -m tools.time_layers "${TL[@]}" --tune $TF
SL=(--kind select --config glm5 --rows 2,8 --pos 524287 --backend cuda --reps 5)
step loc 30 python3 -m tools.time_layers "${SL[@]}"
step loc_t 30 python3 -m tools.time_layers "${SL[@]}" --tune $TF
