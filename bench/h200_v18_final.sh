#!/usr/bin/env bash
# v18's final tree on the H200, by priority (seven logs): the GPU tests; exactness with the new
# defaults (first digits from a buffer: sel_h0's segment sums, rows 2's (6,8,9,9) plan);
# select_hist re-timed and against launch.lean_lists=1 in the same call, and the latter's
# exactness; the fused index re-timed and its exactness.
source "$(dirname "$0")/steps.sh"
step gpu_tests 150 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_stages.py \
    test/test_workloads.py test/test_proofs_gpu.py test/test_front.py test/test_bulk.py \
    test/test_pdl.py
TK=(--config glm5 --pos 65535,524287 --rows 2,8 --backend cuda --first-digits buffer)
step topk 100 python3 -m tools.check_topk "${TK[@]}"
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
step select_hist 80 python3 -m tools.time_layers "${SC[@]}"
step select_hist_lean 80 python3 -m tools.time_layers "${SC[@]}" --tune launch.lean_lists=1
step topk_lean 100 python3 -m tools.check_topk "${TK[@]}" --tune launch.lean_lists=1
step index 100 python3 -m tools.time_layers --kind index --config glm5 --rows 2,8 --pos 524287 \
    --workload W1,W2 --backend cuda --reps 5
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
