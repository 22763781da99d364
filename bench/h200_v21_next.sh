#!/usr/bin/env bash
# Prepared at the end of v20 (not yet run): the TMA key path's A/Bs that v20 could not time
# (its "4 slots" runs applied only their last --tune flag; fixed since). Each against the
# default in the same call. Static figures (ptxas): rows 2 with 16 warps and 2 slots 128
# registers, no spill; rows 4 / 8 with split pairs 12 / 136 bytes of spills.
# Run as: timeout 570 bench/h200_v21_next.sh; (cd $OUT && tar czf logs.tgz *.log)
source "$(dirname "$0")/steps.sh"
IS=(--kind index_scoring --config glm5 --pos 131071,524287 --workload W1,W2 --backend cuda --reps 5)
step r2_default 90 python3 -m tools.time_layers "${IS[@]}" --rows 2
step r2_tma16 90 python3 -m tools.time_layers "${IS[@]}" --rows 2 \
    --tune ix_score.tma_keys=1,ix_score.tma_slots=2,launch.waves=16
step r48_default 110 python3 -m tools.time_layers "${IS[@]}" --rows 4,8
step r48_tma4 110 python3 -m tools.time_layers "${IS[@]}" --rows 4,8 \
    --tune ix_score.tma_keys=1,ix_score.tma_slots=4
step r48_tma16 110 python3 -m tools.time_layers "${IS[@]}" --rows 4,8 \
    --tune launch.waves=16,ix_score.split_pairs=1,ix_score.depth=1,ix_score.tma_keys=1
