#!/usr/bin/env bash
# H200 call for the GEMV's weights by bulk copies into LDS (ops bulk_load_lds / mbarrier,
# prepared in v13, not yet run on a GPU; ~4 min): the bulk-copy tests and the GPU proof tests
# (the bulk GEMV bit-identical to the row-major one at full size), then the ceilings and the
# GEMV row-major / flat / bulk at rows 8, 1, 2 and K split 1, 3 in one process
# (bench/h200.py --bulk). Logs under $OUT.
#   run:  bash bench/h200_bulk.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=6
step bulk_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_bulk.py test/test_proofs_gpu.py
TAIL=22
step gemv_bulk 300 python3 bench/h200.py --bulk
