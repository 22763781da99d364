#!/usr/bin/env bash
# H200 call for two pages a step in the scoring's narrow (one-pair) chains
# (IndexScore.pages_per_step = 2, bench/NOTES.md v11; ~5 min): index_scoring rows 2 / 4 / 8
# and the fused index at rows 8, W1 / W2 at 512K keys, a page a step (default) vs two, in
# the same call; the default build's cycle accounts on W2 (where the narrow chains run).
#   run:  bash bench/h200_twopage_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TWO=ix_score.pages_per_step=2
TAIL=10
SC=(--config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step scoring_one 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}"
step scoring_two 150 python3 -m tools.time_layers --kind index_scoring --rows 2,4,8 "${SC[@]}" --tune "$TWO"
step index_one 80 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}"
step index_two 80 python3 -m tools.time_layers --kind index --rows 8 "${SC[@]}" --tune "$TWO"
TAIL=14
step w2_cycles 60 python3 -m tools.time_layers --kind index_scoring --rows 8 --config glm5 \
    --pos 524287 --workload W2 --backend cuda --reps 3 --timeline
