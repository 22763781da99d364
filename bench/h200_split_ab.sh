#!/usr/bin/env bash
# One H200 call for the 16-warp scoring prepared in v10 (~6 min): index_scoring at 512K keys,
# rows 2 / 4 / 8, W1 / W2, and the fused index at rows 8, each with the default CTA (8 warps)
# and with 16 warps whose warpgroup pairs split each page's row pairs (N = 128 chains, a
# one-step key ring: what fits 128 registers), in the same call; then the split build's
# top-k end to end and its cycle accounts (bench/NOTES.md v10). Logs under $OUT.
#   run:  bash bench/h200_split_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
SPLIT=launch.waves=16,ix_score.split_pairs=1,ix_score.depth=1
TAIL=10
SC=(--config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step scoring_base 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}"
step scoring_split 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}" --tune "$SPLIT"
step index_split 90 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}" --tune "$SPLIT"
step topk_split 90 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda --tune "$SPLIT"
TAIL=14
step split_cycles 60 python3 -m tools.time_layers --kind index_scoring --rows 8 --config glm5 \
    --pos 524287 --workload W1 --backend cuda --reps 3 --timeline --tune "$SPLIT"
