#!/usr/bin/env bash
# v48 (a short call after v47): the fused index's tail finish (`launch.tail_finish`, v47: r8
# W1 512K 104.45 / 105.04 -> 101.93 / 102.26 us, the call cut before W2's B) on W2 and at
# 64K (A = off, B = on, whatever the tree's default), and the group skip's cost at
# 64K (v47, one round: `launch.group_max=0` 0.953 at 64K, 0.989 at 128K) again, each in one
# process, and the fused index's timelines at 64K with and without the skip; then where
# select_hist's static tail loses its time at 64K x 8 (v45: 18.4 -> 26.8
# us; no timeline at 64K yet): the timelines of both forms.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v48
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8 --reps 5"
OUT=$LOGS step vs_w2 90 $IX --pos 524287 --workload W2 --tune launch.tail_finish=0 \
    --versus launch.tail_finish=1 --rounds 2; pack
OUT=$LOGS step vs_64k 50 $IX --pos 65535 --workload W1 --tune launch.tail_finish=0 \
    --versus launch.tail_finish=1 --rounds 1; pack
OUT=$LOGS step vs_skip 50 $IX --pos 65535 --workload W1 --versus launch.group_max=0 \
    --rounds 1; pack
TL="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8 --reps 3"
OUT=$LOGS step tl_skip 60 $TL --pos 65535 --workload W1 --timeline; pack
OUT=$LOGS step tl_noskip 60 $TL --pos 65535 --workload W1 --timeline --tune launch.group_max=0; pack
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda --rows 8"
OUT=$LOGS step tl_tail 60 $SH --pos 65535 --reps 3 --timeline --tune launch.tail_finish=1; pack
OUT=$LOGS step tl_rounds 60 $SH --pos 65535 --reps 3 --timeline; pack
rm -rf "$LOGS"
