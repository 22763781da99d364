#!/usr/bin/env bash
# v51: the new sm_90a defaults (the front kind's fp8 tile with weights by TMA, 2 terms;
# select_hist's refined-digit tail with the group skip at rows >= 4) checked and timed
# against the old ones, with the timing harness's warm-up now over a graph's whole input
# rotation (v50b: a TMA descriptor first seen inside the capture put its host copy into the
# graph, every first round ~1-2 us a launch slower); then the keys by TMA in index_scoring,
# v20-v21's "10-14% slower" timed under that artefact:
#   1 check_layer front (defaults), check_topk select_hist (defaults)
#   2 the front, rows 2 / 4 / 8: A defaults, B the old bf16 tile, C = A + pdl
#   3 select_hist r4 / r8: A defaults, B the old (fine_digits=0), C = A + 16-wide fold
#   4 index_scoring 512K W1 / W2: r8 A vs the keys by TMA; r2 A vs TMA at 16 warps and at 8
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
packed_logs v51
TK=ix_score.tma_keys=1
IS="python3 -m tools.time_layers --kind index_scoring --config glm5 --backend cuda --reps 5 --pos 524287"
OUT=$LOGS step front_check 60 python3 -m tools.check_layer --kind front --config glm5 \
    --rows 2,4,8 --kv fp8,bf16 --backend cuda; pack
OUT=$LOGS step topk_sel 60 python3 -m tools.check_topk --config glm5 --backend cuda \
    --first-digits buffer --pos 65535,524287 --rows 2,4,8 \
    --dist normal,nan,neginf,few,above2048,allequal; pack
OUT=$LOGS step vs_front 90 python3 -m tools.time_layers --kind front --config glm5 \
    --backend cuda --reps 5 --rows 2,4,8 --versus front_proj.act_terms=0,front_proj.tma_weights=0 \
    --also launch.pdl=1 --rounds 2; pack
OUT=$LOGS step vs_sel 90 python3 -m tools.time_layers --kind select_hist --config glm5 \
    --backend cuda --reps 5 --rows 4,8 --pos 65535,524287 --versus launch.fine_digits=0 \
    --also sel_h1.segment_unroll=16 --rounds 2; pack
OUT=$LOGS step vs_tk8 120 $IS --rows 8 --workload W1,W2 --versus $TK --rounds 2; pack
OUT=$LOGS step vs_tk2 120 $IS --rows 2 --workload W1,W2 \
    --versus $TK,ix_score.tma_slots=2,launch.waves=16 --also $TK --rounds 2; pack
rm -rf "$LOGS"
