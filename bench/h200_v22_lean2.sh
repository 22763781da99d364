#!/usr/bin/env bash
# v22 call 3: the lean listing loop from registers (SelectConfig.lean_scan without
# lean_copies, which call 2 measured slower): sel_h1's listing and sel_h2's re-listing of a
# deferred row. Static (sm_90a glm5 r8): select_hist 252 registers, no spill; the fused
# index 255 registers, 20 bytes of spills (default: 4). Exactness first, then A/B in the
# same call. Run as: timeout 570 bash bench/h200_v22_lean2.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-7}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
LEAN=sel_h1.lean_scan=1,sel_h2.lean_scan=1
step topk_lean_hist 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 \
    --rows 2,8 --backend cuda --first-digits buffer --tune $LEAN
step topk_index_lean 120 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune $LEAN
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_lean 60 python3 -m tools.time_layers "${SC[@]}" --tune $LEAN
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step sel_lean2 60 python3 -m tools.time_layers "${SC[@]}" --tune $LEAN
step tl_lean 40 python3 -m tools.time_layers "${TL[@]}" --tune $LEAN
step ix_default 90 python3 -m tools.time_layers "${IX[@]}"
step ix_lean 90 python3 -m tools.time_layers "${IX[@]}" --tune $LEAN
step ix_default2 90 python3 -m tools.time_layers "${IX[@]}"
step ix_lean2 90 python3 -m tools.time_layers "${IX[@]}" --tune $LEAN
