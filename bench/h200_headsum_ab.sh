#!/usr/bin/env bash
# One H200 call for the bf16 head sum on the tensor cores (IndexScore.head_sum "mma",
# bench/NOTES.md v11; ~7 min): the two new GPU cases (relu_bf16x2, the e4m3 -> relu bf16 ->
# bf16 wgmma chain) against the interpreter; index_scoring at 512K keys, rows 2 / 4 / 8, W1 /
# W2, with FMA head sums (default), the mma head sum, and the mma head sum at 16 warps with
# the pairs split, in the same call; the fused index at rows 8 (fma vs mma); top-k exact end
# to end through the mma build; its cycle accounts. Logs under $OUT.
#   run:  bash bench/h200_headsum_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
MMA=ix_score.head_sum=mma
SPLIT=launch.waves=16,ix_score.split_pairs=1,ix_score.depth=1,$MMA
TAIL=10
SC=(--config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step gpu_cases 120 python3 -m pytest -q -p no:cacheprovider test/test_cuda_run.py -k "relu"
step scoring_fma 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}"
step scoring_mma 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}" --tune "$MMA"
step scoring_mma_split 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}" --tune "$SPLIT"
step index_mma 90 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}" --tune "$MMA"
step topk_mma 90 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda --tune "$MMA"
TAIL=14
step mma_cycles 60 python3 -m tools.time_layers --kind index_scoring --rows 8 --config glm5 \
    --pos 524287 --workload W1 --backend cuda --reps 3 --timeline --tune "$MMA"
