#!/usr/bin/env bash
# v20 call 1: the scoring's key loads. Nsight Compute (v19) counted 49% excessive sectors in
# index_scoring r8 W2: one load instruction of a key's four holder lanes read half of each
# of the key's 32-byte sectors. key_piece=16 reads whole sectors (half the requests);
# late_loads refills a ring slot after its step (the SASS: loads spread over scoreboards,
# but their register moves right behind them). Each against the default in the same call.
# Run as: timeout 570 bench/h200_v20_pieces.sh; (cd $OUT && tar czf logs.tgz *.log *.txt)
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
IS=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 110 python3 -m tools.time_layers "${IS[@]}"
step sc_kp16 110 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.key_piece=16
step sc_late_narrow 110 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.late_loads=narrow
prof score_w2_kp16 index_scoring --rows 8 --pos 524287 --workload W2 --tune ix_score.key_piece=16
step sc_default2 110 python3 -m tools.time_layers "${IS[@]}"
step sc_kp16_2 110 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.key_piece=16
IS2=(--kind index_scoring --config glm5 --rows 2 --pos 131071,524287 --workload W1,W2 --backend cuda --reps 5)
step sc2_default 80 python3 -m tools.time_layers "${IS2[@]}"
step sc2_kp16 80 python3 -m tools.time_layers "${IS2[@]}" --tune ix_score.key_piece=16
step sc_late_all 110 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.late_loads=all
