#!/usr/bin/env bash
# Second H200 call for the bf16 head sum (bench/NOTES.md v11; ~7 min): one-pair chains keep
# their FMAs on the bf16 values (W2's one-pair groups lost with the head-sum wgmma a pair),
# so index_scoring rows 2 / 4 / 8 and the fused index at rows 8, W1 / W2 at 512K keys, FMA
# vs mma head sums in the same call; top-k exact end to end through the mma build; then the
# GPU test files. Logs under $OUT.
#   run:  bash bench/h200_headsum_ab2.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
MMA=ix_score.head_sum=mma
TAIL=10
SC=(--config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step scoring_fma 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}"
step scoring_mma 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}" --tune "$MMA"
step index_fma 90 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}"
step index_mma 90 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}" --tune "$MMA"
step topk_mma 90 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,4,8 --workload W1,W2 --backend cuda --tune "$MMA"
TAIL=6
step gpu_tests 240 python3 -m pytest -q -p no:cacheprovider test/test_cuda_run.py \
    test/test_front.py test/test_proofs_gpu.py test/test_stages.py test/test_workloads.py
