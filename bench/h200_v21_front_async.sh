#!/usr/bin/env bash
# H200 call (v21): the front's weights by async copies into LDS (front_proj.async_weights:
# the whole job's 64 KB requested at once, no register ring) against the default, same
# call; digests of the tuned launch against the default's (the same MMAs: equal bits).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
A=(--tune front_proj.async_weights=1)
C=(--kind front --config glm5 --rows 2,4,8 --kv fp8,bf16 --backend cuda)
step check_def 120 python3 -m tools.check_layer "${C[@]}" --dump $OUT/d0
step check_async 120 python3 -m tools.check_layer "${C[@]}" "${A[@]}" --dump $OUT/d1
step compare 30 python3 -m tools.check_layer --compare $OUT/d0 $OUT/d1
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
for i in 1 2; do
  step f_def$i 60 python3 -m tools.time_layers "${F[@]}"
  step f_async$i 60 python3 -m tools.time_layers "${F[@]}" "${A[@]}"
done
TAIL=12
step t_async 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 5 --timeline "${A[@]}"
