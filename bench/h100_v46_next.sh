#!/usr/bin/env bash
# v46 (prepared in session 36, untimed): (1) the fused index's group skip (the sm_90a default
# at rows 8, timed at 512K only, v40-v45) at shorter contexts, where select_hist's maxima were
# slower (64K x 8 +3.4%, v45): defaults vs `launch.group_max=0`; (2) where select_hist's
# five-option form (the maxima, the tail finish, a 16-wide fold; 19.6 us at 512K x 8, 26.8 at
# 64K) crosses the defaults, by context: what a per-row choice of the tail or the rounds
# would need to know.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
packed_logs v46
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8"
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda --rows 8"
OUT=$LOGS step topk_ix 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,131071 --rows 8 --workload W1,W2 --backend cuda; pack
OUT=$LOGS step vs_ix 240 $IX --pos 65535,131071 --workload W1,W2 --reps 5 \
    --versus launch.group_max=0 --rounds 2; pack
OUT=$LOGS step vs_sel 150 $SH --pos 65535,131071,262143,524287 --reps 5 \
    --versus launch.group_max=1,launch.tail_finish=1,sel_h1.segment_unroll=16 --rounds 2; pack
rm -rf "$LOGS"
