#!/usr/bin/env bash
# v24 call 4: where the row finish's time goes (its cycle accounts in the timeline build:
# gather / rank / place / emit), rows 8 and rows 2 at 512K.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
F=launch.finish_max=256
step tl8 40 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 524287 --backend cuda --reps 3 --timeline --tune $F --jobs-csv $OUT/jobs8.csv
step tl2 40 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 2 \
    --pos 524287 --backend cuda --reps 3 --timeline --tune $F --jobs-csv $OUT/jobs2.csv
