#!/usr/bin/env bash
# H200 call for the launch kinds linked with pdl (--tune launch.pdl=1; ~7 min): the front
# checked against the reference with pdl and its digests compared with the plain launch's,
# exact top-k through index with pdl, then time_layers plain vs pdl in the same call: front
# rows 2,4,8; index_scoring and index at 512K x 8 (W1, W2) and rows 2; select_hist 512K x 8.
#   run:  bash bench/h200_pdl_kinds.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
P=(--tune launch.pdl=1)
step front_check 150 bash -c "python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8,bf16 --backend cuda --dump $OUT/d_plain && python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8,bf16 --backend cuda --dump $OUT/d_pdl ${P[*]} && python3 -m tools.check_layer --compare $OUT/d_plain $OUT/d_pdl"
step topk_pdl 150 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 --rows 2,8 --workload W1 --backend cuda "${P[@]}"
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
step front_plain 60 python3 -m tools.time_layers "${F[@]}"
step front_pdl 60 python3 -m tools.time_layers "${F[@]}" "${P[@]}"
S=(--kind index_scoring,index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step idx_plain 150 python3 -m tools.time_layers "${S[@]}"
step idx_pdl 150 python3 -m tools.time_layers "${S[@]}" "${P[@]}"
T=(--kind select_hist --config glm5 --rows 8 --pos 524287 --backend cuda)
step sel_plain 60 python3 -m tools.time_layers "${T[@]}"
step sel_pdl 60 python3 -m tools.time_layers "${T[@]}" "${P[@]}"
