#!/usr/bin/env bash
# v59 (bench/NOTES.md v59): the untimed leads of v57-v59 in one call (a machine is scarce):
#   B launch.q_splits=2: 64 q jobs of 128 KB + 24 key jobs = 88 on 132 CTAs, one round,
#     against 128 + 24 = 152 (v58: the second round's heads end last, ~1.3 us after ix_key)
#   C launch.poll_backoff=8: every wait pauses 512 ns between polls, not 64 (v59's question:
#     do ~1000 waiting warps polling the same few lines, ix_nb's counter and the q heads'
#     pairs, slow the L2 slice they live on, and with it the handoffs (~1-1.6 us each) and
#     the projections' loads?)
#   D ix_score.one_poller=1: wave 0 alone polls a scoring job's inputs, then the CTA's
#     barrier (8x fewer polls of those lines)
# index_scoring r8 128K / 512K W1 / W2 (two rounds); the fused index r8 512K W1 / W2 with B,
# C and D (one round); top-k through the fused index exact with B, C and D (~440 s).
# v57's ix_score.lean_plan waits for the next call (PART=l bash bench/h200_v57.sh)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-30}
packed_logs v59
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
OUT=$LOGS step prelude 270 $TL --kind index_scoring --rows 8 --pos 131071,524287 \
    --workload W1,W2 --versus launch.q_splits=2 --also launch.poll_backoff=8 \
    --also ix_score.one_poller=1 --rounds 2; pack
OUT=$LOGS step prelude_index 120 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus launch.q_splits=2 --also launch.poll_backoff=8 --also ix_score.one_poller=1 \
    --rounds 1; pack
OUT=$LOGS step topk 50 python3 -m tools.check_topk --through index --config glm5 \
    --pos 131071 --rows 8 --workload W1,W2 --backend cuda \
    --tune launch.q_splits=2,launch.poll_backoff=8,ix_score.one_poller=1; pack
rm -rf "$LOGS"
