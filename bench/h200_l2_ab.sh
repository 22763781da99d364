#!/usr/bin/env bash
# One H200 call A/B-ing L2 prefetches ahead of a wait (~6 min): select_hist (64K / 512K keys,
# rows 2 / 8) without and with sel_h0 asking the L2 for its slice's scores
# (sel_h0.l2_prefetch=1), the tuned build's timeline and exactness; the fused index (512K,
# rows 8, W1 / W2) without and with the q projection jobs asking for their weights before
# they wait for qr (ix_proj.l2_prefetch=1); the timelines of index and index_scoring (rows 8,
# W1: where the time before the scoring goes). Eight logs under $OUT.
#   run:  bash bench/h200_l2_ab.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-8}
SC=(--kind select_hist --config glm5 --rows 2,8 --pos 65535,524287 --backend cuda --reps 5)
SEL=sel_h0.l2_prefetch=1
step sel_base 120 python3 -m tools.time_layers "${SC[@]}"
step sel_tuned 120 python3 -m tools.time_layers "${SC[@]}" --tune "$SEL"
step sel_tuned_timeline 90 python3 -m tools.time_layers --kind select_hist --config glm5 --rows 8 \
    --pos 524287 --backend cuda --reps 3 --timeline --tune "$SEL"
step topk_tuned 150 python3 -m tools.check_topk --config glm5 --pos 65535,524287 --rows 2,8 \
    --backend cuda --tune "$SEL"
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 5)
step index_base 150 python3 -m tools.time_layers "${IX[@]}"
step index_tuned 150 python3 -m tools.time_layers "${IX[@]}" --tune ix_proj.l2_prefetch=1
TAIL=30
step index_timeline 90 python3 -m tools.time_layers --kind index --config glm5 --rows 8 \
    --pos 524287 --workload W1 --backend cuda --reps 3 --timeline
step scoring_timeline 90 python3 -m tools.time_layers --kind index_scoring --config glm5 --rows 8 \
    --pos 524287 --workload W1 --backend cuda --reps 3 --timeline
