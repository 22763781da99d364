#!/usr/bin/env bash
# v19 call 5: Nsight Compute on the front (issue 5: 3.0x its floor at rows 8) and on the
# scoring's W2 loop with its block-table prefetch (the new default).
source "$(dirname "$0")/steps.sh"
export PATH="$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
NCU=(ncu --clock-control none --launch-skip 1 --launch-count 1 --set full --import-source no)
prof() {  # prof NAME KIND ARGS...: one profiled launch, its details and source pages as text
    local name=$1 kind=$2; shift 2
    step "ncu_$name" 150 "${NCU[@]}" -k "regex:^${kind}\$" -o "/tmp/$name" -f \
        python3 bench/ncu_launch.py --kind "$kind" "$@"
    ncu --import "/tmp/$name.ncu-rep" --page details --print-details all > "$OUT/$name-details.txt" 2>&1
    ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass \
        > "/tmp/$name-sass.csv" 2>&1
    gzip -c "/tmp/$name-sass.csv" > "$OUT/$name-sass.csv.gz"
}
prof front8 front --rows 8
prof score_w2p index_scoring --rows 8 --pos 524287 --workload W2
cd "$OUT" && tar czf logs.tgz *.log *-details.txt && rm -f *.log *-details.txt
