#!/usr/bin/env bash
# The selection's rounds on the H200 (v18 call 4), each variant against the default in the
# same call: sel_h0's segment sums with every segment load of a thread in flight
# (sel_h0.segment_unroll=8), and the radix plans again now that a round waits once
# (select_hist: 6-10-8-8, 6-8-9-9; the fused index: 6-9-9-8, 6-8-9-9); exactness of each.
source "$(dirname "$0")/steps.sh"
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
TK=(--config glm5 --pos 65535,524287 --rows 2,8 --backend cuda --first-digits buffer)
SU=sel_h0.segment_unroll=8
step hist_base 100 python3 -m tools.time_layers "${SC[@]}"
step hist_su8 100 python3 -m tools.time_layers "${SC[@]}" --tune $SU
step hist_d10 100 python3 -m tools.time_layers "${SC[@]}" --tune launch.select_digits=6-10-8-8
step hist_d899 100 python3 -m tools.time_layers "${SC[@]}" --tune launch.select_digits=6-8-9-9
step hist_su8_timeline 90 python3 -m tools.time_layers "${TL[@]}" --tune $SU
step topk_su8 150 python3 -m tools.check_topk "${TK[@]}" --tune $SU
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_base 150 python3 -m tools.time_layers "${IX[@]}"
step index_su8 150 python3 -m tools.time_layers "${IX[@]}" --tune $SU
step index_d998 150 python3 -m tools.time_layers "${IX[@]}" --tune launch.select_digits=6-9-9-8
step index_d899 150 python3 -m tools.time_layers "${IX[@]}" --tune launch.select_digits=6-8-9-9
step topk_index 150 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda --tune $SU
