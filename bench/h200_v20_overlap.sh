#!/usr/bin/env bash
# v20 call 7: the TMA one-pair loop with step s's chain running while step s-1's epilogue
# does (IndexScore.tma_overlap, on with tma_keys), 2 and 4 slots, against the register path
# in the same call; exactness through the fused index.
source "$(dirname "$0")/steps.sh"
IS=(--kind index_scoring --config glm5 --rows 2,4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 100 python3 -m tools.time_layers "${IS[@]}"
step sc_tmao2 100 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.tma_keys=1
step sc_tmao4 100 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.tma_keys=1 \
    --tune ix_score.tma_slots=4
step topk_tmao 80 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W2 --backend cuda --tune ix_score.tma_keys=1
