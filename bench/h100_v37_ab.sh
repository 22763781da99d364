#!/usr/bin/env bash
# v37 (session 31): ix_qr writing the front's qr (front_q dropped from kind index) and ix_key
# issuing its input loads before its wait, against v36's tree (AB_OLD: made here by
#   mkdir ab_old && git archive 5fced71 | tar -x -C ab_old   (with /ab_old/ in .git/info/exclude)
# and carried beside the working tree: run's carry ["ab_old"]) in alternating processes on one
# machine; a timeline of the fused index r8 W1;
# the new defaults' exact top-k. The logs are packed after every step (a call cut short
# still returns them: the device returns 8 files). ROUNDS=1 SCORING=0: the short form (the
# session's last device minutes); NB_FIRST=0 skips the last part, ix_score.nb_first timed
# against the defaults in one process.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
AB_OLD=${AB_OLD:-ab_old}
[ -d "$AB_OLD/stages" ] || { echo "no baseline tree at $AB_OLD (see the header)"; exit 2; }
packed_logs v37
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --reps 5"
ROUNDS=${ROUNDS:-2}
for round in $(seq 1 "$ROUNDS"); do
    (cd "$AB_OLD" && OUT=$LOGS step ix_old$round 70 $TL --kind index --rows 8 --workload W1,W2)
    OUT=$LOGS step ix_new$round 70 $TL --kind index --rows 8 --workload W1,W2; pack
    if [ $round = 1 ]; then
        OUT=$LOGS step tl_w1 45 $TL --kind index --rows 8 --workload W1 --reps 3 --timeline \
            --jobs-csv "$LOGS/ix_w1.csv"; pack
        OUT=$LOGS step topk8 45 python3 -m tools.check_topk --through index --config glm5 \
            --pos 524287 --rows 8 --workload W1,W2 --backend cuda; pack
    fi
done
if [ "${SCORING:-1}" = 1 ]; then
    (cd "$AB_OLD" && OUT=$LOGS step sco_old 60 $TL --kind index_scoring --rows 8 --workload W1,W2)
    OUT=$LOGS step sco_new 60 $TL --kind index_scoring --rows 8 --workload W1,W2; pack
fi
if [ "${NB_FIRST:-1}" = 1 ]; then  # ix_score.nb_first (off until timed), A/B in one process
    OUT=$LOGS step nb_ix 90 $TL --kind index --rows 8 --workload W1,W2 \
        --versus ix_score.nb_first=1 --rounds 2; pack
    OUT=$LOGS step nb_sco 70 $TL --kind index_scoring --rows 8 --workload W1,W2 \
        --versus ix_score.nb_first=1 --rounds 2; pack
fi
rm -rf "$LOGS"
