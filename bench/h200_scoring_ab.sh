#!/usr/bin/env bash
# One H200 call for the scoring's open question (bench/NOTES.md v9), ~7 min: does CUDA-core
# work overlap a wgmma chain with A from registers / from shared memory, and is the scoring
# with its keys staged in shared memory (--tune ix_score.ss_keys=1) faster than the register
# form, on the same inputs in the same call; plus its exactness end to end. Logs under $OUT.
#   run:  bash bench/h200_scoring_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=8
step proofs_gpu 60 python3 -m pytest -q -m gpu test/test_proofs_gpu.py   # runs the SS atom too
step overlap 90 python3 bench/h200.py --overlap
SC=(--kind index_scoring,index --config glm5 --rows 2,8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step scoring_rs 150 python3 -m tools.time_layers "${SC[@]}"
step scoring_ss 150 python3 -m tools.time_layers "${SC[@]}" --tune ix_score.ss_keys=1
step topk_index_ss 120 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 2,8 --workload W1,W2 --backend cuda --tune ix_score.ss_keys=1
