#!/usr/bin/env bash
# One H200 call timing the working tree against another tree of this repository in the same
# call (same machine, same inputs; ~1.5 min a kind and side): time_layers of each of KINDS
# (comma-separated, default index_scoring,index) at 512K keys, ROWS (default 2,8), W1 and W2,
# here and in BASE (a directory holding an older tree's monokernel/ stages/ layouts/ spec/
# tools/, e.g. made by `git archive REV -- monokernel stages layouts spec tools | tar -x -C
# ab_base`, ignored by git and carried to the device); then the rows-8 W1 timeline of each
# kind here. A change with no --tune switch is A/B-ed this way.
#   run:  BASE=ab_base KINDS=index_scoring,index bash bench/h200_tree_ab.sh   (device machine)
source "$(dirname "$0")/steps.sh"
: "${BASE:?set BASE=DIR (the other tree)}"
TAIL=${TAIL:-6}
IFS=',' read -ra KS <<< "${KINDS:-index_scoring,index}"
for kind in "${KS[@]}"; do
    SC=(--kind "$kind" --config glm5 --rows "${ROWS:-2,8}" --pos 524287 --workload W1,W2
        --backend cuda --reps 5)
    step "${kind}_new" 200 python3 -m tools.time_layers "${SC[@]}"
    step "${kind}_base" 200 env -C "$BASE" python3 -m tools.time_layers "${SC[@]}"
done
TAIL=12
for kind in "${KS[@]}"; do
    step "${kind}_timeline" 120 python3 -m tools.time_layers --kind "$kind" --config glm5 \
        --rows 8 --pos 524287 --workload W1 --backend cuda --reps 3 --timeline
done
