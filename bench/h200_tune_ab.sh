#!/usr/bin/env bash
# One H200 call A/B-ing a stage tunable on the scoring launches (~4 min): time_layers of
# KINDS (index_scoring,index) at 512K keys, ROWS (2,8), W1 and W2, without and with TUNE in
# the same call (same inputs, same ceilings), then the tuned build's exactness end to end
# (rows TOPK_ROWS, default ROWS), and with CYCLES=1 the tuned build's cycle accounts (rows 8,
# W1 and W2; time_layers --timeline).
#   run:  TUNE=ix_score.prefetch_pages=1 bash bench/h200_tune_ab.sh   (on the device machine)
#         TUNE=ix_score.head_sum=mma KINDS=index_scoring ROWS=2,4,8 CYCLES=1 bash ...
source "$(dirname "$0")/steps.sh"
: "${TUNE:?set TUNE=STAGE.ATTR=VALUE (the --tune of the tools)}"
TAIL=${TAIL:-8}
KINDS=${KINDS:-index_scoring,index}
ROWS=${ROWS:-2,8}
SC=(--kind "$KINDS" --config glm5 --rows "$ROWS" --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step base 150 python3 -m tools.time_layers "${SC[@]}"
step tuned 150 python3 -m tools.time_layers "${SC[@]}" --tune "$TUNE"
step topk_tuned 120 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows "${TOPK_ROWS:-$ROWS}" --workload W1,W2 --backend cuda --tune "$TUNE"
if [ "${CYCLES:-0}" = 1 ]; then
    TAIL=14
    step cycles_tuned 90 python3 -m tools.time_layers --kind index_scoring --rows 8 --config glm5 \
        --pos 524287 --workload W1,W2 --backend cuda --reps 3 --timeline --tune "$TUNE"
fi
