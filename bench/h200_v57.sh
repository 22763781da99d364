#!/usr/bin/env bash
# v57: the new sm_90a defaults (the queries staged a record a thread, W2's runs' tails to the
# split's last jobs) and what was timed beside them (bench/NOTES.md v57; call 1 was
# `PART=d bash bench/h200_v56.sh`):
#   PART=t: the tails first again (ix_score.tails_last=0) against the defaults: index_scoring
#           r8 / r4 / r2 W2 at 128K and 256K, r8 512K W1 / W2, the fused index r8 128K W2;
#           top-k through the fused index exact (calls 2 and 3, ~500 s)
#   PART=w: the waits beside the plan (ix_score.waits_aside=1): index_scoring r8 128K / 512K
#           W1 / W2, the fused index r8 512K W1 / W2; timelines of index_scoring r8 128K with
#           their jobs (calls 4 and 5, ~430 s; call 4's pre-wait tallies came from a local
#           probe build, not this tree's)
#   PART=l: prepared for the next session, not run: the plan with one round trip fewer and
#           no empty comparison (ix_score.lean_plan=1), alone and with waits_aside, against
#           the defaults: index_scoring r8 128K / 512K W1 / W2, the fused index r8 128K W2
#           and 512K W1 / W2; top-k through the fused index with it (~450 s)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-24}
packed_logs "v57${PART:-t}"
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
if [ "${PART:-t}" = t ]; then
OUT=$LOGS step tails_r842 250 $TL --kind index_scoring --rows 8,4,2 --pos 131071,262143 \
    --workload W2 --versus ix_score.tails_last=0 --rounds 1; pack
OUT=$LOGS step tails_512k 170 $TL --kind index_scoring --rows 8 --pos 524287 --workload W1,W2 \
    --versus ix_score.tails_last=0 --rounds 2; pack
OUT=$LOGS step tails_index 150 $TL --kind index --rows 8 --pos 131071 --workload W2 \
    --versus ix_score.tails_last=0 --rounds 2; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8,4 --workload W2 --backend cuda; pack
elif [ "${PART}" = l ]; then
OUT=$LOGS step lean 240 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus ix_score.lean_plan=1 \
    --also ix_score.lean_plan=1,ix_score.waits_aside=1 --rounds 2; pack
OUT=$LOGS step lean_index 150 $TL --kind index --rows 8 --pos 131071,524287 --workload W2 \
    --versus ix_score.lean_plan=1 --rounds 2; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda --tune ix_score.lean_plan=1; pack
else
for w in W1 W2; do
OUT=$LOGS step tl_128k_$w 60 $TL --kind index_scoring --rows 8 --pos 131071 --workload $w \
    --timeline --jobs-csv $LOGS/jobs_128k_$w.csv; pack
done
OUT=$LOGS step aside 170 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus ix_score.waits_aside=1 --rounds 2; pack
OUT=$LOGS step aside_index 230 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus ix_score.waits_aside=1 --rounds 2; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda --tune ix_score.waits_aside=1; pack
fi
rm -rf "$LOGS"
