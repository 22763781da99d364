#!/usr/bin/env bash
# v30 (prepared while the device was paused, session 26): refined first digits
# (SelectConfig.fine_digits, --tune launch.fine_digits=1: the scoring also counts the top 10
# bits of every score per (job, row) into score_fine; sel_h1 refines the 6-bit first digit
# by the 16 sub-bins of its threshold bin, so the indexer's crowded rows list at once
# instead of after a second scan). Exact top-k first (fused index W1 / W2, the select_hist
# kind on every distribution), then the fused index r8 / r2 and index_scoring r8 (the
# scoring's extra count) against the default in the same call, twice; the r8 W1 timelines.
# The first calls of a lent session (bench/NOTES.md v30 says why), in two device calls:
# PART=1 (exactness, the fused index) then PART=2 (the fused index r8 with the fold too, the
# scoring alone, select_hist, timelines, and v29's share_pages / lean_spans in short).
source "$(dirname "$0")/steps.sh"
PART=${PART:-1}
TAIL=${TAIL:-8}
FINE=(--tune launch.fine_digits=1)
if [ "$PART" = 1 ]; then
step topk_fine_index 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 2,8 --workload W1,W2 --backend cuda "${FINE[@]}"
step topk_fine_sel 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 \
    --rows 2,8 --backend cuda --first-digits buffer "${FINE[@]}"
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fine 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}"
step ix2 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fine2 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}"
else
IX8=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix8_fine_fold 60 python3 -m tools.time_layers "${IX8[@]}" "${FINE[@]}" \
    --tune launch.fold_first_digits=1
SCO=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sco 50 python3 -m tools.time_layers "${SCO[@]}"
step sco_fine 50 python3 -m tools.time_layers "${SCO[@]}" "${FINE[@]}"
SC=(--kind select_hist --config glm5 --rows 8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fine 40 python3 -m tools.time_layers "${SC[@]}" "${FINE[@]}"
TL=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1 --backend cuda --reps 3 --timeline)
step timeline 60 python3 -m tools.time_layers "${TL[@]}"
step timeline_fine 60 python3 -m tools.time_layers "${TL[@]}" "${FINE[@]}"
# v29's two prepared options, short (their own scripts are the full A/Bs): exact first
step topk_share 60 python3 -m tools.check_topk --through index --config glm5 --pos 524287 \
    --rows 8 --workload W1,W2 --backend cuda --tune ix_score.share_pages=1
step sco_share 50 python3 -m tools.time_layers "${SCO[@]}" --tune ix_score.share_pages=1
step topk_spans 60 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --first-digits buffer --tune launch.lean_spans=1
step sel_spans 40 python3 -m tools.time_layers "${SC[@]}" --tune launch.lean_spans=1
fi
