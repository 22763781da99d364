#!/usr/bin/env bash
# v20 call 2: word loads (key_piece=4: every key load is the wgmma A register it feeds),
# the 16-warp split path on today's tree, the W2 loop's cycle accounts, and why the async
# key ring is slow (its profile). Each A/B against the default in the same call.
# Run as: timeout 570 bench/h200_v20_loads.sh; (cd $OUT && tar czf logs.tgz *.log *.txt)
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
IS=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 110 python3 -m tools.time_layers "${IS[@]}"
step sc_kp4 110 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.key_piece=4
step sc_split16 110 python3 -m tools.time_layers "${IS[@]}" --tune launch.waves=16 \
    --tune ix_score.split_pairs=1 --tune ix_score.depth=1
step sc_timeline 110 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 8 \
    --pos 524287 --workload W2 --backend cuda --reps 5 --timeline
prof score_w2_async index_scoring --rows 8 --pos 524287 --workload W2 --tune ix_score.async_keys=1
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_default 100 python3 -m tools.time_layers "${IX[@]}"
step ix_kp16 100 python3 -m tools.time_layers "${IX[@]}" --tune ix_score.key_piece=16
