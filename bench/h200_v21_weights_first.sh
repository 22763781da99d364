#!/usr/bin/env bash
# H200 call (v21): the projection's first weight loads issued before the activations' on
# NVIDIA (ptxas had hoisted the staging's arithmetic above them), against the previous
# commit unpacked in _old/ (same call), and the f16 form with it:
#   rm -rf _old && mkdir _old && git archive HEAD~1 | tar -x -C _old   (here, before the call)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-5}
step check 90 python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda --dump $OUT/c0
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
step f_old 40 bash -c "cd _old && python3 -m tools.time_layers ${F[*]}"
step f_new 40 python3 -m tools.time_layers "${F[@]}"
step f_f16 40 python3 -m tools.time_layers "${F[@]}" --tune front_proj.half=f16
step f_old2 40 bash -c "cd _old && python3 -m tools.time_layers ${F[*]}"
step f_new2 40 python3 -m tools.time_layers "${F[@]}"
