#!/usr/bin/env bash
# v19 call 6: the new async copies on the H200 (the async_ring GPU case), then the scoring's
# one-pair chains with their keys through the async LDS ring (ix_score.async_keys) against
# the default in the same call, and their top-k through index.
source "$(dirname "$0")/steps.sh"
step gpu_async 60 python3 -m pytest -q test/test_cuda_run.py test/test_nvptx.py -k "async"
IS=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 80 python3 -m tools.time_layers "${IS[@]}"
step sc_async 80 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.async_keys=1
step topk_async 80 python3 -m tools.check_topk --through index --config glm5 --pos 524287 \
    --rows 4,8 --workload W2 --backend cuda --tune ix_score.async_keys=1
cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log
