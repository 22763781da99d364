#!/usr/bin/env bash
# v44 (prepared in session 35, untimed): (1) select_hist with the group maxima as an input
# (`--tune launch.group_max=1`: score_gmax beside the first digits, +inf where a group holds
# a NaN or -inf): exact on the GPU at 512K (rows 2 / 8, the distributions with specials),
# then the A/B against the defaults at 512K, rows 8 and 2, three rounds, and its r8
# timeline (sel_h1's scan); issue 7's target is select_hist < 20 us at 512K x 8 (~24 now).
# (2) the fused index's skip at rows 2 / 4 (on by default at rows 8 only, timed there):
# exact, then the A/B on W1 / W2.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v44
G=launch.group_max=1
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --pos 524287 --backend cuda"
OUT=$LOGS step topk_sel 150 python3 -m tools.check_topk --config glm5 --pos 524287 \
    --rows 2,8 --backend cuda --first-digits buffer --dist normal,nan,neginf,few,above2048 \
    --tune $G; pack
OUT=$LOGS step vs_sel 150 $SH --rows 8,2 --reps 5 --versus $G --rounds 3; pack
OUT=$LOGS step tl_sel 60 $SH --rows 8 --reps 3 --timeline --tune $G; pack
OUT=$LOGS step topk_ix 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,4 --workload W1,W2 --backend cuda --tune $G; pack
OUT=$LOGS step vs_ix 170 python3 -m tools.time_layers --kind index --config glm5 \
    --pos 524287 --backend cuda --rows 4,2 --workload W1,W2 --reps 5 --versus $G --rounds 2; pack
rm -rf "$LOGS"
