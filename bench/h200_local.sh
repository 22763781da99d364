#!/usr/bin/env bash
# One H200 call (~6 min): the selection's local finish (--tune launch.select_local=N) against
# the exchange rounds (the default), in one process each: select_hist at 64K and 512K keys,
# rows 2 and 8, the rows-8 512K timeline of both, the local finish's exactness on the GPU
# (check_topk, every distribution, 64K and 512K, rows 2 and 8), then the fused index at 512K
# rows 8 W1 / W2 without and with it and its top-k exact end to end.
#   run:  bash bench/h200_local.sh   (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
LOCAL=${LOCAL:-launch.select_local=16384}
# the fused index's LDS holds 8K keys of a local row's threshold bin next to its other stages'
INDEX_LOCAL=${INDEX_LOCAL:-launch.select_local=8192}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
TL=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda --reps 3 --timeline)
TK=(--config glm5 --pos 65535,524287 --rows 2,8 --backend cuda)
step base 120 python3 -m tools.time_layers "${SC[@]}"
step local 120 python3 -m tools.time_layers "${SC[@]}" --tune "$LOCAL"
step base_timeline 90 python3 -m tools.time_layers "${TL[@]}"
step local_timeline 90 python3 -m tools.time_layers "${TL[@]}" --tune "$LOCAL"
step topk_local 150 python3 -m tools.check_topk "${TK[@]}" --tune "$LOCAL"
if [ "${INDEX:-1}" = 1 ]; then
    IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
    step index_base 120 python3 -m tools.time_layers "${IX[@]}"
    step index_local 120 python3 -m tools.time_layers "${IX[@]}" --tune "$INDEX_LOCAL"
    step topk_index_local 120 python3 -m tools.check_topk --through index --config glm5 \
        --pos 8191,524287 --rows 8 --workload W1,W2 --backend cuda --tune "$INDEX_LOCAL"
fi
