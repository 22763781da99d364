#!/usr/bin/env bash
# One H200 call (~6 min): what sel_h1's time is made of (bench/select_probes.py: the key pass
# with its digit counts, its list stores, its whole list, or both removed; timing only,
# outputs wrong by design) on select_hist 512K x 8 with DIGITS; then the fused index at 512K
# (rows 2, 8; W1, W2) with the default radix plan and with DIGITS in the same call, and
# DIGITS' exactness end to end (check_topk --through index).
#   run:  DIGITS=6-9-9-8 bash bench/h200_select_probes.sh   (on the device machine)
source "$(dirname "$0")/steps.sh"
DIGITS=${DIGITS:-6-9-9-8}
TAIL=8
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline
    --tune "launch.select_digits=$DIGITS")
for p in none no_count no_store no_append bare; do
    step "probe_$p" 90 python3 bench/select_probes.py "$p" "${TL[@]}"
done
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_base 150 python3 -m tools.time_layers "${IX[@]}"
step index_digits 150 python3 -m tools.time_layers "${IX[@]}" --tune "launch.select_digits=$DIGITS"
step topk_index_digits 150 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda --tune "launch.select_digits=$DIGITS"
