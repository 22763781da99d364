#!/usr/bin/env bash
# H200 call for the pre-permuted GEMV weights (gemv_mma flat, prepared in v11, ~3 min): the
# GPU proof tests (the flat GEMV bit-identical to the row-major one at full size), then the
# ceilings and the 8-row GEMV variants with the row-major and the pre-permuted weights in the
# same process (bench/h200.py --quick). Logs under $OUT.
#   run:  bash bench/h200_gemv_flat.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=6
step proofs_gpu 120 python3 -m pytest -q -p no:cacheprovider test/test_proofs_gpu.py
TAIL=14
step gemv_quick 240 python3 bench/h200.py --quick
