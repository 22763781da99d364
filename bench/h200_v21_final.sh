#!/usr/bin/env bash
# H200 call (v21, final tree): the GPU test suite, check_layer of front / index, and the
# front's timeline with the v21 defaults.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
step gpu_tests 330 python3 -m pytest -q -p no:cacheprovider -m gpu test/test_proofs_gpu.py \
    test/test_cuda_run.py test/test_bulk.py test/test_stages.py test/test_workloads.py \
    test/test_front.py test/test_pdl.py test/test_tma.py
step check_index 120 python3 -m tools.check_layer --kind index --config glm5 --rows 2,8 --kv fp8 --backend cuda --dump $OUT/ci
TAIL=8
step f_timeline 60 python3 -m tools.time_layers --kind front --config glm5 --rows 2,8 --backend cuda --reps 5 --timeline
