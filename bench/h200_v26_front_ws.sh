#!/usr/bin/env bash
# v26 call 3: the fp8 front tile warp-specialized (launch.waves=8: warpgroup 1 stages the
# terms and runs the proxy fence, warpgroup 0 has its weights in flight from the job's start;
# one CTA an SM, K split 3), against the default and the 4-warp form in the same call.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
WS=(--tune front_proj.act_terms=3 --tune launch.waves=8)
step check_ws 120 python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8,bf16 \
    --backend cuda "${WS[@]}" --dump "$OUT/d"
TL=(--kind front --config glm5 --rows 2,4,8 --backend cuda --reps 5)
step t_default 40 python3 -m tools.time_layers "${TL[@]}"
step t_w8_bf16 40 python3 -m tools.time_layers "${TL[@]}" --tune launch.waves=8
step t_ws_d4 40 python3 -m tools.time_layers "${TL[@]}" "${WS[@]}"
step t_ws_d2 40 python3 -m tools.time_layers "${TL[@]}" "${WS[@]}" --tune front_proj.wg_depth=2
step t_ws_d8 40 python3 -m tools.time_layers "${TL[@]}" "${WS[@]}" --tune front_proj.wg_depth=8
step t_terms3 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3
step t_default2 40 python3 -m tools.time_layers "${TL[@]}"
step tl_ws 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline "${WS[@]}"
step tl_w8_bf16 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline --tune launch.waves=8
