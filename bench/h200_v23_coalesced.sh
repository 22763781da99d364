#!/usr/bin/env bash
# v23 call 3: the lean scan's loads coalesced (lean_coalesced: whole 16-byte pieces side by
# side, a lane's consecutive keys through the LDS staging). Exactness first, then A/B in the
# same call. Run as: timeout 570 bash bench/h200_v23_coalesced.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
C1=sel_h1.lean_coalesced=1
C12=sel_h1.lean_coalesced=1,sel_h2.lean_coalesced=1
step topk_co 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $C12,sel_h1.lean_early_loads=1
step topk_co_index 150 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune $C12
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_co 60 python3 -m tools.time_layers "${SC[@]}" --tune $C1
step sel_co_eloads 60 python3 -m tools.time_layers "${SC[@]}" --tune $C1,sel_h1.lean_early_loads=1
step sel_co_ahead2 60 python3 -m tools.time_layers "${SC[@]}" --tune $C1,sel_h1.lean_prefetch_ahead=2
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step sel_co2 60 python3 -m tools.time_layers "${SC[@]}" --tune $C1
step ix_default 60 python3 -m tools.time_layers "${IX[@]}"
step ix_co 60 python3 -m tools.time_layers "${IX[@]}" --tune $C12
step tl_default 40 python3 -m tools.time_layers "${TL[@]}"
step tl_co 40 python3 -m tools.time_layers "${TL[@]}" --tune $C1
