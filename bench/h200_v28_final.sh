#!/usr/bin/env bash
# v28 call 4 (final tree: select_hist folds the first digit into sel_h1 on sm_90a, bands of
# FOLD_BAND_BINS = 32): the GPU tests, exact top-k (select_hist rows 2 / 4 / 8, the select
# kind rows 4, through index), the figures and the same-call A/B against sel_h0's round
# (--tune launch.fold_first_digits=0).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
step gpu_tests 200 python3 -m pytest -q -p no:cacheprovider -m gpu test/test_proofs_gpu.py \
    test/test_cuda_run.py test/test_bulk.py test/test_stages.py test/test_workloads.py \
    test/test_front.py test/test_pdl.py test/test_tma.py
step topk_hist 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer
step topk_local 40 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 4 \
    --backend cuda
step topk_index 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1 --backend cuda
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_h0 40 python3 -m tools.time_layers "${SC[@]}" --tune launch.fold_first_digits=0
step sel2 40 python3 -m tools.time_layers "${SC[@]}"
