#!/usr/bin/env bash
# v35 (prepared in session 29, no device time left): the fix-up's batched rescoring with
# UNMASKED loads (--tune ix_score.fixup_batched=1; v34's masked form made the tail job's
# fix-up 33 us): exact through index at rows 2 / 4 / 8, the fused index r8 against the
# default (the ballot search, the row loop's rescoring) interleaved, and the tail job's
# clocks (--jobs-csv: the job holding the runs' last segments, p1 -> p2).      (~5.5 min)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
B=ix_score.fixup_batched=1
step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda --tune "$B"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix 60 python3 -m tools.time_layers "${IX[@]}"
step ix_batched 60 python3 -m tools.time_layers "${IX[@]}" --tune "$B"
step ix2 60 python3 -m tools.time_layers "${IX[@]}"
TL=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline --tune "$B")
step tl_w1 50 python3 -m tools.time_layers "${TL[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
step tl_w2 50 python3 -m tools.time_layers "${TL[@]}" --workload W2 --jobs-csv "$OUT/ix_w2.csv"
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v35-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v35-logs.tgz "$OUT"/
