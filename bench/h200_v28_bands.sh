#!/usr/bin/env bash
# v28 call 3: the fold reading its row's segment histograms in bands from the top
# (sel_h1.fold_bins, FOLD_BAND_BINS = 16 by default; 64: call 2's whole histograms), against
# the default (sel_h0's round) in the same call: exact top-k first, then select_hist rows
# 2 / 4 / 8 and the fused index r8 W1 / W2.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
FOLD=(--tune launch.fold_first_digits=1)
step topk_fold 90 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,4,8 \
    --backend cuda --first-digits buffer "${FOLD[@]}"
step topk_index 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1,W2 --backend cuda "${FOLD[@]}"
SC=(--kind select_hist --config glm5 --rows 2,4,8 --pos 65535,524287 --backend cuda --reps 5)
step sel 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fold 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}"
step sel_fold64 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}" --tune sel_h1.fold_bins=64
step sel_fold32 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}" --tune sel_h1.fold_bins=32
step sel2 40 python3 -m tools.time_layers "${SC[@]}"
step sel_fold2 40 python3 -m tools.time_layers "${SC[@]}" "${FOLD[@]}"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step ix 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fold 80 python3 -m tools.time_layers "${IX[@]}" "${FOLD[@]}"
step ix2 80 python3 -m tools.time_layers "${IX[@]}"
step ix_fold2 80 python3 -m tools.time_layers "${IX[@]}" "${FOLD[@]}"
