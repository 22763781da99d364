#!/usr/bin/env bash
# One H200 call A/B-ing a stage tunable on the scoring launches (~4 min): time_layers of
# index_scoring and index at 512K keys, rows 2 and 8, W1 and W2, without and with TUNE in the
# same call (same inputs, same ceilings), then the tuned build's exactness end to end.
#   run:  TUNE=ix_score.prefetch_pages=1 bash bench/h200_tune_ab.sh   (on the device machine)
source "$(dirname "$0")/steps.sh"
: "${TUNE:?set TUNE=STAGE.ATTR=VALUE (the --tune of the tools)}"
TAIL=${TAIL:-8}
SC=(--kind index_scoring,index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step base 150 python3 -m tools.time_layers "${SC[@]}"
step tuned 150 python3 -m tools.time_layers "${SC[@]}" --tune "$TUNE"
step topk_tuned 120 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda --tune "$TUNE"
