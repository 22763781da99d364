# Sourced by the bench/h200_ncu*.sh device scripts (after steps.sh): Nsight Compute on the
# lent H200 (ncu reads the hardware counters there; leave the clocks alone), and
#   prof NAME KIND ARGS...   one profiled launch of KIND (bench/ncu_launch.py ARGS), its
#                            details page into $OUT/NAME-details.txt and its SASS source page
#                            (per-instruction stall samples) into $OUT/NAME-sass.csv.gz
export PATH="$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)"
NCU=(ncu --clock-control none --launch-skip 1 --launch-count 1 --set full --import-source no)
prof() {
    local name=$1 kind=$2; shift 2
    step "ncu_$name" 150 "${NCU[@]}" -k "regex:^${kind}\$" -o "/tmp/$name" -f \
        python3 bench/ncu_launch.py --kind "$kind" "$@"
    ncu --import "/tmp/$name.ncu-rep" --page details --print-details all > "$OUT/$name-details.txt" 2>&1
    ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass \
        > "/tmp/$name-sass.csv" 2>&1
    gzip -c "/tmp/$name-sass.csv" > "$OUT/$name-sass.csv.gz"
}
