#!/usr/bin/env bash
# v25 call 3: the row finish again now that the stages' LDS is overlaid (v24 measured it
# with its LDS stacked on the kernel's: select_hist 30.3, index W1 130-132 against 25 / 120).
source "$(dirname "$0")/steps.sh"
TAIL=${TAIL:-3}
FIN=launch.finish_max=512
step topk_fin 80 python3 -m tools.check_topk --config glm5 --pos 524287 --rows 8 \
    --backend cuda --first-digits buffer --tune $FIN
SC=(--kind select_hist --config glm5 --rows 8 --pos 65535,524287 --backend cuda --reps 5)
IX=(--kind index --config glm5 --rows 8 --pos 524287 --workload W1,W2 --backend cuda --reps 3)
step sel 30 python3 -m tools.time_layers "${SC[@]}"
step sel_fin 30 python3 -m tools.time_layers "${SC[@]}" --tune $FIN
step ix 50 python3 -m tools.time_layers "${IX[@]}"
step ix_fin 50 python3 -m tools.time_layers "${IX[@]}" --tune $FIN
step sel2 30 python3 -m tools.time_layers "${SC[@]}"
step sel_fin2 30 python3 -m tools.time_layers "${SC[@]}" --tune $FIN
