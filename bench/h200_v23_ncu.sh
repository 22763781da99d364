#!/usr/bin/env bash
# v23 call 4: Nsight Compute on select_hist 512K x 8 (the lean listing loop, default and
# lean_coalesced): per-instruction stall samples of sel_h1's scan.
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
prof selh8 select_hist --rows 8 --pos 524287
cd "$OUT" && tar czf logs.tgz *.log *-details.txt && rm -f *.log *-details.txt
