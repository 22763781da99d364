#!/usr/bin/env bash
# v39, second call: sel_h1's scan in the fused index r8 at 512K. The v39 timeline puts it at
# 11.4 us (p2 -> p3, median) after the scoring's last end: 128 KB a slice in 8 iterations of
# 16 keys a lane, one iteration's loads in flight (16 KB an SM), ~1.4 us an iteration against
# ~0.55 us of issue: latency, not the stream. Two zero-code forms with more bytes in flight:
# lean_refill=2 (two register sets, loads two iterations ahead) and lean_lane_keys=32 (32
# keys a lane, half the iterations). A/B in one process, W1 and W2, then the timeline and
# the top-k of the one that wins.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-4}
packed_logs v39b
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
OUT=$LOGS step vs_wide 200 $TL --workload W1,W2 --reps 5 --versus sel_h1.lean_lane_keys=32 \
    --rounds 2; pack
OUT=$LOGS step vs_refill 200 $TL --workload W1,W2 --reps 5 --versus sel_h1.lean_refill=2 \
    --rounds 2; pack
OUT=$LOGS step tl_wide 45 $TL --workload W1 --reps 3 --timeline \
    --tune sel_h1.lean_lane_keys=32 --jobs-csv "$LOGS/wide.csv"; pack
OUT=$LOGS step topk_wide 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune sel_h1.lean_lane_keys=32; pack
rm -rf "$LOGS"
