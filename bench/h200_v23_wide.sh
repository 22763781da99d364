#!/usr/bin/env bash
# v23 call 2: the lean scan with 32 keys a lane an iteration (lean_lane_keys=32: half the
# iterations' chains of ballots, barrier and count exchange). Exactness first, then A/B in
# the same call. Run as: timeout 570 bash bench/h200_v23_wide.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
W1=sel_h1.lean_lane_keys=32
W12=sel_h1.lean_lane_keys=32,sel_h2.lean_lane_keys=32
step topk_wide 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $W12
step topk_wide_index 150 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune $W12
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_wide 60 python3 -m tools.time_layers "${SC[@]}" --tune $W1
step sel_wide_ahead2 60 python3 -m tools.time_layers "${SC[@]}" --tune $W1,sel_h1.lean_prefetch_ahead=2
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step sel_wide2 60 python3 -m tools.time_layers "${SC[@]}" --tune $W1
step ix_default 60 python3 -m tools.time_layers "${IX[@]}"
step ix_wide 60 python3 -m tools.time_layers "${IX[@]}" --tune $W12
step tl_default 40 python3 -m tools.time_layers "${TL[@]}"
step tl_wide 40 python3 -m tools.time_layers "${TL[@]}" --tune $W1
