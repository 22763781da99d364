#!/usr/bin/env bash
# v39, third call: Nsight Compute on the fused index r8 W1 at 512K as the defaults now build
# it (last profiled in v19, before the bf16 head sum, the lean scan, the refined first digits
# and row parts): where sel_h1's scan waits inside the fused kernel (11.4 us there against
# ~8.6 in select_hist, v39 call 1), and the scoring loop's stalls beside it. Read with
# `python3 bench/ncu_sass.py FILE --regions` / `--span A B`.
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
TAIL=${TAIL:-6}
prof index_w1 index --rows 8 --pos 524287 --workload W1
cd "$OUT" && tar czf v39c-logs.tgz *.log *-details.txt && rm -f *.log *-details.txt
