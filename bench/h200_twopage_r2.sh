#!/usr/bin/env bash
# H200 call closing v11 (~3 min): the fused index at rows 2 with the new default (two pages a
# step in rows-2 builds) vs a page a step, W1 / W2 at 512K keys; its top-k end to end; the GPU
# test files of the stages on the new defaults. Logs under $OUT.
#   run:  bash bench/h200_twopage_r2.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=6
SC=(--config glm5 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_r2_two 60 python3 -m tools.time_layers --kind index --rows 2 "${SC[@]}"
step index_r2_one 60 python3 -m tools.time_layers --kind index --rows 2 "${SC[@]}" \
    --tune ix_score.pages_per_step=1
step topk_r2 60 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2 --workload W1,W2 --backend cuda
step gpu_tests 90 python3 -m pytest -q -p no:cacheprovider test/test_stages.py test/test_workloads.py
