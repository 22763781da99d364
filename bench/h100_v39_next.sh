#!/usr/bin/env bash
# v39 (next session, prepared in session 32): the leads v38 left, on the fused index r8 at
# 512K. (1) ix_key's phase 0 with the small inputs at one copy (--fixed-below 1M): back near
# v36's 5 us if a fresh copy's TLB misses made it 11-12; its us/launch beside the default's.
# (2) launch.lead_alone=1 (no q-head job behind ix_key) A/B in one process, W1 and W2.
# Logs packed after every step (the device returns 8 files).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
packed_logs v39
# nb_first became the sm_90a default after v38's last top-k check: exact first
OUT=$LOGS step topk8 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda; pack
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
OUT=$LOGS step tl_fixed 45 $TL --workload W1 --reps 3 --timeline --fixed-below 1M \
    --jobs-csv "$LOGS/fixed.csv"; pack
OUT=$LOGS step rot 60 $TL --workload W1,W2 --reps 5; pack
OUT=$LOGS step fixed 60 $TL --workload W1,W2 --reps 5 --fixed-below 1M; pack
OUT=$LOGS step vs_alone 200 $TL --workload W1,W2 --reps 5 --versus launch.lead_alone=1 \
    --rounds 2; pack
OUT=$LOGS step tl_alone 45 $TL --workload W1 --reps 3 --timeline --tune launch.lead_alone=1 \
    --jobs-csv "$LOGS/alone.csv"; pack
# why v38's profiled placement measured 2% slower: its timeline beside the default's
OUT=$LOGS step tl_profile 45 $TL --workload W1 --reps 3 --timeline \
    --tune launch.profile=bench/profiles/h100-index-glm5-tp8-r8-fp8-W1.csv \
    --jobs-csv "$LOGS/profile.csv"; pack
rm -rf "$LOGS"
