#!/usr/bin/env bash
# H200 call (~4 min): the front's new sm_90a default (two 4-warp CTAs an SM, K split 6, the
# weight ring unrolled): the GPU front tests, check_layer rows 2,4,8 fp8 / bf16 twice (digests
# run to run), time_layers rows 2,4,8 plain and with pdl, and its timeline at rows 8.
#   run:  bash bench/h200_front_v16.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
step gpu_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_front.py test/test_pdl.py -m gpu
step check 200 bash -c "python3 -m tools.check_layer --kind front --config glm5 --rows 2,4,8 --kv fp8,bf16 --backend cuda --dump $OUT/c0 && python3 -m tools.check_layer --kind front --config glm5 --rows 2,4,8 --kv fp8,bf16 --backend cuda --dump $OUT/c1 && python3 -m tools.check_layer --compare $OUT/c0 $OUT/c1"
F=(--kind front --config glm5 --rows 2,4,8 --backend cuda)
step f_plain 60 python3 -m tools.time_layers "${F[@]}"
step f_pdl 60 python3 -m tools.time_layers "${F[@]}" --tune launch.pdl=1
TAIL=12
step f_timeline 60 python3 -m tools.time_layers --kind front --config glm5 --rows 8 --backend cuda --reps 5 --timeline
