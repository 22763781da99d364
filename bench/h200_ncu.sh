#!/usr/bin/env bash
# v19, first call: Nsight Compute on the kinds whose targets are open (index_scoring rows 8
# W1 / W2, select_hist 512K x 8, the fused index rows 8 W1), one launch each
# (bench/ncu_launch.py), reports as text (details + per-instruction SASS source counters);
# then the fused index with lean lists A/B (v18's prepared next step) and its exactness.
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
prof score_w2 index_scoring --rows 8 --pos 524287 --workload W2
prof score_w1 index_scoring --rows 8 --pos 524287 --workload W1
prof select select_hist --rows 8 --pos 524287
prof index_w1 index --rows 8 --pos 524287 --workload W1
IX=(--kind index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_ab 200 bash -c "python3 -m tools.time_layers ${IX[*]} && \
    python3 -m tools.time_layers ${IX[*]} --tune launch.lean_lists=1"
step topk_lean 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda --tune launch.lean_lists=1
cd "$OUT" && tar czf logs.tgz *.log *-details.txt && rm -f *.log *-details.txt
