#!/usr/bin/env bash
# v18's final tree on the H200: the GPU tests, select_hist and the fused index re-timed with
# the new defaults, exactness (first digits from a buffer: sel_h0's segment sums; through
# index).
source "$(dirname "$0")/steps.sh"
step gpu_tests 200 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_stages.py \
    test/test_workloads.py test/test_proofs_gpu.py test/test_front.py test/test_bulk.py \
    test/test_pdl.py
step select_hist 100 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 2,8 \
    --pos 65535,524287 --backend cuda --reps 5
step topk 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer
step index 120 python3 -m tools.time_layers --kind index --config glm5 --rows 2,8 --pos 524287 \
    --workload W1,W2 --backend cuda --reps 5
step topk_index 120 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
