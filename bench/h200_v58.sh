#!/usr/bin/env bash
# v58 (bench/NOTES.md v58; call 1 is `PART=l bash bench/h200_v57.sh`, v57's lean plan):
#   PART=q: the q projection in fewer, larger jobs (launch.q_splits=2: 64 q jobs of 128 KB,
#           88 ix_proj jobs in all, one round of the grid) against the defaults (128 q jobs of
#           64 KB + 24 key jobs = 152 on 132 CTAs: v57's timeline put 20 q jobs in a second
#           round, their heads' ix_q ending at 9.3 us and the scoring's p0 at 10.3 against
#           ix_key's 8.0): index_scoring r8 128K / 512K W1 / W2, the fused index r8 512K W1 /
#           W2; a timeline of index_scoring r8 128K W1 with it; top-k exact (~330 s)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-24}
packed_logs "v58${PART:-q}"
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
if [ "${PART:-q}" = q ]; then
OUT=$LOGS step qs 170 $TL --kind index_scoring --rows 8 --pos 131071,524287 --workload W1,W2 \
    --versus launch.q_splits=2 --rounds 2; pack
OUT=$LOGS step qs_index 110 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus launch.q_splits=2 --rounds 1; pack
OUT=$LOGS step tl_q2 50 $TL --kind index_scoring --rows 8 --pos 131071 --workload W1 \
    --tune launch.q_splits=2 --timeline --jobs-csv $LOGS/jobs_q2_128k_w1.csv; pack
OUT=$LOGS step topk 45 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda --tune launch.q_splits=2; pack
fi
rm -rf "$LOGS"
