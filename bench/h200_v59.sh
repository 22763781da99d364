#!/usr/bin/env bash
# v59: v58's and v57's untimed leads in one call (bench/NOTES.md v59; a machine is scarce, so
# one call holds both): the q projection in one round with the key jobs (launch.q_splits=2:
# 64 q jobs of 128 KB + 24 key jobs = 88 on 132 CTAs, against 128 + 24 = 152, two rounds)
# as B, the lean plan (ix_score.lean_plan=1, one round trip fewer) as C, both as D, against
# the defaults: index_scoring r8 128K / 512K W1 / W2 (two rounds); the fused index r8 512K
# W1 / W2 with B and D (one round); top-k through the fused index exact with both (~500 s)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-30}
packed_logs v59
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
OUT=$LOGS step prelude 290 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus launch.q_splits=2 --also ix_score.lean_plan=1 \
    --also launch.q_splits=2,ix_score.lean_plan=1 --rounds 2; pack
OUT=$LOGS step prelude_index 150 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus launch.q_splits=2 --also launch.q_splits=2,ix_score.lean_plan=1 --rounds 1; pack
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda \
    --tune launch.q_splits=2,ix_score.lean_plan=1; pack
rm -rf "$LOGS"
