#!/usr/bin/env bash
# v26 call 2: the fp8 front tile with its first weight loads after the staging's proxy fence
# (call 1: issued before it, the fence's MEMBAR.ALL.CTA held the staging until they landed,
# p0 5.6 us), with and without an L2 prefetch of the tile's weights at the job's start.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
step check_t3 120 python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 \
    --backend cuda --tune front_proj.act_terms=3 --tune front_proj.wg_prefetch=1 --dump "$OUT/d"
TL=(--kind front --config glm5 --rows 2,4,8 --backend cuda --reps 5)
step t_default 40 python3 -m tools.time_layers "${TL[@]}"
step t_terms3 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3
step t_terms3_pf 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3 --tune front_proj.wg_prefetch=1
step t_terms3_pf_d8 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=3 --tune front_proj.wg_prefetch=1 --tune front_proj.wg_depth=8
step t_terms2_pf 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=2 --tune front_proj.wg_prefetch=1
step t_terms4_pf 40 python3 -m tools.time_layers "${TL[@]}" --tune front_proj.act_terms=4 --tune front_proj.wg_prefetch=1
step t_default2 40 python3 -m tools.time_layers "${TL[@]}"
step tl_terms3 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline --tune front_proj.act_terms=3
step tl_terms3_pf 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline --tune front_proj.act_terms=3 --tune front_proj.wg_prefetch=1
step tl_default 40 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 3 --timeline
