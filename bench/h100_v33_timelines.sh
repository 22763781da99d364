#!/usr/bin/env bash
# v33 call 4 (session 29, an H100): per-job timelines of v33's sm_90a defaults (share_pages,
# fixup_ballot, row_parts): index_scoring and the fused index r8 at 512K, W1 and W2, job
# records as CSV (--jobs-csv): where the 110.9 / 120.6 us go now, and the clocks to refit
# index_share's tail cost (its fix-up by ballot; with row_parts no segment flush).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-22}
SC=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step sco_w1 60 python3 -m tools.time_layers "${SC[@]}" --workload W1 --jobs-csv "$OUT/sco_w1.csv"
step sco_w2 60 python3 -m tools.time_layers "${SC[@]}" --workload W2 --jobs-csv "$OUT/sco_w2.csv"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step ix_w1 70 python3 -m tools.time_layers "${IX[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
step ix_w2 70 python3 -m tools.time_layers "${IX[@]}" --workload W2 --jobs-csv "$OUT/ix_w2.csv"
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v33-call4-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v33-call4-logs.tgz "$OUT"/
