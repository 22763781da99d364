#!/usr/bin/env bash
# v43 (session 35): the group skip is the sm_90a fused index default now (v40-v42: B/A
# 0.987-0.993 W1, 0.979-0.994 W2); new, the one-pair chains' maxima a chain behind
# (ix_score.defer_narrow_gmax, on by default: W2's groups of one pair kept four dependent
# swaps after the butterfly, its score tail +2.5 us with the skip against W1's +1.5).
# (1) the narrow deferral's A/B on W2 (B = without it), (2) top-k exact with the new
# defaults, (3) the defaults against launch.group_max=0 (the scan of every group) on W1 / W2.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v43
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
OUT=$LOGS step vs_narrow 130 $TL --workload W2 --reps 5 --versus ix_score.defer_narrow_gmax=0 \
    --rounds 3; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1,W2 --backend cuda; pack
OUT=$LOGS step vs_off 170 $TL --workload W1,W2 --reps 5 --versus launch.group_max=0 \
    --rounds 2; pack
rm -rf "$LOGS"
