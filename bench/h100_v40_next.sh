#!/usr/bin/env bash
# v40 (next session, prepared in session 33): what v39 built and could not time, on the fused
# index r8 at 512K, the most valuable first (a call is cut at 600 s; logs are packed after
# every step). (1) The group skip (launch.group_max with lean_spans: the scoring writes each
# row's 16-key group maxima, sel_h1 lists only the groups whose maximum reaches its
# threshold) exact, then A/B against the defaults (the adoption question; (2) splits it), then its timeline (with the critical
# path time_layers now prints). (2) launch.lean_spans=1 against the defaults (in the fused
# index untimed; v39's Nsight Compute puts 18% of the scan's samples at the CTA barrier it
# removes). (3) sel_h1.lean_any_special=1 (hot path 238 -> 212 SASS instructions) A/B.
# ~9-10 min: run (1) and (2) in one call, STEPS=3 for the last in another.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v40
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
TOPK="python3 -m tools.check_topk --through index --config glm5 --pos 524287 --rows 8
      --workload W1,W2 --backend cuda"
if [ "${STEPS:-12}" != 3 ]; then
OUT=$LOGS step topk_groups 60 $TOPK --tune launch.lean_spans=1,launch.group_max=1; pack
OUT=$LOGS step vs_groups 200 $TL --workload W1,W2 --reps 5 \
    --versus launch.lean_spans=1,launch.group_max=1 --rounds 2; pack
OUT=$LOGS step tl_groups 45 $TL --workload W1 --reps 3 --timeline \
    --tune launch.lean_spans=1,launch.group_max=1 --jobs-csv "$LOGS/groups.csv"; pack
OUT=$LOGS step vs_spans 200 $TL --workload W1,W2 --reps 5 --versus launch.lean_spans=1 \
    --rounds 2; pack
else
OUT=$LOGS step topk_special 60 $TOPK --tune sel_h1.lean_any_special=1; pack
OUT=$LOGS step vs_special 200 $TL --workload W1,W2 --reps 5 \
    --versus sel_h1.lean_any_special=1 --rounds 2; pack
OUT=$LOGS step tl 45 $TL --workload W1 --reps 3 --timeline --jobs-csv "$LOGS/default.csv"; pack
fi
rm -rf "$LOGS"
