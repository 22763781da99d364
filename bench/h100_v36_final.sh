#!/usr/bin/env bash
# v36 final call (session 30): sm_90a's new defaults (cached_new_keys, v35; the q heads'
# partial sums in one round, q_splits 4 on 132 CTAs, v36) checked on the GPU, and the one-round
# split timed at rows 2 / 4 and in index_scoring against the two-round one (q_splits=8) in one
# process; a timeline of the fused index r8 W1 with them.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
OLD=launch.q_splits=8
step gpu_tests 120 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_front.py \
    test/test_proofs_gpu.py test/test_stages.py test/test_workloads.py test/test_pdl.py test/test_bulk.py
step topk_index 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
step check_index 60 python3 -m tools.check_layer --kind index --config glm5 --rows 8 \
    --backend cuda --dump "$OUT/digests"
step ix24_q8 130 python3 -m tools.time_layers --kind index --config glm5 --rows 2,4 --pos 524287 \
    --workload W1,W2 --backend cuda --reps 5 --versus "$OLD" --rounds 1
step sco_q8 70 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 8 \
    --pos 524287 --workload W1,W2 --backend cuda --reps 5 --versus "$OLD" --rounds 1
step tl_w1 45 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1 --backend cuda --reps 3 --timeline --jobs-csv "$OUT/ix_w1.csv"
# (the device returns 8 files: the logs come back as one archive)
rm -rf "$OUT/digests"
tar czf /tmp/v36-final-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v36-final-logs.tgz "$OUT"/
