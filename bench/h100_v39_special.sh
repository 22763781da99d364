#!/usr/bin/env bash
# v39, fourth call: sel_h1.lean_any_special=1 (the lean scan's rare-branch flag from one OR
# of the compares: the loop's hot path 238 -> 212 SASS instructions, 602 -> 580 static stall
# clocks, fused index r8) A/B in one process on the fused index r8 at 512K, then its top-k.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v39d
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
OUT=$LOGS step vs_special 220 $TL --workload W1,W2 --reps 5 --versus sel_h1.lean_any_special=1 \
    --rounds 2; pack
OUT=$LOGS step topk_special 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune sel_h1.lean_any_special=1; pack
rm -rf "$LOGS"
