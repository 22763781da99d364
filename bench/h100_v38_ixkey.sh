#!/usr/bin/env bash
# v38 (session 32): ix_key's new tunables on the fused index r8 at 512K (W1): where its
# phase 0 went (v37's committed form: 11.5 us against v36's 4.6) and whether its rows'
# round trips after the wait can pair up. Timelines first (ix_key's phases, ix_q's last end,
# the scoring's p0), then A/B in one process each, then the GPU check of the tuned form.
# Logs packed after every step (the device returns 8 files). ix_key.rows_at_once was removed
# after this ran (no change measured); its steps (tl_sf2, vs_sf2, and ck's second tune) are
# gone from here.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v38
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
SF="--tune ix_key.scales_first=1"
OUT=$LOGS step tl_sf 45 $TL --workload W1 --reps 3 --timeline $SF --jobs-csv "$LOGS/sf.csv"; pack
OUT=$LOGS step vs_sf 130 $TL --workload W1 --reps 5 --versus ix_key.scales_first=1 --rounds 2; pack
OUT=$LOGS step ck 60 python3 -m tools.check_layer --kind index --config glm5 --rows 8 --kv fp8 \
    --backend cuda $SF; pack
OUT=$LOGS step vs_nb 130 $TL --workload W1 --reps 5 $SF --versus ix_score.nb_first=1 --rounds 2; pack
rm -rf "$LOGS"
