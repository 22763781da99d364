#!/usr/bin/env bash
# v25 call 1: the stages' LDS overlaid (--tune launch.lds_overlay=1: the fused index 181 ->
# 70 KB, select_hist 45 -> 21, index_scoring 69 -> 61): digests equal to the stacked
# layout's, exact top-k, then same-call A/B pairs.
# Run as: timeout 570 bash bench/h200_v25_overlay.sh
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
OV=launch.lds_overlay=1
step check_ix 100 python3 -m tools.check_layer --kind index --config glm5 --rows 8 \
    --kv fp8 --backend cuda --dump $OUT/ci_default
step check_ix_ov 100 python3 -m tools.check_layer --kind index --config glm5 --rows 8 \
    --kv fp8 --backend cuda --dump $OUT/ci_overlay --tune $OV
step compare 20 python3 -m tools.check_layer --compare $OUT/ci_default $OUT/ci_overlay
step topk_ix_ov 90 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --through index --workload W1,W2 --tune $OV
TAIL=3
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 3)
SC=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 5)
IS=(--kind index_scoring --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 3)
step ix_default 50 python3 -m tools.time_layers "${IX[@]}"
step ix_overlay 50 python3 -m tools.time_layers "${IX[@]}" --tune $OV
step sel_default 30 python3 -m tools.time_layers "${SC[@]}"
step sel_overlay 30 python3 -m tools.time_layers "${SC[@]}" --tune $OV
step is_default 45 python3 -m tools.time_layers "${IS[@]}"
step is_overlay 45 python3 -m tools.time_layers "${IS[@]}" --tune $OV
step ix_default2 50 python3 -m tools.time_layers "${IX[@]}"
step ix_overlay2 50 python3 -m tools.time_layers "${IX[@]}" --tune $OV
step tl_ix_ov 50 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 \
    --workload W1 --backend cuda --reps 3 --timeline --tune $OV
