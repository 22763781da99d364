#!/usr/bin/env bash
# v36: the q path before the scoring (v35 timelines: qr at 14.85 us, the q heads' partial sums
# in two rounds of 256 jobs on 132 CTAs to 23.5, ix_q to 26.2; the key loops start at ~28),
# each candidate against the defaults in one process (time_layers --versus):
#   pn:  launch.prefetch_next=1, every job asks the L2 for the next job's constant weights
#        (ix_proj: its W_qb_idx head block / W_k, W_w split; front_proj: its block), the
#        CTA's first job's at the start;
#   q4:  launch.q_splits=4, 128 q jobs of 64 KB, one round (v13/v14: -1 .. -3 us, then not
#        adopted for 12 bytes of spills; with no fix-up the rows-8 kernel has none).
#   PART=1: exact through index with both; index r8 A/B pn (2 rounds), q4, both; front r8 pn
#   PART=2: timelines with both; index r2 / r4 A/B both
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
PN=launch.prefetch_next=1
Q4=launch.q_splits=4
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
case "${PART:-1}" in
1)
    step topk_index 90 python3 -m tools.check_topk --through index --config glm5 \
        --pos 65535,524287 --rows 2,8 --workload W1,W2 --backend cuda --tune "$PN,$Q4"
    step ix_pn 170 python3 -m tools.time_layers "${IX[@]}" --versus "$PN" --rounds 2
    step ix_q4 110 python3 -m tools.time_layers "${IX[@]}" --versus "$Q4" --rounds 1
    step ix_both 110 python3 -m tools.time_layers "${IX[@]}" --versus "$PN,$Q4" --rounds 1
    step front_pn 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 \
        --pos 8191 --backend cuda --versus "$PN" --rounds 2
    ;;
2)
    TL=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline
        --tune "$PN,$Q4")
    step tl_w1 50 python3 -m tools.time_layers "${TL[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
    R24=(--kind index --config glm5 --rows 2,4 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step ix24_both 180 python3 -m tools.time_layers "${R24[@]}" --versus "$PN,$Q4" --rounds 1
    ;;
esac
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v36-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v36-logs.tgz "$OUT"/
