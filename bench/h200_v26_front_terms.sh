#!/usr/bin/env bash
# v26 call 1: the front's projection on the fp8 warpgroup MMA (front_proj.act_terms = T:
# x * g as T e4m3 terms, weights read as they are; stages/wgmma_proj.py): check_layer at
# GLM-5 size against the float64 reference (the terms' reference), then timed against the
# default bf16 tile in the same call, the terms and the weight ring's depth varied.
# Run as: timeout 570 bash bench/h200_v26_front_terms.sh; then tar the logs (one file back)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
CL=(--kind front --config glm5 --rows 2,4,8 --kv fp8,bf16 --backend cuda)
step check_t3 120 python3 -m tools.check_layer "${CL[@]}" --tune front_proj.act_terms=3 --dump "$OUT/d3a"
step check_t3b 120 python3 -m tools.check_layer "${CL[@]}" --tune front_proj.act_terms=3 --dump "$OUT/d3b"
step compare_t3 30 python3 -m tools.check_layer --compare "$OUT/d3a" "$OUT/d3b"
step check_t2 120 python3 -m tools.check_layer "${CL[@]}" --tune front_proj.act_terms=2
step check_t4 120 python3 -m tools.check_layer "${CL[@]}" --tune front_proj.act_terms=4
TAIL=4
TL=(--kind front --config glm5 --rows 2,4,8 --backend cuda --reps 5)
step t_default 40 python3 -m tools.time_layers "${TL[@]}"
step t_terms3 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3
step t_terms2 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=2
step t_terms4 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=4
step t_terms3_d2 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3 --tune front_proj.wg_depth=2
step t_terms3_d8 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3 --tune front_proj.wg_depth=8
step t_default2 40 python3 -m tools.time_layers "${TL[@]}"
step tl_terms3 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline --tune front_proj.act_terms=3
