#!/usr/bin/env bash
# v41 (prepared in session 34): the group skip's adoption question, on the fused index r8 at
# 512K. v40 measured it on W1 only in its current form (the maxima's swaps under the next
# chain, B/A 0.987) and on W1 / W2 in the earlier form (1.006 / 0.995); the tree now also has
# the maxima without their per-score select (untimed). (1) top-k exact,
# (2) the A/B on W1 and W2 with three rounds, (3) W2's timeline (sel_h1's scan and the
# scoring's tallies: W2's groups also run the narrow one-pair chains, whose maxima are
# swapped at once), (4) lean_spans alone against the defaults (how much of the gain is the
# spans loop's). Adopt (sm_90a fused index default) if (2) is below 0.99 on both.
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-6}
packed_logs v41
TL="python3 -m tools.time_layers --config glm5 --pos 524287 --backend cuda --kind index --rows 8"
G=launch.lean_spans=1,launch.group_max=1
OUT=$LOGS step topk 60 python3 -m tools.check_topk --through index --config glm5 \
    --pos 524287 --rows 2,8 --workload W1,W2 --backend cuda --tune $G; pack
OUT=$LOGS step vs_groups 260 $TL --workload W1,W2 --reps 5 --versus $G --rounds 3; pack
OUT=$LOGS step tl_w2 45 $TL --workload W2 --reps 3 --timeline --tune $G \
    --jobs-csv "$LOGS/groups_w2.csv"; pack
OUT=$LOGS step vs_spans 200 $TL --workload W1,W2 --reps 5 --versus launch.lean_spans=1 \
    --rounds 2; pack
rm -rf "$LOGS"
