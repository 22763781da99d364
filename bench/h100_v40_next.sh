#!/usr/bin/env bash
# v40 (prepared in session 33, reordered in 34 for the one call a scarce machine allows): what
# v39 built and could not time, on the fused index r8 at 512K, the most valuable first (a
# call is cut at 600 s; logs are packed after every step). (1) The group skip ($G: the
# scoring writes each row's 16-key group maxima, sel_h1 lists only the groups whose maximum
# reaches its threshold) with sel_h1.lean_any_special ($S) exact, then the skip against the
# defaults (the adoption question), then $S on top of it (hot path 238 -> 212 SASS
# instructions), then their timeline (with the critical path time_layers prints).
# STEPS=3: lean_spans alone against the defaults, and the defaults' timeline.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v40
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
TOPK="python3 -m tools.check_topk --through index --config glm5 --pos 524287 --rows 8
      --workload W1,W2 --backend cuda"
G=launch.lean_spans=1,launch.group_max=1
S=sel_h1.lean_any_special=1
if [ "${STEPS:-12}" != 3 ]; then
OUT=$LOGS step topk_groups 60 $TOPK --tune $G,$S; pack
OUT=$LOGS step vs_groups 200 $TL --workload W1,W2 --reps 5 --versus $G --rounds 2; pack
OUT=$LOGS step vs_special 200 $TL --workload W1,W2 --reps 5 --tune $G --versus $S --rounds 2
pack
OUT=$LOGS step tl_groups 45 $TL --workload W1 --reps 3 --timeline --tune $G,$S \
    --jobs-csv "$LOGS/groups.csv"; pack
else
OUT=$LOGS step vs_spans 200 $TL --workload W1,W2 --reps 5 --versus launch.lean_spans=1 \
    --rounds 2; pack
OUT=$LOGS step tl 45 $TL --workload W1 --reps 3 --timeline --jobs-csv "$LOGS/default.csv"; pack
fi
rm -rf "$LOGS"
