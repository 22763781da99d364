#!/usr/bin/env bash
# One H200 call that re-checks and re-times every launch kind, logs under $OUT (default
# ./h200-logs). Sized for one device call (< 10 min): about 7-8 min measured piecewise
# (bench/NOTES.md v5/v6; the overlap probe adds ~1 min). Each step has its own time limit so
# a slow step cannot eat the rest.
#   run:  bash bench/h200_session.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
# the GPU test files by name: the device has no pyelftools, which four CPU-only test modules
# import at collection (code objects)
step gpu_tests 150 python3 -m pytest -q -m gpu test/test_cuda_run.py test/test_front.py \
    test/test_proofs_gpu.py test/test_stages.py test/test_workloads.py test/test_pdl.py test/test_bulk.py
step front_check 60 python3 -m tools.check_layer --kind front --config glm5 --rows 2,4,8 --backend cuda
step front_time 60 python3 -m tools.time_layers --kind front --config glm5 --rows 2,4,8 --backend cuda --timeline
# the GEMV of issue 3: plain, pre-permuted and the pdl chain with the pipeline (NOTES v16)
step gemv_quick 90 python3 bench/h200.py --quick
step topk_select 90 python3 -m tools.check_topk --config glm5 --pos 8191,65535,524287 --rows 2,8 --backend cuda
step topk_index 90 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 --rows 2,8 --workload W1,W2 --backend cuda
step select_time 60 python3 bench/select_h200.py --rows 2,8 --pos 65535,524287
step select_index_scores 90 python3 bench/select_on_index_scores.py
step index_jobs 60 python3 -m tools.time_layers --kind index --config glm5 --rows 8 --pos 524287 --backend cuda --timeline --reps 5 --jobs-csv "$OUT/index_jobs.csv"
step index_matrix 200 python3 bench/index_h200.py --reps 5
# does CUDA-core work overlap a wgmma chain (A from registers / shared memory)? NOTES v9
step overlap 120 python3 bench/h200.py --overlap
