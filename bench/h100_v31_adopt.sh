#!/usr/bin/env bash
# v31 call 3 (session 27, the lent card an H100): which of v29 / v30's prepared options the
# fused index adopts. Call 1-2 (bench/h200_v30_fine.sh PART=1/2 on an H100) measured refined
# first digits -4.4 .. -6.8 us at r8 (exact 8 of 8 through index, 44 of 44 select_hist),
# with the fold once more -2 us, and share_pages W2 -6.3 / W1 +3.5 us in index_scoring (one
# run each): here each against the default and each other in one call, twice where it decides.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-5}
FINE=(--tune launch.fine_digits=1)
FOLD=(--tune launch.fold_first_digits=1)
SHARE=(--tune ix_score.share_pages=1)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_base 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fine 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}"
step ix_fine_fold 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}" "${FOLD[@]}"
step ix_fine_fold_share 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}" "${FOLD[@]}" "${SHARE[@]}"
step ix_base2 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fine_fold2 80 python3 -m tools.time_layers "${IX[@]}" "${FINE[@]}" "${FOLD[@]}"
SCO=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sco 50 python3 -m tools.time_layers "${SCO[@]}"
step sco_share 50 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
step sco2 50 python3 -m tools.time_layers "${SCO[@]}"
step sco_share2 50 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
step topk_all 60 python3 -m tools.check_topk --through index --config glm5 --pos 65535,524287 \
    --rows 4,8 --workload W1,W2 --backend cuda "${FINE[@]}" "${FOLD[@]}" "${SHARE[@]}"
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v31-call3-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v31-call3-logs.tgz "$OUT"/
