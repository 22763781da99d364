#!/usr/bin/env bash
# v19 call 5: Nsight Compute on the front (issue 5: 3.0x its floor at rows 8) and on the
# scoring's W2 loop with its block-table prefetch (the new default).
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/ncu_steps.sh"
prof front8 front --rows 8
prof score_w2p index_scoring --rows 8 --pos 524287 --workload W2
cd "$OUT" && tar czf logs.tgz *.log *-details.txt && rm -f *.log *-details.txt
