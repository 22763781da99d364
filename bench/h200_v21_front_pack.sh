#!/usr/bin/env bash
# H200 call (v21): the projection tiles' fp8 weights packed to bf16 pairs by cvt.rn.bf16x2.f32
# (one instruction a pair, exact) instead of the shift / mask packing, against the previous
# commit unpacked in _old/ (same call):
#   rm -rf _old && mkdir _old && git archive HEAD~1 | tar -x -C _old   (here, before the call)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
step check 120 python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda --dump $OUT/c0
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
for i in 1 2; do
  step f_old$i 60 bash -c "cd _old && python3 -m tools.time_layers ${F[*]}"
  step f_new$i 60 python3 -m tools.time_layers "${F[@]}"
done
I=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1 --backend cuda --reps 5)
step i_old 90 bash -c "cd _old && python3 -m tools.time_layers ${I[*]}"
step i_new 90 python3 -m tools.time_layers "${I[@]}"
