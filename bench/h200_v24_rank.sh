#!/usr/bin/env bash
# v24 call 3: the row finish with candidates ranked by key (no local histogram passes) and
# appends only where a wave holds a candidate. Exactness first, then A/B in the same call.
# Run as: timeout 570 bash bench/h200_v24_rank.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
F=launch.finish_max=256
step topk_fin 200 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $F
step topk_fin_ix 150 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune $F
step sel_default 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fin 40 python3 -m tools.time_layers "${SC[@]}" --tune $F
step sel_default2 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fin_b 40 python3 -m tools.time_layers "${SC[@]}" --tune $F
step tl_sel_fin 30 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 524287 --backend cuda --reps 3 --timeline --tune $F
step ix_default 60 python3 -m tools.time_layers "${IX[@]}"
step ix_fin 60 python3 -m tools.time_layers "${IX[@]}" --tune $F
step tl_ix_fin 40 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1 --backend cuda --reps 3 --timeline --tune $F
