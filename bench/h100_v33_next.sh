#!/usr/bin/env bash
# v33 (prepared in session 28, no device time left): share_pages with the weighted split and
# fixup_ballot (bench/NOTES.md v32), checked and timed against the default in one call each.
#   PART=1: top-k through index exact with both on (rows 4 / 8, 64K / 512K, W1 / W2), then
#           index_scoring r8 W1 / W2: default, share, ballot, share + ballot   (~6 min)
#   PART=2: the fused index r8 W1 / W2: the same four, then default and both again (~7 min)
# The step limits leave a fresh (slower) machine room: v32's call 4 lost its W2 figures to them.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
SHARE=ix_score.share_pages=1
BALLOT=ix_score.fixup_ballot=1
if [ "${PART:-1}" = 1 ]; then
    step topk 150 python3 -m tools.check_topk --through index --config glm5 --pos 65535,524287 \
        --rows 4,8 --workload W1,W2 --backend cuda --tune "$SHARE,$BALLOT"
    SCO=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step sco 70 python3 -m tools.time_layers "${SCO[@]}"
    step sco_share 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$SHARE"
    step sco_ballot 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$BALLOT"
    step sco_both 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$SHARE,$BALLOT"
else
    IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step ix 75 python3 -m tools.time_layers "${IX[@]}"
    step ix_share 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE"
    step ix_ballot 75 python3 -m tools.time_layers "${IX[@]}" --tune "$BALLOT"
    step ix_both 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE,$BALLOT"
    step ix2 75 python3 -m tools.time_layers "${IX[@]}"
    step ix_both2 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE,$BALLOT"
fi
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v33-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v33-logs.tgz "$OUT"/
