#!/usr/bin/env bash
# v47: the tail finish or the rounds chosen per row at run time (SelectConfig.
# tail_max_per_slice, `--tune launch.tail_per_slice=N`): sel_h1 sends a row to the tail
# finish when its first digit's threshold bin holds at most N keys a slice (v45: the tail at
# rows 8 took select_hist 512K from 21.79 to 19.64 us but 64K from 18.8 to 26.8, where the
# bin holds half the row). Exact first, then A/Bs in one process against the defaults by
# context (rows 8: the rounds; rows 2 / 4: the static tail), with the group maxima, and the
# v46 leftover: the fused index's group skip at 64K / 128K against launch.group_max=0.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v47
T=launch.tail_per_slice=${PER_SLICE:-1024}
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda"
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8"
OUT=$LOGS step topk_sel 130 python3 -m tools.check_topk --config glm5 --pos 65535,524287 \
    --rows 2,8 --backend cuda --first-digits buffer \
    --dist normal,nan,neginf,few,above2048,allequal --tune $T; pack
OUT=$LOGS step vs_r8 170 $SH --rows 8 --pos 65535,131071,262143,524287 --reps 5 --versus $T \
    --rounds 2; pack
OUT=$LOGS step vs_max 100 $SH --rows 8 --pos 65535,524287 --reps 5 --tune launch.group_max=1 \
    --versus $T --rounds 2; pack
OUT=$LOGS step vs_r24 100 $SH --rows 2,4 --pos 65535,524287 --reps 5 --versus $T --rounds 2; pack
OUT=$LOGS step vs_ix 90 $IX --pos 65535,131071 --workload W1 --reps 5 \
    --versus launch.group_max=0 --rounds 2; pack
rm -rf "$LOGS"
