#!/usr/bin/env bash
# v42 (session 35): the group skip with its maxima as upper bounds (a row's last group takes
# the scores past its bound: no per-score select; fused r8 loop 501 -> 483 SASS instructions,
# static stalls 1394 -> 1338; the defaults' loop 441 / 1271). v41 on an H200 measured the
# earlier form: B/A 0.993 (W1) / 0.979 (W2), the score tail +2.8 us. (1) top-k exact,
# (2) the A/B on W1 and W2 with three rounds, (3) W1's timeline (the score tail, sel_h1).
# Adopt (sm_90a fused index default) if (2) is below 0.99 on both.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v42
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
G=launch.lean_spans=1,launch.group_max=1
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1,W2 --backend cuda --tune $G; pack
OUT=$LOGS step vs_groups 260 $TL --workload W1,W2 --reps 5 --versus $G --rounds 3; pack
OUT=$LOGS step tl_w1 45 $TL --workload W1 --reps 3 --timeline --tune $G \
    --jobs-csv "$LOGS/groups_w1.csv"; pack
rm -rf "$LOGS"
