#!/usr/bin/env bash
# v19, first call: Nsight Compute on the kinds whose targets are open (index_scoring rows 8
# W1 / W2, select_hist 512K x 8, the fused index rows 8 W1), one launch each
# (bench/ncu_launch.py), reports as text (details + per-instruction SASS source counters);
# then the fused index with lean lists A/B (v18's prepared next step) and its exactness.
source "$(dirname "$0")/steps.sh"
export PATH="$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
NCU=(ncu --clock-control none --launch-skip 1 --launch-count 1 --set full --import-source no)
step ncu_version 20 ncu --version
prof() {  # prof NAME KIND ARGS...: one profiled launch, its details and source pages as text
    local name=$1 kind=$2; shift 2
    step "ncu_$name" 150 "${NCU[@]}" -k "regex:^${kind}\$" -o "/tmp/$name" -f \
        python3 bench/ncu_launch.py --kind "$kind" "$@"
    ncu --import "/tmp/$name.ncu-rep" --page details --print-details all > "$OUT/$name-details.txt" 2>&1
    ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass \
        > "/tmp/$name-sass.csv" 2>&1
    gzip -c "/tmp/$name-sass.csv" > "$OUT/$name-sass.csv.gz"
}
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
