#!/usr/bin/env bash
# One H200 call A/B-ing selection tunes (~4 min): time_layers of select_hist at 64K and 512K
# keys, rows 2 and 8, for the default and for each TUNES entry (';'-separated --tune values,
# e.g. "launch.select_digits=6-9-9-8;sel_h1.count_from_list=0") in the same call (same
# inputs, same ceilings), the rows-8 512K timeline of each; the default's exactness
# (check_topk on the GPU, every distribution, 64K and 512K, rows 2 and 8; each variant's too
# with CHECK_VARIANTS=1); with INDEX_TUNE, the fused index (512K, rows 2 and 8, W1 and W2)
# without and with it, and its exactness end to end.
#   run:  TUNES="launch.select_digits=6-9-9-8" bash bench/h200_select_ab.sh   (device machine)
source "$(dirname "$0")/steps.sh"
: "${TUNES:?set TUNES=TUNE[;TUNE...] (each a --tune of the tools)}"
TAIL=${TAIL:-6}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
TK=(--config glm5 --pos 65535,524287 --rows 2,8 --backend cuda)
step base 120 python3 -m tools.time_layers "${SC[@]}"
step base_timeline 90 python3 -m tools.time_layers "${TL[@]}"
step topk_base 150 python3 -m tools.check_topk "${TK[@]}"
IFS=';' read -ra VARIANTS <<< "$TUNES"
i=0
for t in "${VARIANTS[@]}"; do
    i=$((i + 1))
    step "tuned$i" 120 python3 -m tools.time_layers "${SC[@]}" --tune "$t"
    step "tuned${i}_timeline" 90 python3 -m tools.time_layers "${TL[@]}" --tune "$t"
    if [ "${CHECK_VARIANTS:-0}" = 1 ]; then
        step "topk_tuned$i" 150 python3 -m tools.check_topk "${TK[@]}" --tune "$t"
    fi
done
if [ -n "${INDEX_TUNE:-}" ]; then
    IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step index_base 150 python3 -m tools.time_layers "${IX[@]}"
    step index_tuned 150 python3 -m tools.time_layers "${IX[@]}" --tune "$INDEX_TUNE"
    step topk_index 150 python3 -m tools.check_topk --through index --config glm5 \
        --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
fi
