#!/usr/bin/env bash
# v40, call 2 (~200 s of device time were left): the group maxima's swaps and stores a step
# behind, under the next chain (WgmmaGroup._wide_gmax_deferred): call 1 found the producer
# ~6 us of the scoring (its epilogue tally 30073 -> 38284 clocks) against ~4.6 us it saved
# in sel_h1. Its timeline first (the scoring's median job and tallies), then the A/B
# against the defaults, then top-k.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v40d
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
G=launch.lean_spans=1,launch.group_max=1
OUT=$LOGS step tl_deferred 45 $TL --workload W1 --reps 3 --timeline --tune $G; pack
OUT=$LOGS step vs_deferred 110 $TL --workload W1 --reps 5 --versus $G --rounds 2; pack
OUT=$LOGS step topk_deferred 40 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune $G; pack
rm -rf "$LOGS"
