#!/usr/bin/env bash
# v31 call 4 (session 27, an H100): the fused index's new defaults on NVIDIA (refined first
# digits folded into sel_h1: stages.index.FINE_DIGITS_ON_NVIDIA) checked and timed at every
# row width against the old defaults (launch.fine_digits=0) in the same call; the GPU tests;
# one radix plan more with the refined digits (a 10-bit second digit). GPU_TESTS=0 and D10=0
# leave those out (a short call: ~5 min).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
[ "${GPU_TESTS:-1}" = 1 ] && step gpu_tests 150 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_front.py \
    test/test_proofs_gpu.py test/test_stages.py test/test_workloads.py test/test_pdl.py test/test_bulk.py
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
step check_index 120 python3 -m tools.check_layer --kind index --config glm5 --rows 2,4,8 \
    --backend cuda --dump "$OUT/digests"
IX=(--kind index --config glm5 --rows 2,4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_new 100 python3 -m tools.time_layers "${IX[@]}"
step ix_old 100 python3 -m tools.time_layers "${IX[@]}" --tune launch.fine_digits=0
[ "${D10:-1}" = 1 ] && step ix_r8_d10 50 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1,W2 --backend cuda --reps 5 --tune launch.select_digits=6-10-6-6
# (the device returns 8 files: the logs come back as one archive)
rm -rf "$OUT/digests"
tar czf /tmp/v31-call4-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v31-call4-logs.tgz "$OUT"/
