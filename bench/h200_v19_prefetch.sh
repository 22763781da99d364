#!/usr/bin/env bash
# v19 call 3: the block-table prefetch of the scoring's one-pair chains (W2's requests in a
# rows-4 / rows-8 build; call 2: -4% at r8 W2), 1 or DEPTH steps ahead, against every loop's
# prefetch (prefetch_pages: no spill in the rows-8 builds, the one-pair-only form spills 4
# bytes there), each against the default in the same call; then the fused index.
source "$(dirname "$0")/steps.sh"
IS=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sc_default 90 python3 -m tools.time_layers "${IS[@]}"
step sc_np1 90 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.narrow_prefetch=1
step sc_np2 90 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.narrow_prefetch=2
step sc_pp 90 python3 -m tools.time_layers "${IS[@]}" --tune ix_score.prefetch_pages=1
step sc_default2 90 python3 -m tools.time_layers "${IS[@]}"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_default 100 python3 -m tools.time_layers "${IX[@]}"
step ix_np2 100 python3 -m tools.time_layers "${IX[@]}" --tune ix_score.narrow_prefetch=2
step ix_pp 100 python3 -m tools.time_layers "${IX[@]}" --tune ix_score.prefetch_pages=1
cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log
