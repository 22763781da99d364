#!/usr/bin/env bash
# v20 call 5: the one-pair chains' keys through TMA (IndexScore.tma_keys: pages copied by
# cp.async.bulk.tensor into 128B-swizzled LDS slots, mbarrier waits, SS wgmma) against the
# register path in the same call; its ring depth; exactness through the fused index.
# Run as: timeout 570 bench/h200_v20_tma.sh; (cd $OUT && tar czf logs.tgz *.log)
source "$(dirname "$0")/steps.sh"
IS=(--kind index_scoring --config glm5 --rows 2,4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 120 python3 -m tools.time_layers "${IS[@]}"
step sc_tma2 120 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.tma_keys=1
step sc_tma4 120 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.tma_keys=1 \
    --tune ix_score.tma_slots=4
step topk_tma 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W2 --backend cuda --tune ix_score.tma_keys=1
step ix_tma 100 python3 -m tools.time_layers --kind index --config glm5 --rows 2,8 \
    --pos 524287 --workload W1,W2 --backend cuda --reps 5 --tune ix_score.tma_keys=1
