#!/usr/bin/env bash
# v25 call 2 (final tree: the stages' LDS overlaid by default on sm_90a): the GPU tests,
# exact top-k (select kinds, through index), check_layer of index, the figures, and one
# same-call pair against the stacked layout (--tune launch.lds_overlay=0).
# Run as: timeout 570 bash bench/h200_v25_final.sh; then tar the logs (one file back)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
step gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu test/test_proofs_gpu.py \
    test/test_cuda_run.py test/test_bulk.py test/test_stages.py test/test_workloads.py \
    test/test_front.py test/test_pdl.py test/test_tma.py
step topk_hist 80 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer
step topk_index 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
TAIL=3
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 3)
step ix_new 50 python3 -m tools.time_layers "${IX[@]}"
step ix_stacked 50 python3 -m tools.time_layers "${IX[@]}" --tune launch.lds_overlay=0
step sel 30 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 2,8 \
    --pos 65535,524287 --backend cuda --reps 5
step front 40 python3 -m tools.time_layers --kind front --config glm5 --rows 2,4,8 \
    --backend cuda --reps 5
