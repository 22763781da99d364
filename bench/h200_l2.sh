#!/usr/bin/env bash
# H200 call for bulk L2 prefetches (op prefetch_l2, ~4 min): the prefetch tests and the GPU
# proof tests (the GEMV with l2_prefetch bit-identical to the plain one), then the ceilings and
# the 8-row GEMV with and without its weights asked of the L2 first, piece sizes, in the same
# process (bench/h200.py --l2). Logs under $OUT.
#   run:  bash bench/h200_l2.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=6
step prefetch_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_prefetch.py test/test_proofs_gpu.py
TAIL=20
step gemv_l2 300 python3 bench/h200.py --l2
