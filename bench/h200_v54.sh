#!/usr/bin/env bash
# v54: the front's partial sums as tagged pairs (launch.tagged_parts=1, new, opt-in): every
# partial sum its own (value, tag) word, no fence and no job flag in the projection jobs, the
# post jobs polling the words themselves, all of a thread's at once (Mailbox.wait_all).
# On whatever card comes (say which). Every A/B in one process.
#   1 exact: check_layer front (rows 2 / 8) and index (rows 8, 64K) with it, digests
#     compared with the flag form's (the same sums: equal digests)
#   2 front rows 2 / 4 / 8, A = the defaults, B = tagged (batched rounds), C = tagged with a
#     probe word first (tagged_parts=2); the same in a pdl chain (rows 8)
#   3 the timeline of front r8 tagged (front_q's end against v51's 9.28 us)
#   4 the fused index r8 512K W1 (its front inside), A / B
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
packed_logs v54
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
TG=launch.tagged_parts=1
OUT=$LOGS step check 120 bash -c "python3 -m tools.check_layer --kind front --config glm5 \
    --rows 2,8 --kv fp8 --backend cuda --dump $LOGS/d_flag && python3 -m tools.check_layer \
    --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda --tune $TG --dump \
    $LOGS/d_tag && python3 -m tools.check_layer --compare $LOGS/d_flag $LOGS/d_tag"; pack
OUT=$LOGS step vs_front 150 $TL --kind front --rows 2,4,8 --versus $TG \
    --also launch.tagged_parts=2 --rounds 3; pack
OUT=$LOGS step vs_pdl 80 $TL --kind front --rows 8 --tune launch.pdl=1 --versus $TG \
    --also launch.tagged_parts=2 --rounds 3; pack
OUT=$LOGS step timeline 60 $TL --kind front --rows 8 --tune $TG --timeline; pack
OUT=$LOGS step vs_index 110 $TL --kind index --rows 8 --pos 524287 --workload W1 \
    --versus $TG --also launch.tagged_parts=2 --rounds 2; pack
OUT=$LOGS step check_index 60 python3 -m tools.check_layer --kind index --config glm5 \
    --rows 8 --kv fp8 --backend cuda --tune $TG; pack
rm -rf "$LOGS/d_flag" "$LOGS/d_tag"; pack; rm -rf "$LOGS"
