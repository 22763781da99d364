#!/usr/bin/env bash
# v19 call 2: what the first call's Nsight Compute profiles pointed at, each against the
# default in the same call. sel_h1's scan loop (630 SASS instructions, 10 KB) stalled on
# instruction fetch (no_inst 34% of its samples): scan_unroll 2 / 1 halve / quarter it. The
# scoring's one-pair loop (W2 at rows 8) stalled on its block-table entries and its key
# ring: narrow_prefetch, narrow_depth 3. Then the new selection setting's exactness and its
# profile.
source "$(dirname "$0")/steps.sh"
SH=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
step sel_default 90 python3 -m tools.time_layers "${SH[@]}"
step sel_su2 90 python3 -m tools.time_layers "${SH[@]}" --tune sel_h1.scan_unroll=2
step sel_su1 90 python3 -m tools.time_layers "${SH[@]}" --tune sel_h1.scan_unroll=1
IS=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 90 python3 -m tools.time_layers "${IS[@]}"
step sc_np 90 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.narrow_prefetch=1
step sc_nd3 90 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.narrow_depth=3
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_default 100 python3 -m tools.time_layers "${IX[@]}"
step ix_su2 100 python3 -m tools.time_layers "${IX[@]}" --tune sel_h1.scan_unroll=2 --tune sel_h2.scan_unroll=2
step topk_su2 100 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --first-digits buffer --tune sel_h1.scan_unroll=2
cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log
