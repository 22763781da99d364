#!/usr/bin/env bash
# v20 call 6: the TMA ring of 2 pages (call 5's run failed in graph capture: the tensor map
# was first copied to the GPU inside the capture, now from pinned memory) against the
# default in the same call, and where the TMA loop's time goes (Nsight Compute, 4 slots).
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
IS=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W2 --backend cuda --reps 5)
step sc_default 80 python3 -m tools.time_layers "${IS[@]}"
step sc_tma2 80 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.tma_keys=1
prof score_w2_tma4 index_scoring --rows 8 --pos 524287 --workload W2 --tune ix_score.tma_keys=1 \
    --tune ix_score.tma_slots=4
