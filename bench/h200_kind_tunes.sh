#!/usr/bin/env bash
# One H200 call timing several --tune variants of one kind against its default in the same
# call (same inputs, same ceilings; ~1 min a variant): time_layers of KIND (default index) at
# 512K keys, ROWS (default 8), W1 and W2, for the default and each TUNES entry (';'-separated
# --tune values, e.g. "launch.q_splits=4;launch.q_splits=2"). One log a variant.
#   run:  KIND=index TUNES="launch.q_splits=4" bash bench/h200_kind_tunes.sh   (device machine)
source "$(dirname "$0")/steps.sh"
: "${TUNES:?set TUNES=TUNE[;TUNE...] (each a --tune of the tools)}"
KIND=${KIND:-index}
TAIL=${TAIL:-4}
SC=(--kind "$KIND" --config glm5 --rows "${ROWS:-8}" --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step "${KIND}_base" 150 python3 -m tools.time_layers "${SC[@]}"
IFS=';' read -ra VARIANTS <<< "$TUNES"
i=0
for t in "${VARIANTS[@]}"; do
    i=$((i + 1))
    step "${KIND}_tuned$i" 150 python3 -m tools.time_layers "${SC[@]}" --tune "$t"
done
