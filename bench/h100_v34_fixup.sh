#!/usr/bin/env bash
# v34 (session 29, an H100): the ballot fix-up's rescoring as one straight block a row (the
# row's q words and weights once, a key's words, scale and stale score together: a round
# trip a key, not three): exact through index at rows 2 / 4 / 8, the fused index r8 against
# the row loop (ix_score.fixup_ballot=0) in the same call, and the tail job's clocks.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix_new 50 python3 -m tools.time_layers "${IX[@]}"
step ix_loop 50 python3 -m tools.time_layers "${IX[@]}" --tune ix_score.fixup_ballot=0
step ix_new2 50 python3 -m tools.time_layers "${IX[@]}"
TL=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
step tl_w1 50 python3 -m tools.time_layers "${TL[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
step tl_w2 50 python3 -m tools.time_layers "${TL[@]}" --workload W2 --jobs-csv "$OUT/ix_w2.csv"
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v34-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v34-logs.tgz "$OUT"/
