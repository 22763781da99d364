#!/usr/bin/env bash
# v35 (prepared in session 29, no device time left): candidates for the scoring job that
# holds the runs' last segments (v34: it ends 5.6 us (W1) / 12.7 us (W2) after the others in
# the fused index r8), each against the default in the same call, interleaved:
#   cached:  no fix-up; the key loop's reads of the new keys follow the key job's release
#            (--tune ix_score.cached_new_keys=1: no rescoring, no search in any job);
#   tail:    share_pages' split costs a run's tail by its rows (--tune ix_score.tail_rows=1;
#            for the fix-up's default form, not with cached);
#   batched: the fix-up's rescoring a row at a time with unmasked loads
#            (--tune ix_score.fixup_batched=1; v34's masked form was 20 us slower).
# Each A/B is one process (time_layers --versus: A then B a round, B/A printed at the end).
#   PART=1: exact through index with cached; the fused index r8 A/B cached (2 rounds),
#           tail and batched (1 round each)                                     (~7.5 min max)
#   PART=2: the clocks with cached (--jobs-csv); index_scoring r8 A/B cached (2 rounds), the
#           fused index r2 / r4 A/B cached                                      (~6.5 min max)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
C=ix_score.cached_new_keys=1
T=ix_score.tail_rows=1
B=ix_score.fixup_batched=1
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
case "${PART:-1}" in
1)
    step topk_index 100 python3 -m tools.check_topk --through index --config glm5 \
        --pos 8191,65535,524287 --rows 2,4,8 --workload W1,W2 --backend cuda --tune "$C"
    step ix_cached 180 python3 -m tools.time_layers "${IX[@]}" --versus "$C" --rounds 2
    step ix_tail 110 python3 -m tools.time_layers "${IX[@]}" --versus "$T" --rounds 1
    step ix_batched 110 python3 -m tools.time_layers "${IX[@]}" --versus "$B" --rounds 1
    ;;
2)
    TL=(--kind index --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline
        --tune "$C")
    step tl_w1 50 python3 -m tools.time_layers "${TL[@]}" --workload W1 --jobs-csv "$OUT/ix_w1.csv"
    step tl_w2 50 python3 -m tools.time_layers "${TL[@]}" --workload W2 --jobs-csv "$OUT/ix_w2.csv"
    SC=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step sco_cached 120 python3 -m tools.time_layers "${SC[@]}" --versus "$C" --rounds 2
    R24=(--kind index --config glm5 --rows 2,4 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step ix24_cached 180 python3 -m tools.time_layers "${R24[@]}" --versus "$C" --rounds 1
    ;;
esac
# (the device returns 8 files: the logs come back as one archive)
tar czf /tmp/v35-logs.tgz -C "$OUT" . && rm -f "$OUT"/*.log "$OUT"/*.csv && mv /tmp/v35-logs.tgz "$OUT"/
