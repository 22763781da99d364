#!/usr/bin/env bash
# v33 call 3 (session 29): sm_90a's new defaults (row_parts: the fold over the scoring's
# per-job first digits; ix_score share_pages and fixup_ballot) checked on the GPU and timed
# at every row width against v32's defaults (all three off) in the same call. GPU_TESTS=0
# leaves the GPU tests out.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
OLD=launch.row_parts=0,ix_score.share_pages=0,ix_score.fixup_ballot=0
[ "${GPU_TESTS:-1}" = 1 ] && step gpu_tests 150 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_front.py \
    test/test_proofs_gpu.py test/test_stages.py test/test_workloads.py test/test_pdl.py test/test_bulk.py
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
step check_index 70 python3 -m tools.check_layer --kind index --config glm5 --rows 8 \
    --backend cuda --dump "$OUT/digests"
IX=(--kind index --config glm5 --rows 2,4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_new 100 python3 -m tools.time_layers "${IX[@]}"
step ix_old 100 python3 -m tools.time_layers "${IX[@]}" --tune "$OLD"
# (the device returns 8 files: the logs come back as one archive)
rm -rf "$OUT/digests"
tar czf /tmp/v33-call3-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v33-call3-logs.tgz "$OUT"/
