#!/usr/bin/env bash
# v23 call 1: the lean scan's loads from the L2 (line prefetches ahead in the loop, the whole
# slice's lines before the wait for message 0, its first loads before that wait) and, for
# reference, v13's sel_h0 bulk prefetch with the lean loop. Exactness first, then A/B in the
# same call (default twice). Run as: timeout 570 bash bench/h200_v23_prefetch.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-5}
SC=(--kind select_hist --config glm5 --rows 8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
ALL=sel_h1.lean_prefetch_early=1,sel_h1.lean_early_loads=1,sel_h1.lean_prefetch_ahead=2,sel_h2.lean_prefetch_ahead=2
step topk_all 120 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune $ALL
step sel_default 45 python3 -m tools.time_layers "${SC[@]}"
step sel_ahead2 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_prefetch_ahead=2
step sel_ahead4 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_prefetch_ahead=4
step sel_early 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_prefetch_early=1
step sel_eloads 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_early_loads=1
step sel_early_eloads 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_prefetch_early=1,sel_h1.lean_early_loads=1
step sel_all 45 python3 -m tools.time_layers "${SC[@]}" --tune $ALL
step sel_h0pf 45 python3 -m tools.time_layers "${SC[@]}" --tune sel_h0.l2_prefetch=1
step sel_default2 45 python3 -m tools.time_layers "${SC[@]}"
step tl_default 40 python3 -m tools.time_layers "${TL[@]}"
step tl_early_eloads 40 python3 -m tools.time_layers "${TL[@]}" --tune sel_h1.lean_prefetch_early=1,sel_h1.lean_early_loads=1
step tl_h0pf 40 python3 -m tools.time_layers "${TL[@]}" --tune sel_h0.l2_prefetch=1
