#!/usr/bin/env bash
# v37 (session 31): ix_qr writing the front's qr (front_q dropped from kind index), ix_key /
# ix_q issuing their input loads before their waits, ix_key's cost counting its x bytes;
# against the previous commit's tree (AB_OLD, a `git archive` of it carried beside the
# working tree) in alternating processes on one machine; a timeline of the fused index r8 W1;
# the new defaults' exact top-k. The logs are packed after every step (a call cut short
# still returns them: the device returns 8 files).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
AB_OLD=${AB_OLD:-ab_old}
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs
mkdir -p "$LOGS"
pack() { tar czf "$OUT/v37-logs.tgz" -C "$LOGS" . ; }
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --reps 5"
for round in 1 2; do
    (cd "$AB_OLD" && OUT=$LOGS step ix_old$round 70 $TL --kind index --rows 8 --workload W1,W2)
    OUT=$LOGS step ix_new$round 70 $TL --kind index --rows 8 --workload W1,W2; pack
    if [ $round = 1 ]; then
        OUT=$LOGS step tl_w1 45 $TL --kind index --rows 8 --workload W1 --reps 3 --timeline \
            --jobs-csv "$LOGS/ix_w1.csv"; pack
        OUT=$LOGS step topk8 45 python3 -m tools.check_topk --through index --config glm5 \
            --pos 524287 --rows 8 --workload W1,W2 --backend cuda; pack
    fi
done
(cd "$AB_OLD" && OUT=$LOGS step sco_old 60 $TL --kind index_scoring --rows 8 --workload W1,W2)
OUT=$LOGS step sco_new 60 $TL --kind index_scoring --rows 8 --workload W1,W2; pack
rm -rf "$LOGS"
