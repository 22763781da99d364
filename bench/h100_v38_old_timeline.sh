#!/usr/bin/env bash
# v38 (session 32): the fused index r8 W1 timeline of v36's tree (ab_old, made as
# bench/h100_v37_ab.sh's header says, carried) then of the working tree, on one machine: is
# ix_key's phase 0 (~12 us in v38's timelines, 4.6 in v36's) the code's or the machine's?
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-14}
AB_OLD=${AB_OLD:-ab_old}
packed_logs v38b
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8 --workload W1 --reps 3 --timeline"
(cd "$AB_OLD" && OUT=$LOGS step tl_old 50 $TL --jobs-csv "$LOGS/old.csv"); pack
OUT=$LOGS step tl_new 50 $TL --jobs-csv "$LOGS/new.csv"; pack
rm -rf "$LOGS"
