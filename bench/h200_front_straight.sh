#!/usr/bin/env bash
# H200 call (~4 min): the front's projection ring unrolled (front_proj.straight=1) against
# the default, rows 2 and 8, in one call; with ring depths 16 / 8; and with 4-wave CTAs two
# an SM (grid 264, K split 6) both ways (bench/front_variants.py); then the straight build's
# digests against the default's.
#   run:  bash bench/h200_front_straight.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-5}
F=(--kind front --config glm5 --rows 2,8 --backend cuda)
step f_default 60 python3 -m tools.time_layers "${F[@]}"
step f_straight 60 python3 -m tools.time_layers "${F[@]}" --tune front_proj.straight=1
step f_straight8 60 python3 -m tools.time_layers "${F[@]}" --tune front_proj.straight=1,front_proj.loads_in_flight=8
step f_default2 60 python3 -m tools.time_layers "${F[@]}"
TAIL=30
step variants 150 python3 bench/front_variants.py --rows 8,2 --waves 4 --grids 264 --splits 6 --tune front_proj.straight=1
step variants_base 150 python3 bench/front_variants.py --rows 8,2 --waves 4 --grids 264 --splits 6
TAIL=4
step digests 150 bash -c "python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda --dump $OUT/d0 && python3 -m tools.check_layer --kind front --config glm5 --rows 2,8 --kv fp8 --backend cuda --dump $OUT/d1 --tune front_proj.straight=1 && python3 -m tools.check_layer --compare $OUT/d0 $OUT/d1"
