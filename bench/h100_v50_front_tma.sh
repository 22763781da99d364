#!/usr/bin/env bash
# v50: v49's keyed selection (never ran: no machine for two sessions) and the front's fp8
# tile with its weights by TMA (front_proj.tma_weights, new: every block of a job asked for
# at its start, read by the SS wgmma; v26's register form's staging waited behind its proxy
# fence). In order of what decides most, packed after each (the call may be cut at 600 s):
#   1 select_hist r8 64K / 128K / 512K: A defaults, B the keyed tail + maxima + 16-wide fold,
#     C v45's static form, D = B + the keyed group skip, E the keyed tail alone
#   2 the front with weights by TMA: check_layer (exact on the hardware?), then rows 2 / 8:
#     A the bf16 tile (default), B the fp8 tile (3 terms), C = B + tma_weights; a timeline
#   3 the keyed selection's exactness on every distribution
#   4 the fused index r8 W1 / W2 at 64K / 512K: B the static tail, C the keyed tail, D the
#     keyed group skip
#   5 index_scoring W2 at rows 8 / 4 / 2 (below)
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v50
K=launch.tail_min_keys=${MIN_KEYS:-98304}  # (96K: 64K rows the rounds, 128K rows the tail)
G=launch.group_max=1
U=sel_h1.segment_unroll=16
M=sel_h1.group_skip_min_keys=${MIN_KEYS:-98304}
F3=front_proj.act_terms=3
SH="python3 -m tools.time_layers --kind select_hist --config glm5 --backend cuda --rows 8 --reps 5"
FR="python3 -m tools.time_layers --kind front --config glm5 --backend cuda --reps 5"
IX="python3 -m tools.time_layers --kind index --config glm5 --backend cuda --rows 8 --reps 5"
OUT=$LOGS step vs_sel 200 $SH --pos 65535,131071,524287 --versus $K,$G,$U \
    --also launch.tail_finish=1,$G,$U --also $K,$G,$U,$M --also $K --rounds 2; pack
OUT=$LOGS step front_check 60 python3 -m tools.check_layer --kind front --config glm5 \
    --rows 2,8 --kv fp8,bf16 --backend cuda --tune $F3 --tune front_proj.tma_weights=1; pack
OUT=$LOGS step vs_front 90 $FR --rows 2,8 --versus $F3 --also $F3,front_proj.tma_weights=1 \
    --rounds 2; pack
OUT=$LOGS step tl_front 45 $FR --rows 8 --reps 3 --timeline --tune $F3 \
    --tune front_proj.tma_weights=1; pack
OUT=$LOGS step topk_keyed 70 python3 -m tools.check_topk --config glm5 --backend cuda \
    --first-digits buffer --pos 65535,524287 --rows 8 \
    --dist normal,nan,neginf,few,above2048,allequal --tune $K,$G; pack
OUT=$LOGS step vs_ix 150 $IX --pos 65535,524287 --workload W1,W2 --versus launch.tail_finish=1 \
    --also $K --also $M --rounds 1; pack
# 5 (if the call has time left) the scoring alone on W2 against DeepGEMM's H200 figures
#   (issue 6: 8 rows 19.6 / 29.2 / 50.4 us at 128K / 256K / 512K, 4 rows 16.0 / 25.3 / 40.1,
#   2 rows 13.2 / 18.6 / 29.5): no H200 figure of the v33-v36 defaults exists
OUT=$LOGS step ix_w2 90 python3 -m tools.time_layers --kind index_scoring --config glm5 \
    --backend cuda --rows 8,4,2 --pos 131071,262143,524287 --workload W2 --reps 5; pack
rm -rf "$LOGS"
