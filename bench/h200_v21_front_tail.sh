#!/usr/bin/env bash
# H200 call (v21): the front's post jobs with their norm weights, rope angles and rope
# partial sums taken before / with the wait (one L2 round trip after the projection is
# visible instead of three), against the previous commit unpacked in _old/ (same call):
#   rm -rf _old && mkdir _old && git archive HEAD~1 | tar -x -C _old   (here, before the call)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
step gpu_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_front.py -m gpu
step check 120 python3 -m tools.check_layer --kind front --config glm5 --rows 2,4,8 --kv fp8,bf16 --backend cuda --dump $OUT/c0
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
for i in 1 2; do
  step f_old$i 60 bash -c "cd _old && python3 -m tools.time_layers ${F[*]}"
  step f_new$i 60 python3 -m tools.time_layers "${F[@]}"
done
TAIL=12
step f_timeline 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 5 --timeline
I=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1 --backend cuda --reps 5)
step i_old 120 bash -c "cd _old && python3 -m tools.time_layers ${I[*]}"
step i_new 120 python3 -m tools.time_layers "${I[@]}"
