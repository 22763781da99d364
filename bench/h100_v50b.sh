#!/usr/bin/env bash
# v50, second call (the selection's steps first: they decide a default): the selection's
# static form and the tail after refined first digits on this card; the fused index's new
# default (the tail finish at rows 8) exact through check_topk; the front's TMA form with the
# staging's loads before the boxes, checked, timed against the defaults and the register fp8
# form, and its timeline.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
packed_logs v50b
F3=front_proj.act_terms=3
FR="python3 -m tools.time_layers --kind front --config glm5 --backend cuda --reps 5"
# the selection's static five-option form against the defaults on this card (issue 7's 20 us
# is an H200's: v45 / v50 measured it on H100s only); C / D: the tail after REFINED first
# digits (10-bit bins, as the fused index, where the tail wins at 64K too: v50 0.974 / 0.927;
# select_hist's 64K loss is the 6-bit bin holding ~2K keys a slice), with / without the
# maxima; exact in the interpreter (check_topk tiny, 39 of 39)
TF=launch.fine_digits=1,launch.tail_finish=1
OUT=$LOGS step vs_sel 120 python3 -m tools.time_layers --kind select_hist --config glm5 \
    --backend cuda --rows 8 --reps 5 --pos 65535,524287 \
    --versus launch.tail_finish=1,launch.group_max=1,sel_h1.segment_unroll=16 \
    --also $TF --also $TF,launch.group_max=1,sel_h1.segment_unroll=16 --rounds 2; pack
OUT=$LOGS step topk_fine 60 python3 -m tools.check_topk --config glm5 --backend cuda \
    --first-digits buffer --pos 65535,524287 --rows 8 \
    --dist normal,nan,neginf,few,above2048,allequal --tune $TF; pack
OUT=$LOGS step topk_ix 90 python3 -m tools.check_topk --through index --config glm5 \
    --pos 65535,524287 --rows 8 --workload W1,W2 --backend cuda; pack
OUT=$LOGS step front_check 40 python3 -m tools.check_layer --kind front --config glm5 \
    --rows 8 --kv fp8 --backend cuda --tune $F3 --tune front_proj.tma_weights=1; pack
# (D: two terms, about bf16's precision of h, as the model rounds it: a staging of ~2/3 the
# instructions; v26 found T = 2 within check_layer's tolerances on the H200)
OUT=$LOGS step vs_front 80 $FR --rows 2,8 --versus $F3,front_proj.tma_weights=1 --also $F3 \
    --also front_proj.act_terms=2,front_proj.tma_weights=1 --rounds 2; pack
OUT=$LOGS step tl_front 40 $FR --rows 8 --reps 3 --timeline --tune $F3 \
    --tune front_proj.tma_weights=1; pack
rm -rf "$LOGS"
