#!/usr/bin/env bash
# H200 call (~8 min): the issue-3 benchmark in one process (ceilings, GEMV rows 1/2/4/8 plain,
# pre-permuted and with the pdl pipeline, the MMA atoms; bench/h200.py), then the front's ring
# depth 8 vs the default without pdl (front rows 2,8; index r8 W1 512K, which also runs
# front_proj).
#   run:  bash bench/h200_v16_final.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=40
step bench 330 python3 bench/h200.py --json "$OUT/bench.json"
TAIL=5
F=(--kind front --config glm5 --rows 2,8 --backend cuda)
step f_default 60 python3 -m tools.time_layers "${F[@]}"
step f_lif8 60 python3 -m tools.time_layers "${F[@]}" --tune front_proj.loads_in_flight=8
I=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1 --backend cuda --reps 5)
step i_default 80 python3 -m tools.time_layers "${I[@]}"
step i_lif8 80 python3 -m tools.time_layers "${I[@]}" --tune front_proj.loads_in_flight=8
