#!/usr/bin/env bash
# v22 call 2: sel_h1's lean scan (SelectConfig.lean_scan: the slice copied into LDS by
# per-lane async copies issued before the wait for message 0, and listed by the lean loop:
# one float compare a key, 16-bit keep masks, one lane scan an iteration, stores for kept
# keys only). Static (sm_90a glm5 r8 select_hist): the listing loop 633 -> ~160 SASS
# instructions an iteration on its hot path (+ a store round a kept key of the busiest
# lane), 246 registers, no spill, LDS 11.8 -> 140 KB. Exactness first, then A/B in the
# same call (default twice). Run as: timeout 570 bash bench/h200_v22_lean.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-7}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
S0=(--kind select --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
LEAN=sel_h1.lean_scan=1
step topk_lean_hist 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 \
    --rows 2,8 --backend cuda --first-digits buffer --tune $LEAN
step topk_lean_local 150 python3 -m tools.check_topk --config glm5 --pos 524287 \
    --rows 8 --backend cuda --tune $LEAN
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_lean 60 python3 -m tools.time_layers "${SC[@]}" --tune $LEAN
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step sel_lean2 60 python3 -m tools.time_layers "${SC[@]}" --tune $LEAN
step select_default 40 python3 -m tools.time_layers "${S0[@]}"
step select_lean 40 python3 -m tools.time_layers "${S0[@]}" --tune $LEAN
step tl_default 40 python3 -m tools.time_layers "${TL[@]}"
step tl_lean 40 python3 -m tools.time_layers "${TL[@]}" --tune $LEAN
