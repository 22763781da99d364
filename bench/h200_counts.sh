#!/usr/bin/env bash
# One H200 call (~6 min): SelectConfig.count_values (the digit counts as unmasked LDS atomics
# adding the candidate flag, the default) against masked adds of 1 (--tune
# sel_hN.count_values=0), in one process each: select (its sel_h0 counts every key) and
# select_hist at 64K / 512K keys, rows 2 and 8, the rows-8 512K timeline of select both ways,
# the default's exactness (check_topk, every distribution), then the fused index (512K, rows
# 2 and 8, W1 and W2; its deferred rows count in sel_h1's scan) both ways and its top-k.
#   run:  bash bench/h200_counts.sh   (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
off() { local IFS=,; local out=(); for q in "$@"; do out+=("sel_h$q.count_values=0"); done; echo "${out[*]}"; }
OFF_SEL=$(off 0 1 2 3)      # the select kinds' plan (6, 9, 9, 8): sel_h0..sel_h3
OFF_IX=$(off 0 1 2 3 4)     # the fused index's (6, 7, 7, 6, 6): sel_h0..sel_h4
SC=(--kind select,select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step sel_new 150 python3 -m tools.time_layers "${SC[@]}"
step sel_old 150 python3 -m tools.time_layers "${SC[@]}" --tune "$OFF_SEL"
step sel_tl_new 90 python3 -m tools.time_layers "${TL[@]}"
step sel_tl_old 90 python3 -m tools.time_layers "${TL[@]}" --tune "$OFF_SEL"
step topk 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 --backend cuda
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_new 150 python3 -m tools.time_layers "${IX[@]}"
step ix_old 150 python3 -m tools.time_layers "${IX[@]}" --tune "$OFF_IX"
step topk_ix 120 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda
