#!/usr/bin/env bash
# v60 (prepared in session 46, untimed): what v59 left (bench/NOTES.md v59)
#   PART=a (~480 s): v59's sm_90a defaults (the q projection in one round with the key jobs,
#     one poller a scoring CTA) against the old ones (launch.q_splits=4,ix_score.one_poller=0)
#     on whichever card comes (v59 timed them on an H100 only): index_scoring r8 128K / 512K
#     W1 / W2 (two rounds), with the lean plan (ix_score.lean_plan=1, v57's, still untimed)
#     as C; a timeline of index_scoring r8 128K W1 (where the scoring's p0 lands now)
#   PART=b (~420 s): the fused index r8 128K / 512K W1 / W2 (two rounds): the q jobs'
#     one poller (ix_proj.one_poller=1) as B, the lean plan as C; top-k through the fused
#     index exact with both
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-30}
packed_logs "v60${PART:-a}"
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
if [ "${PART:-a}" = a ]; then
OUT=$LOGS step defaults 300 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus launch.q_splits=4,ix_score.one_poller=0 \
    --also ix_score.lean_plan=1 --rounds 2; pack
OUT=$LOGS step tl_128k_W1 60 $TL --kind index_scoring --rows 8 --pos 131071 --workload W1 \
    --timeline --jobs-csv $LOGS/jobs_128k_W1.csv; pack
else
OUT=$LOGS step index 330 $TL --kind index --rows 8 --pos 131071,524287 --workload W1,W2 \
    --versus ix_proj.one_poller=1 --also ix_score.lean_plan=1 --rounds 2; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda \
    --tune ix_proj.one_poller=1,ix_score.lean_plan=1; pack
fi
rm -rf "$LOGS"
