#!/usr/bin/env bash
# One short H200 call (~4 min): SelectConfig.early_emit against sel_out emitting every row, in
# one process each: select_hist 512K / 64K x 8 (the last histogram pass is sel_h3 with the
# select kinds' (6, 9, 9, 8)), its exactness at 512K x 8, then the fused index at 512K x 8
# (its plan (6, 7, 7, 6, 6): sel_h4).
#   run:  bash bench/h200_early_emit.sh   (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-5}
SC=(--kind select_hist --config glm5 --rows 8 --pos 65535,524287 --backend cuda --reps 5)
step sel_base 60 python3 -m tools.time_layers "${SC[@]}"
step sel_off 60 python3 -m tools.time_layers "${SC[@]}" --tune sel_h3.early_emit=0
step topk 60 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 --backend cuda
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_base 70 python3 -m tools.time_layers "${IX[@]}"
step index_off 70 python3 -m tools.time_layers "${IX[@]}" --tune sel_h4.early_emit=0
