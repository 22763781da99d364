#!/usr/bin/env bash
# v55: the scoring's warpgroups in a ping-pong with the head sum inside it
# (ix_score.turns=1 + ix_score.turn_split=S, new, opt-in): the all-pairs chain issued in two
# turns (its first S K chunks, the rest), the bf16 head sum in a third, warpgroup 1 a turn
# behind, so each warpgroup's head sum reaches the tensor cores between the other's two
# chain parts. On whatever card comes (say which). Every A/B in one process.
#   PART=a: 1 index_scoring 512K r8, W1 / W2: A = defaults, B = split 1, C = turns alone
#             (v10's form, never timed with the bf16 head sum), D = split 2
#           2 exact: index_scoring r8 digests equal to the defaults'
#           3 index_scoring 512K r4: A, B, D
#           4 top-k through the fused index with split 1, r8 512K W1 / W2
#   PART=b: 1 the split build's cycle accounts (r8 W1 timeline)
#           2 the fused index r8 512K W1 / W2, A / B
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-10}
packed_logs "v55${PART:-a}"
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
SP=ix_score.turns=1,ix_score.turn_split=1
if [ "${PART:-a}" = a ]; then
OUT=$LOGS step vs_scoring8 200 $TL --kind index_scoring --rows 8 --pos 524287 \
    --workload W1,W2 --versus $SP --also ix_score.turns=1 \
    --also ix_score.turns=1,ix_score.turn_split=2 --rounds 2; pack
OUT=$LOGS step check 100 bash -c "python3 -m tools.check_layer --kind index_scoring \
    --config glm5 --rows 8 --kv fp8 --backend cuda --dump $LOGS/d_def && python3 -m \
    tools.check_layer --kind index_scoring --config glm5 --rows 8 --kv fp8 --backend cuda \
    --tune $SP --dump $LOGS/d_split && python3 -m tools.check_layer --compare $LOGS/d_def \
    $LOGS/d_split"; pack
rm -rf "$LOGS/d_def" "$LOGS/d_split"
OUT=$LOGS step vs_scoring4 120 $TL --kind index_scoring --rows 4 --pos 524287 \
    --workload W1,W2 --versus $SP --also ix_score.turns=1,ix_score.turn_split=2 --rounds 2; pack
OUT=$LOGS step topk 100 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 8 --workload W1,W2 --backend cuda --tune $SP; pack
else
OUT=$LOGS step timeline 80 $TL --kind index_scoring --rows 8 --pos 524287 --workload W1 \
    --timeline --tune $SP; pack
OUT=$LOGS step vs_index 200 $TL --kind index --rows 8 --pos 524287 --workload W1,W2 \
    --versus $SP --rounds 2; pack
fi
rm -rf "$LOGS"
