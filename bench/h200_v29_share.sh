#!/usr/bin/env bash
# v29 call 2 (prepared while the device was paused, session 25): the indexer scoring the
# pages that requests share once, in one chain of all their rows (IndexScore.share_pages,
# stages/index_share.py, --tune ix_score.share_pages=1). Exact top-k through index on W2
# and W1 first, then index_scoring rows 2 / 4 / 8 and the fused index r8, W1 and W2,
# against the default in the same call (twice).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
SHARE=(--tune ix_score.share_pages=1)
step topk_share 80 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 4,8 --workload W1,W2 --backend cuda "${SHARE[@]}"
SCO=(--kind index_scoring --config glm5 --rows 2,4,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step sco 80 python3 -m tools.time_layers "${SCO[@]}"
step sco_share 80 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
step ix 80 python3 -m tools.time_layers "${IX[@]}"
step ix_share 80 python3 -m tools.time_layers "${IX[@]}" "${SHARE[@]}"
step sco2 80 python3 -m tools.time_layers "${SCO[@]}"
step sco_share2 80 python3 -m tools.time_layers "${SCO[@]}" "${SHARE[@]}"
