#!/usr/bin/env bash
# v33 (prepared in session 28, no device time left): three candidates of bench/NOTES.md v32,
# checked and timed against the default within each call:
#   share_pages with the weighted split (ix_score.share_pages=1), the fix-up's ballot search
#   (ix_score.fixup_ballot=1), the fold over the scoring's per-job first digits
#   (launch.row_parts=1; the fused index only).
#   PART=1: top-k through index exact with share + ballot (rows 4 / 8, 64K / 512K, W1 / W2)
#           and with row_parts (rows 2 / 4 / 8, 512K, W1 / W2); index_scoring r8 default,
#           share                                                              (~7 min)
#   PART=2: index_scoring r8 ballot, share + ballot; the fused index r8 default, share,
#           ballot                                                             (~6 min)
#   PART=3: the fused index r8 row_parts, all three, then default, share + ballot and
#           row_parts again                                                    (~6.5 min)
# The step limits leave a fresh (slower) machine room: v32's call 4 lost its W2 figures to them.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
SHARE=ix_score.share_pages=1
BALLOT=ix_score.fixup_ballot=1
ROWP=launch.row_parts=1
SCO=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
case "${PART:-1}" in
1)
    step topk 150 python3 -m tools.check_topk --through index --config glm5 --pos 65535,524287 \
        --rows 4,8 --workload W1,W2 --backend cuda --tune "$SHARE,$BALLOT"
    step topk_rows 120 python3 -m tools.check_topk --through index --config glm5 --pos 524287 \
        --rows 2,4,8 --workload W1,W2 --backend cuda --tune "$ROWP"
    step sco 70 python3 -m tools.time_layers "${SCO[@]}"
    step sco_share 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$SHARE"
    ;;
2)
    step sco_ballot 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$BALLOT"
    step sco_both 70 python3 -m tools.time_layers "${SCO[@]}" --tune "$SHARE,$BALLOT"
    step ix 75 python3 -m tools.time_layers "${IX[@]}"
    step ix_share 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE"
    step ix_ballot 75 python3 -m tools.time_layers "${IX[@]}" --tune "$BALLOT"
    ;;
3)
    step ix_rows 75 python3 -m tools.time_layers "${IX[@]}" --tune "$ROWP"
    step ix_all 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE,$BALLOT,$ROWP"
    step ix2 75 python3 -m tools.time_layers "${IX[@]}"
    step ix_both2 75 python3 -m tools.time_layers "${IX[@]}" --tune "$SHARE,$BALLOT"
    step ix_rows2 75 python3 -m tools.time_layers "${IX[@]}" --tune "$ROWP"
    ;;
esac
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v33-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log && mv /tmp/v33-logs.tgz "$OUT"/
