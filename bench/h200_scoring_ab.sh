#!/usr/bin/env bash
# One H200 call for the scoring's open question (bench/NOTES.md v9), ~4 min: does CUDA-core
# work overlap a wgmma chain with A from registers / from shared memory, and is the scoring
# with its keys staged in shared memory (--tune ix_score.ss_keys=1) faster than the register
# form, on the same inputs in the same call; plus its exactness end to end. Logs under $OUT.
#   run:  bash bench/h200_scoring_ab.sh            (on the device machine)
set -uo pipefail
OUT=${OUT:-h200-logs}
mkdir -p "$OUT"
step() {  # step NAME SECONDS COMMAND...: run, keep its log, print its tail
    local name=$1 secs=$2; shift 2
    timeout "$secs" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name (rc $?)"; grep -v "it/s" "$OUT/$name.log" | tail -n 8 | cut -c1-200
}
step proofs_gpu 60 python3 -m pytest -q -m gpu test/test_proofs_gpu.py   # runs the SS atom too
step overlap 90 python3 bench/h200.py --overlap
SC=(--kind index_scoring,index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step scoring_rs 90 python3 -m tools.time_layers "${SC[@]}"
step scoring_ss 90 python3 -m tools.time_layers "${SC[@]}" --tune ix_score.ss_keys=1
step topk_index_ss 120 python3 -m tools.check_topk --through index --config glm5 --pos 8191,524287 \
    --rows 4,8 --workload W1,W2 --backend cuda --tune ix_score.ss_keys=1
