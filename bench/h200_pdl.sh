#!/usr/bin/env bash
# H200 call for programmatic dependent launch (ops grid_dep_launch / grid_dep_wait, launch
# pdl=True; ~5 min): the pdl tests and the GPU proof tests, whether a cooperative launch takes
# the pdl attribute, then the GEMV plain / pdl (rows 8, 1, 2, 4; the empty grid both ways; L2
# prefetch before the wait; unroll and K-split variants) in one process (bench/h200.py --pdl).
#   run:  bash bench/h200_pdl.sh            (on the device machine)
source "$(dirname "$0")/steps.sh"
TAIL=6
step pdl_tests 200 python3 -m pytest -q -p no:cacheprovider test/test_pdl.py test/test_proofs_gpu.py
step pdl_coop 60 python3 -c "
import numpy as np, torch, sys
sys.path.insert(0, 'test')
from test_pdl import _probe
from monokernel.launch.cuda import CudaKernel
ck = CudaKernel(_probe('sm_90a'))
w, x, y = (torch.ones(32, device='cuda') for _ in range(3))
ck.launch(dict(w=w, x=x, y=y), grid=1, cooperative=True, pdl=True)
print('cooperative + pdl launch accepted, y', float(y.sum()))"
TAIL=30
step gemv_pdl 400 python3 bench/h200.py --pdl
