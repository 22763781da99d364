#!/usr/bin/env bash
# v29 call 1 (prepared while the device was paused, sessions 23-25): the lean scan listing by spans
# (SelectConfig.lean_spans, --tune launch.lean_spans=1: each wave lists its own contiguous
# span into scratch with no per-iteration exchange or barrier, then one barrier and a gather
# into the list) against the default in the same call; then the zero-code sel_h1 tunables
# never timed with the fold (segment_unroll 16, lean_prefetch_early, lean_early_loads,
# fold_bins 16). Exact top-k first (a failing step stops nothing: read its log).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
SPANS=(--tune launch.lean_spans=1)
step topk_spans 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer "${SPANS[@]}"
step topk_spans_index 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1,W2 --backend cuda "${SPANS[@]}"
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_spans 40 python3 -m tools.time_layers "${SC[@]}" "${SPANS[@]}"
step sel2 40 python3 -m tools.time_layers "${SC[@]}"
step sel_spans2 40 python3 -m tools.time_layers "${SC[@]}" "${SPANS[@]}"
step sel_unroll16 40 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.segment_unroll=16
step sel_prefetch_early 40 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_prefetch_early=1
step sel_early_loads 40 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.lean_early_loads=1
step sel_fold16 40 python3 -m tools.time_layers "${SC[@]}" --tune sel_h1.fold_bins=16
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step timeline 60 python3 -m tools.time_layers "${TL[@]}"
step timeline_spans 60 python3 -m tools.time_layers "${TL[@]}" "${SPANS[@]}"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix 80 python3 -m tools.time_layers "${IX[@]}"
step ix_spans 80 python3 -m tools.time_layers "${IX[@]}" "${SPANS[@]}"
