#!/usr/bin/env bash
# v28 call 5: the timeline of select_hist 512K x 8 with the rounds' publish by every wave
# (launch.cta_publish=1) against the default: where its ~1.5 us a round goes.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-30}
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5 --timeline)
step tl 60 python3 -m tools.time_layers "${TL[@]}"
step tl_pub 60 python3 -m tools.time_layers "${TL[@]}" --tune launch.cta_publish=1
