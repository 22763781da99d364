#!/usr/bin/env bash
# v47: (1) the tail finish or the rounds chosen per row at run time (SelectConfig.
# tail_max_per_slice, `--tune launch.tail_per_slice=N`): sel_h1 sends a row to the tail
# finish when its first digit's threshold bin holds at most N keys a slice (v45: the tail at
# rows 8 took select_hist 512K from 21.79 to 19.64 us but 64K from 18.8 to 26.8, where the
# bin holds half the row); (2) the group skip only where a row lists few of its keys
# (`--tune sel_h1.group_skip_share=8`; v45: the maxima cost 64K x 8 +3.4%, every group flagged
# there); (3) the fused index with the tail finish after its refined first digits (`--tune
# launch.tail_finish=1`: sel_h1, sel_out; the rounds sel_h2 .. sel_out took 12.5 us of the
# r8 launch after sel_h1, v45). Exact first, then A/Bs in one process: by context at rows 8
# against the rounds, the fused index r8 W1 / W2, the maxima with and without the share, the
# candidate form (all four) against the defaults; rows 2 / 4 against their static tail and
# the v46 leftover (the fused index's group skip at 64K / 128K against launch.group_max=0)
# where the call has time left.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v47
T=launch.tail_per_slice=${PER_SLICE:-1024}
G=launch.group_max=1
S=sel_h1.group_skip_share=8
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda"
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8"
TOPK="python3 -m tools.check_topk --config glm5 --pos 65535,524287 --backend cuda --first-digits buffer"
OUT=$LOGS step topk_sel 80 $TOPK --rows 2,8 --dist normal,nan,neginf,few,above2048,allequal \
    --tune $T; pack
OUT=$LOGS step vs_r8 120 $SH --rows 8 --pos 65535,131071,262143,524287 --reps 5 --versus $T \
    --rounds 2; pack
OUT=$LOGS step topk_ixt 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune launch.tail_finish=1; pack
OUT=$LOGS step vs_ixt 110 $IX --pos 524287 --workload W1,W2 --reps 5 \
    --versus launch.tail_finish=1 --rounds 2; pack
OUT=$LOGS step vs_all 80 $SH --rows 8 --pos 65535,131071,524287 --reps 5 \
    --versus $T,$G,$S,sel_h1.segment_unroll=16 --rounds 2; pack
OUT=$LOGS step vs_share 60 $SH --rows 8 --pos 65535,524287 --reps 5 --tune $G --versus $S \
    --rounds 2; pack
OUT=$LOGS step vs_r24 70 $SH --rows 2,4 --pos 65535,524287 --reps 5 --versus $T --rounds 1; pack
OUT=$LOGS step vs_ix 70 $IX --pos 65535,131071 --workload W1 --reps 5 \
    --versus launch.group_max=0 --rounds 1; pack
rm -rf "$LOGS"
