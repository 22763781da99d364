#!/usr/bin/env bash
# v24 call 1: the fused index's selection after the lean loop (v22): its radix plan again,
# lean lists, the last pass's early emit with sel_out waiting on its own slice first; the
# fused timeline. Exactness of each variant first, then A/B in the same call.
# Run as: timeout 570 bash bench/h200_v24_plans.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
EE5=sel_h4.early_emit=1,sel_out.early_emit=1,sel_out.one_wait=0
EE4=sel_h3.early_emit=1,sel_out.early_emit=1,sel_out.one_wait=0
step topk_ix 200 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune launch.select_digits=6-9-9-8
step topk_ix_ee 120 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1 --tune $EE5,launch.lean_lists=1
step topk_sel_ee 120 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --first-digits buffer --tune $EE4
step ix_default 60 python3 -m tools.time_layers "${IX[@]}"
step ix_6998 60 python3 -m tools.time_layers "${IX[@]}" --tune launch.select_digits=6-9-9-8
step ix_6899 60 python3 -m tools.time_layers "${IX[@]}" --tune launch.select_digits=6-8-9-9
step ix_lean 60 python3 -m tools.time_layers "${IX[@]}" --tune launch.lean_lists=1
step ix_ee 60 python3 -m tools.time_layers "${IX[@]}" --tune $EE5
step ix_default2 60 python3 -m tools.time_layers "${IX[@]}"
step sel_default 60 python3 -m tools.time_layers "${SC[@]}"
step sel_ee 60 python3 -m tools.time_layers "${SC[@]}" --tune $EE4
step sel_default2 60 python3 -m tools.time_layers "${SC[@]}"
step tl_ix 60 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1 --backend cuda --reps 3 --timeline
