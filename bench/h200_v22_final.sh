#!/usr/bin/env bash
# H200 call (v22, final tree, the lean listing loop on by default): the GPU test suite,
# exact top-k of the select kinds and through index, check_layer of index, and one more
# same-call A/B of the new default against the old loop.
# Run as: timeout 570 bash bench/h200_v22_final.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
OLD=sel_h1.lean_scan=0,sel_h2.lean_scan=0
step gpu_tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu test/test_proofs_gpu.py \
    test/test_cuda_run.py test/test_bulk.py test/test_stages.py test/test_workloads.py \
    test/test_front.py test/test_pdl.py test/test_tma.py
step topk_hist 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer
step topk_index 120 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
step check_index 90 python3 -m tools.check_layer --kind index --config glm5 --rows 2,8 \
    --kv fp8 --backend cuda --dump $OUT/ci
TAIL=3
SC=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sel_new 30 python3 -m tools.time_layers "${SC[@]}"
step sel_old 30 python3 -m tools.time_layers "${SC[@]}" --tune $OLD
step ix_new 70 python3 -m tools.time_layers "${IX[@]}"
step ix_old 70 python3 -m tools.time_layers "${IX[@]}" --tune $OLD
