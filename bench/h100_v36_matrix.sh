#!/usr/bin/env bash
# v36 (session 30, the last ~350 s of device time): the scoring alone (index_scoring: scoring
# span, floor parts, torch peer) with the sm_90a defaults at rows 2 / 4 / 8, 128K / 256K / 512K
# keys, W1 / W2, for issue 6's table (DeepGEMM's figures are the H200's: compare ratios only).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-20}
step sco_matrix 200 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 2,4,8 \
    --pos 131071,262143,524287 --workload W1,W2 --backend cuda --reps 5
tar czf /tmp/v36-matrix-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v36-matrix-logs.tgz "$OUT"/
