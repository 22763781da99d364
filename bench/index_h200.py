"""The indexer on the H200 (issue 6): kinds index_scoring and index, rows 2, 4, 8 x contexts
8K, 64K, 128K, 256K, 512K keys x workloads W1, W2, timed in ONE process, one table.

    python3 bench/index_h200.py [--kind index_scoring,index] [--rows 2,4,8]
        [--pos 8191,65535,131071,262143,524287] [--workload W1,W2] [--reps 10]
        [--per-graph 20] [--ref-workers N] [--seed 0]

Each config is tools.time_layers.time_one (its doc says what every column means): inputs of
the workload (W1: one request of R rows at pos - R + 1 .. pos; W2: R/2 requests of 2 rows at
pos - 1, pos on shared pages), one checked launch, CUDA-graph replays with the inputs and the
key cache rotated beyond L2, the scoring stage's span from a build with per-job clocks, the
floor (max(key bytes read once / copy, flops / FP8) + the other bytes / copy; W2's shared keys
count once) from the ceilings measured at the start, and the torch peer (_scaled_mm + relu +
weighted head sum on the same queries and the keys gathered contiguous beforehand).

Correctness: every config's scores against float64 scores of the kernel's own operands (on
the GPU) and against the float64 reference end to end, plus every other output the references
cover. The float64 reference costs ~25 s of one CPU core at 512K keys x 8 rows (~4 min for the
matrix) and the inputs up to ~5 s a config (kind index: the front's too), so worker processes
(spawned, one BLAS thread each) do that CPU work while the GPU times: --ref-workers compute
every config's reference from the same seed (a config's check waits for its own; a digest of
the inputs proves the worker built the same ones), --input-workers make the inputs a few
configs ahead of the GPU. 0 workers: inline (several times slower).

Time (estimated for an H200 host with 16 cores; the lead measures): ceilings ~5 s; 12 kernel
builds (2 kinds x 3 row widths, plain and with clocks) ~30-50 s; 60 configs at ~1.5-3 s of
main-process time each (inputs received, host <-> device copies of up to ~0.5 GB, graph
replays of ours and the peer's: 2 x (6 + reps) graphs of >= 20 launches, 5 clocked launches,
the checks): ~2-4 min in all, under the 6 min asked; the workers' ~10 min of CPU spread
over 12 processes keeps pace. If it runs long: --reps 5, or --ref-workers 12.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from tools import common  # noqa: E402

CONFIG = "glm5"
TARGET = "sm_90a"
POS = (8191, 65535, 131071, 262143, 524287)
LOOKAHEAD = 4  # configs whose inputs are made ahead of the GPU (one an input worker)
DIGEST_LIMIT = 128 << 20  # inputs hashed for the worker/main identity check (the big MLA
# cache of kind index is random filler the scoring never reads; it is skipped)


def input_digest(inputs: dict) -> str:
    """sha256 over the inputs a reference depends on (every array up to DIGEST_LIMIT)."""
    h = hashlib.sha256()
    for n in sorted(inputs):
        v = inputs[n]
        if isinstance(v, np.ndarray) and v.nbytes <= DIGEST_LIMIT:
            h.update(n.encode())
            h.update(np.ascontiguousarray(v).tobytes())
    return h.hexdigest()


def _inputs(kind_name: str, rows: int, pos: int, workload: str, seed: int):
    """(launch, (inputs, pos used)) of one config, as time_layers.time_one builds them."""
    from stages import kinds
    kind = kinds.kind(kind_name)
    spec = common.make_spec(CONFIG, 8, rows, "fp8", TARGET)
    L = kind.launch(spec)
    return L, common.workload_inputs(kind, L, spec, np.random.default_rng(seed), pos, workload)


def inputs_job(kind_name: str, rows: int, pos: int, workload: str, seed: int):
    """(inputs, pos used) of one config (a worker makes them while the GPU times another)."""
    return _inputs(kind_name, rows, pos, workload, seed)[1]


def reference_job(kind_name: str, rows: int, pos: int, workload: str, seed: int):
    """(input digest, Launch.reference) of one config, from inputs made from the same seed."""
    L, (inp, _) = _inputs(kind_name, rows, pos, workload, seed)
    return input_digest(inp), L.reference(inp)


def _pool(workers: int):
    """A spawn pool (CUDA state is never shared) with one BLAS / torch thread a worker (the
    environment is read at spawn)."""
    import multiprocessing as mp
    keys = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        return mp.get_context("spawn").Pool(workers)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Reference:
    """time_one's `ref`: the worker's reference, once its input digest matches ours."""

    def __init__(self, job, label: str):
        self.job, self.label = job, label

    def __call__(self, inputs):
        digest, ref = self.job.get() if hasattr(self.job, "get") else self.job()
        if digest != input_digest(inputs):
            raise RuntimeError(f"{self.label}: the reference worker built other inputs")
        return ref


class Workers:
    """The CPU side of the matrix: every config's reference queued at once on `ref_workers`
    processes (small results), each config's inputs on `input_workers` processes at most
    LOOKAHEAD configs ahead of the GPU (inputs are up to ~0.4 GB a config). 0 workers: made
    inline when asked for."""

    def __init__(self, plan, seed: int, ref_workers: int, input_workers: int):
        self.plan, self.seed = plan, seed
        self.refs = _pool(ref_workers) if ref_workers else None
        self.ins = _pool(input_workers) if input_workers else None
        self.ref_jobs = {cfg: self.refs.apply_async(reference_job, (*cfg, seed))
                         for cfg in plan} if self.refs else {}
        self.in_jobs = {}

    def inputs(self, i: int):
        """Config i's inputs; queues the next LOOKAHEAD configs' (the GPU takes them in order)."""
        if self.ins is None:
            return inputs_job(*self.plan[i], self.seed)
        for cfg in self.plan[i:i + LOOKAHEAD]:
            if cfg not in self.in_jobs:
                self.in_jobs[cfg] = self.ins.apply_async(inputs_job, (*cfg, self.seed))
        return self.in_jobs.pop(self.plan[i]).get()

    def reference(self, i: int, label: str) -> Reference:
        cfg = self.plan[i]
        job = self.ref_jobs.get(cfg) or (lambda: reference_job(*cfg, self.seed))
        return Reference(job, label)

    def close(self):
        for p in (self.refs, self.ins):
            if p is not None:
                p.terminate()
                p.join()


def _parser():
    ap = argparse.ArgumentParser(prog="python3 bench/index_h200.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", type=common.kind_list, default=["index_scoring", "index"])
    ap.add_argument("--rows", type=common.rows_list, default=[2, 4, 8])
    ap.add_argument("--pos", type=common.pos_list, default=list(POS))
    ap.add_argument("--workload", type=common.workload_list, default=["W1", "W2"])
    ap.add_argument("--reps", type=int, default=10, help="graph replays timed (default 10)")
    ap.add_argument("--per-graph", type=int, default=20, help="launches a graph (default 20)")
    cpus = os.cpu_count() or 4
    ap.add_argument("--ref-workers", type=int, default=max(0, min(8, cpus - 8)),
                    help="processes computing the float64 references (0: inline)")
    ap.add_argument("--input-workers", type=int, default=max(0, min(4, cpus - 4)),
                    help="processes making the inputs ahead of the GPU (0: inline)")
    ap.add_argument("--seed", type=int, default=0)
    return ap


def run(plan, work: Workers, a, t0):
    from monokernel.launch import timing
    from stages import kinds
    from tools import time_layers
    targs = time_layers._parser().parse_args(
        ["--backend", "cuda", "--reps", str(a.reps), "--per-graph", str(a.per_graph),
         "--seed", str(a.seed)])
    ceil = timing.ceilings()
    time_layers.print_ceilings(ceil)
    rows, bad, launches = [], 0, {}
    for i, (kname, r, pos, wl) in enumerate(plan):
        kind = kinds.kind(kname)
        spec = common.make_spec(CONFIG, 8, r, "fp8", TARGET)
        if (kname, r) not in launches:  # one Launch per (kind, rows): kernels loaded once
            launches = {(kname, r): kind.launch(spec)}
        label = f"{kname} r{r} pos {pos} {wl}"
        row = time_layers.time_or_report(
            kind, spec, targs, ceil, pos, wl, launch=launches[(kname, r)],
            lazy=lambda: dict(inputs=work.inputs(i), ref=work.reference(i, label)))
        bad += row["status"] != "ok"
        rows.append(row)
        print(f"  [{i + 1}/{len(plan)} {time.time() - t0:4.0f} s] {label}: "
              f"{row.get('us', float('nan')):.1f} us, torch "
              f"{row.get('torch_us', float('nan')):.1f} us ({row['status']})", flush=True)
    return rows, bad


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    t0 = time.time()
    try:
        common.backend("cuda")
    except Exception as e:  # noqa: BLE001 - a missing GPU stack: say which and stop
        print(f"error: {e}", file=sys.stderr)
        return 2
    plan = [(k, r, p, w) for k in a.kind for r in a.rows for p in a.pos for w in a.workload]
    work = Workers(plan, a.seed, a.ref_workers, a.input_workers)
    try:
        rows, bad = run(plan, work, a, t0)
    finally:
        work.close()
    from tools import time_layers
    print(common.table(rows, time_layers.COLUMNS))
    print(time_layers.FLOOR_NOTE)
    print(f"{len(plan)} configs in {time.time() - t0:.0f} s; {bad} not ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
