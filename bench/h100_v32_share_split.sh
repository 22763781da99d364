#!/usr/bin/env bash
# v32 call 4 (session 28, an H100): share_pages with the split weighing the chains
# (stages/index_share.py: STEP_FIXED / STEP_PAIR / RUN_TAIL_COST; call 3 found job 0, holding
# the 4 runs' own one-pair segments and fix-ups, 82 us against the others' 57). Exact top-k
# through index with it, then index_scoring rows 4 / 8 and the fused index rows 8, W1 and W2,
# against the default in the same call (interleaved, twice), and the W2 timeline with it.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
SHARE=(--tune ix_score.share_pages=1)
step topk_share 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 4,8 --workload W1,W2 --backend cuda "${SHARE[@]}"
SCO=(--kind index_scoring --config glm5 --rows 4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sco 60 python3 -m tools.time_layers "${SCO[@]}"
step sco_share 60 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
step ix 50 python3 -m tools.time_layers "${IX[@]}"
step ix_share 50 python3 -m tools.time_layers "${IX[@]}" "${SHARE[@]}"
step sco_share2 60 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
step sco2 60 python3 -m tools.time_layers "${SCO[@]}"
step ix_share2 50 python3 -m tools.time_layers "${IX[@]}" "${SHARE[@]}"
step ix2 50 python3 -m tools.time_layers "${IX[@]}"
step tl_share 40 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 8 --pos 524287 \
    --workload W2 --backend cuda --reps 3 --timeline --jobs-csv "$OUT/tl_share.csv" "${SHARE[@]}"
tar czf /tmp/v32-call4-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v32-call4-logs.tgz "$OUT"/
