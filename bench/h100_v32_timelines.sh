#!/usr/bin/env bash
# v32 call 3 (session 28, an H100): per-job timelines of index_scoring r8 at 512K, W1 against W2
# with and without share_pages (W2 with shared pages scored once still takes ~25 us more of the
# scoring's own time than W1: imbalance or a slower loop?), and of the fused index r8 W1 / W2
# with the v31 defaults (refined digits folded into sel_h1). Job records as CSV (--jobs-csv).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-40}
SC=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step sco_w1 60 python3 -m tools.time_layers "${SC[@]}" --workload W1 --jobs-csv "$OUT/sco_w1.csv"
step sco_w2 60 python3 -m tools.time_layers "${SC[@]}" --workload W2 --jobs-csv "$OUT/sco_w2.csv"
step sco_w2_share 60 python3 -m tools.time_layers "${SC[@]}" --workload W2 --jobs-csv "$OUT/sco_w2_share.csv" \
    --tune ix_score.share_pages=1
IX=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step ix_w1 60 python3 -m tools.time_layers "${IX[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
step ix_w2 60 python3 -m tools.time_layers "${IX[@]}" --workload W2 --jobs-csv "$OUT/ix_w2.csv"
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v32-call3-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v32-call3-logs.tgz "$OUT"/
