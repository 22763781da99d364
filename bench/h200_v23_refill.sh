#!/usr/bin/env bash
# v23 call 4: the lean scan's loads refilled where the keys die (lean_refill 1 / 2: no ring
# copies waiting on the loads). Exactness first, then A/B in the same call.
# Run as: timeout 570 bash bench/h200_v23_refill.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
R2=sel_h1.lean_refill=2
R2B=sel_h1.lean_refill=2,sel_h2.lean_refill=2
step topk_r2 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $R2B,sel_h1.lean_coalesced=1
step topk_r2_index 150 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune $R2B
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_r1 60 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_refill=1
step sel_r2 60 python3 -m tools.time_layers "${SC[@]}" --tune $R2
step sel_r2_co 60 python3 -m tools.time_layers "${SC[@]}" --tune $R2,sel_h1.lean_coalesced=1
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step sel_r2b 60 python3 -m tools.time_layers "${SC[@]}" --tune $R2
step ix_default 60 python3 -m tools.time_layers "${IX[@]}"
step ix_r2 60 python3 -m tools.time_layers "${IX[@]}" --tune $R2B
step tl_default 40 python3 -m tools.time_layers "${TL[@]}"
step tl_r2 40 python3 -m tools.time_layers "${TL[@]}" --tune $R2
