#!/usr/bin/env bash
# v52 (prepared in session 40, untimed: its device time was spent): on whatever card comes
# (the issues' targets are an H200's: ask for one; say which card gave each figure)
#   1 the GPU tests of this session: the warning for a TMA descriptor first made inside a
#     graph capture (test_proofs_gpu), the TMA proofs
#   2 the front's weight boxes before the pdl wait (front_proj.boxes_before_wait, new): exact
#     (check_layer with pdl), then in a pdl chain A = defaults + pdl, B = A + the early
#     boxes, C = the defaults without pdl
#   3 v51's defaults on this card against the old forms: the front kind (A new, B the bf16
#     tile), select_hist r4 / r8 (B fine_digits=0), the fused index r4 (B tail_finish=0: v51
#     timed it one round) and r8
#   4 exactness of the fused index's new r4 default
#   (3 also: select_hist's fold with a long row's own unroll, sel_h1.segment_unroll_long=16
#   (new): v51's 16 throughout was 0.977 at 512K but 1.035 at 64K)
#   PART=a runs steps 1-3 but the fused index, PART=b the rest (one device call holds 600 s:
#   session 41 ran it so, as two calls on one warm machine); unset, everything
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
PART=${PART:-ab}
packed_logs v52$([ "$PART" = b ] && echo b)
TL="python3 -m tools.time_layers --config glm5 --backend cuda --reps 5"
EB=launch.pdl=1,front_proj.boxes_before_wait=1
if [[ $PART == *a* ]]; then
OUT=$LOGS step gpu_tests 120 python3 -m pytest -q -m gpu test/test_proofs_gpu.py \
    test/test_tma.py test/test_pdl.py; pack
OUT=$LOGS step front_check 60 python3 -m tools.check_layer --kind front --config glm5 \
    --rows 2,8 --kv fp8 --backend cuda --tune $EB; pack
OUT=$LOGS step vs_early 90 $TL --kind front --rows 2,8 --tune launch.pdl=1 \
    --versus front_proj.boxes_before_wait=1 --also launch.pdl=0 --rounds 3; pack
OUT=$LOGS step vs_front 90 $TL --kind front --rows 2,4,8 \
    --versus front_proj.act_terms=0,front_proj.tma_weights=0 --rounds 2; pack
OUT=$LOGS step vs_sel 120 $TL --kind select_hist --rows 4,8 --pos 65535,524287 \
    --versus launch.fine_digits=0 --also sel_h1.segment_unroll_long=16 \
    --also sel_h1.segment_unroll=16 --rounds 2; pack
fi
if [[ $PART == *b* ]]; then
OUT=$LOGS step vs_ix 200 $TL --kind index --rows 4,8 --pos 524287 --workload W1,W2 \
    --versus launch.tail_finish=0 --rounds 2; pack
OUT=$LOGS step topk_ix 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 4,8 --workload W1,W2 --backend cuda; pack
fi
rm -rf "$LOGS"
