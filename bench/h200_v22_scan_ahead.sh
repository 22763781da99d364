#!/usr/bin/env bash
# v22 call 1: the passes over the scores with their loads two or three iterations ahead
# (SelectPass.scan_ahead). Static SASS (sm_90a, glm5 r8): sel_h1's listing loop issues its
# next iteration's loads at the loop top already; sel_h2's re-scan of a deferred row (the
# fused index's crowded rows) has them sunk by ptxas to just before the iteration's CTA
# barrier, so their latency is exposed each iteration; with scan_ahead=2 they are consumed
# an iteration later. Exactness first (check_topk on the GPU with the tunes), then A/Bs in
# the same call. Run as: timeout 570 bash bench/h200_v22_scan_ahead.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-7}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
A2=sel_h1.scan_ahead=2,sel_h2.scan_ahead=2
step topk_a2 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --tune $A2
step topk_index_a2 120 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune $A2
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_h1a2 60 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.scan_ahead=2
step sel_h1a3 60 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.scan_ahead=3
step sel_h1a2w16 60 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.scan_ahead=2,launch.waves=16
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step ix_default 90 python3 -m tools.time_layers "${IX[@]}"
step ix_h2a2 90 python3 -m tools.time_layers "${IX[@]}" --tune sel_h2.scan_ahead=2
step ix_a2 90 python3 -m tools.time_layers "${IX[@]}" --tune $A2
step ix_default2 90 python3 -m tools.time_layers "${IX[@]}"
step tl_default 60 python3 -m tools.time_layers "${TL[@]}"
step tl_h1a2 60 python3 -m tools.time_layers "${TL[@]}" --tune sel_h1.scan_ahead=2
