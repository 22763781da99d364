#!/usr/bin/env bash
# Grouped LDS counts (KernelBuilder.count grouped: match.any, one atomic a distinct digit a
# warp) A/B on the H200, each variant against the default in the same call.
#   PART=1: the GPU xlane case (match_any against the interpreter), the select kinds
#           (select: sel_h0's local first pass counts every key; select_hist) with the
#           selection's passes grouped, and their exactness (check_topk, every distribution)
#   PART=2: the scoring's first-digit count grouped (index_scoring), the fused index with
#           both, and its exactness end to end
source "$(dirname "$0")/steps.sh"
G=grouped_counts=1
SEL4="sel_h0.$G,sel_h1.$G,sel_h2.$G,sel_h3.$G"          # the select kinds: digits (6,9,9,8)
SEL5="$SEL4,sel_h4.$G"                                   # the fused index: (6,7,7,6,6)
if [ "${PART:-1}" = 1 ]; then
    step xlane 120 python3 -m pytest -q -m gpu test/test_cuda_run.py -k xlane
    S=(--config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
    step select_base 100 python3 -m tools.time_layers --kind select "${S[@]}"
    step select_all 100 python3 -m tools.time_layers --kind select "${S[@]}" --tune "$SEL4"
    step select_h0 100 python3 -m tools.time_layers --kind select "${S[@]}" --tune "sel_h0.$G"
    step hist_base 100 python3 -m tools.time_layers --kind select_hist "${S[@]}"
    step hist_all 100 python3 -m tools.time_layers --kind select_hist "${S[@]}" --tune "$SEL4"
    step topk_all 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
        --backend cuda --first-digits local --tune "$SEL4"
else
    I=(--config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step scoring_base 100 python3 -m tools.time_layers --kind index_scoring "${I[@]}"
    step scoring_grouped 100 python3 -m tools.time_layers --kind index_scoring "${I[@]}" \
        --tune ix_score.grouped_hist=1
    J=(--config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step index_base 150 python3 -m tools.time_layers --kind index "${J[@]}"
    step index_sel 150 python3 -m tools.time_layers --kind index "${J[@]}" --tune "$SEL5"
    step index_both 150 python3 -m tools.time_layers --kind index "${J[@]}" \
        --tune "$SEL5,ix_score.grouped_hist=1"
    step topk_index 150 python3 -m tools.check_topk --through index --config glm5 \
        --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda \
        --tune "$SEL5,ix_score.grouped_hist=1"
fi
