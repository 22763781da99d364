#!/usr/bin/env bash
# v27 call 3: the tail finish's cycle accounts (gather / rank / place / emit), r8 64K and 512K.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
step tl_t 60 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 65535,524287 --backend cuda --timeline --tune launch.tail_finish=1
