#!/usr/bin/env bash
# v19's final tree (the one-pair chains' block-table prefetch on by default): the GPU tests,
# top-k through index exact, the scoring and the fused index re-timed at rows 2 / 4 / 8.
source "$(dirname "$0")/steps.sh"
step gpu_tests 170 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_stages.py \
    test/test_workloads.py test/test_proofs_gpu.py test/test_front.py test/test_bulk.py \
    test/test_pdl.py
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
step scoring 120 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 2,4,8 \
    --pos 131071,524287 --workload W1,W2 --backend cuda --reps 5
step index 100 python3 -m tools.time_layers --kind index --config glm5 --rows 2,8 \
    --pos 524287 --workload W1,W2 --backend cuda --reps 5
cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log
