#!/usr/bin/env bash
# H200 call (v21): front_proj.half=f16 with the range maxima reduced a wave first (one LDS
# atomic a wave, not a thread) against the default, same call; check_layer of the f16 form.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
H=(--tune front_proj.half=f16)
step check_f16 120 python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda "${H[@]}" --dump $OUT/d1
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
for i in 1 2; do
  step f_def$i 60 python3 -m tools.time_layers "${F[@]}"
  step f_f16$i 60 python3 -m tools.time_layers "${F[@]}" "${H[@]}"
done
TAIL=8
step t_f16 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 5 --timeline "${H[@]}"
