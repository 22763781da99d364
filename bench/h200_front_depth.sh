#!/usr/bin/env bash
# H200 call: the front's weight ring depth (--tune front_proj.loads_in_flight=N, 16-byte loads
# a lane) with pdl, rows 2 and 8, in one call beside the default; the front's timeline with
# pdl; the pdl / CUDA-launch GPU tests first (~4 min).
#   run:  bash bench/h200_front_depth.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
step gpu_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_pdl.py test/test_cuda_run.py
F=(--kind front --config glm5 --rows 2,8 --backend cuda)
step f_default 60 python3 -m tools.time_layers "${F[@]}" --tune launch.pdl=1
for n in 8 24 28; do
    step "f_lif$n" 60 python3 -m tools.time_layers "${F[@]}" --tune "launch.pdl=1,front_proj.loads_in_flight=$n"
done
TAIL=24
step f_timeline 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 5 --timeline --tune launch.pdl=1
