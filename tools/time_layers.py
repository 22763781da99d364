"""Time launches on a GPU against their floor; per-stage timelines from the kernel.

    python -m tools.time_layers [--kind front] [--config glm5] [--tp 8] [--rows 2,4,8]
                                [--pos 8192] [--workload W1,W2] [--kv fp8]
                                [--backend cuda|hip|interp] [--timeline [--plot FILE.png]]
                                [--versus STAGE.ATTR=VALUE [--also STAGE.ATTR=VALUE]
                                 [--rounds 2]]

Per (kind, rows, kv, pos, workload): microseconds per launch = the median over CUDA-graph
replays of back-to-back launches (monokernel.launch.timing.timed_graph; 20 a graph, more
where small inputs need more copies, at most 200), each launch reading its own copy of the
inputs (the copies span more than 4x the 60 MB L2, so nothing is timed from L2, unless 200
copies do not: the "rotated MB" column says; a key cache, read and appended to, rotates with
the inputs, its copies counted by the bytes a launch reads of it) and carrying its own tag on
one never-reset arena, as a decode step's launches do. `--fixed-below BYTES` keeps the inputs
smaller than BYTES at one copy (a decode step reuses its position, block-table and activation
buffers: their TLB entries and L2 lines are warm; bench/NOTES.md v38 suspects a fresh copy's
TLB misses in ix_key's 6 us). The byte floor is what the launch must
move (Launch.bytes_moved: weights once, caches once, activations in, outputs out) over the
device-to-device copy bandwidth measured in the same run (1 GiB, read + write). `x floor` =
us / floor. Before timing, one launch runs; after it, the launch's outputs are checked
against the float64 reference (rel err column; kinds with a key cache: their scores too, see
tools.common.score_errors) and the error word after the replays must be clear.

Kinds with a key cache (index, index_scoring; DESIGN.md section 8):
  --workload W1: one request of R rows (the last at pos), keys read once; W2: R/2 requests of
      2 rows at pos - 1, pos whose block tables map the same physical pages for every page
      they only read (each request's written page is its own: no two requests write one
      slot). Ignored, with a note, for kinds without a key cache.
  floor = max(keys us, flops us) + rest us: the distinct key bytes the rows read (W2: the
      shared pages count ONCE, as a kernel reading them once would move them) at the copy
      ceiling, the scoring's flops (2 x heads x 128 per row and visible key) at the FP8
      _scaled_mm 8192^3 ceiling measured in the same run, and the launch's other bytes
      (weights once, ...) at the copy ceiling.
  score span / tail: collected automatically (not only with --timeline) from a second
      build linked with per-job clocks, median of 5 launches: span = the ix_score jobs' first
      start to last end (their polls for the queries included), tail = their last end less
      the last end of the stages they wait for (ix_proj, ix_key): the scoring's own time;
      `tail x` = tail / max(keys us, flops us).
  torch peer (tools.peers; cuda only): the same FP8 queries and head weights (the kernel's
      own) against the N keys of the longest row's table, gathered contiguous with their
      fp32 scales BEFORE the timing: _scaled_mm (logits [R x heads, N], f32) + relu + the
      weighted head sum (bmm) x key scale, keys past each row's position masked to -inf;
      graph-replayed with its keys rotated like ours. `ours/torch` = us/launch / torch us;
      the peer's scores must match ours (status says otherwise).

`--timeline` links the kernel with per-job timestamps (monokernel.link: lane 0 of wave 0
stores the clock at each job's start and end), runs it once more and prints per stage: jobs,
first start and last end (from the launch's earliest start), the median job time, the
slowest job (its number and time: a straggler the median hides) and the list scheduler's own
estimate of the stage's first start-last end (`model (us)`, from its cost model: a stage the
model ends far earlier than the kernel does is where it queued work behind a job it thought
short);
`--jobs-csv FILE.csv` writes every job's record (CTA, position in its list, stage, job, start,
end) to find the job a stage's last end belongs to. `--plot FILE.png` draws the jobs as a
Gantt chart (one row per CTA) with matplotlib, if it is
installed. A stage's phase marks (JobEnv.phase) print as the median time from a job's start
to each; its tallies (JobEnv.tally, e.g. the scoring's cycle accounts of its key loop:
stages/cycles.py, names from the stage's TALLIES) as the median over its jobs of the
per-wave value, in processor clocks (`%clock64`, `s_memtime`). The clock reads constrain the
compiler's scheduling of the timeline build: read the parts as a breakdown of that build,
beside its span; `us/launch` always comes from the build without them. Clocks: globaltimer
ns on NVIDIA (shown in us), s_memrealtime on AMD (100 MHz, shown in us), and with `--backend interp` (for testing, --timeline only) the interpreter's
tick counter (memory accesses, shown in ticks).

`--versus STAGE.ATTR=VALUE[,...]` is an A/B run in one process: each case is timed with
--tune's settings (A) and with --versus' on top of them (B), A then B, for --rounds rounds
(default 2), every run checked as above, on one set of ceilings and with each launch built
once; the table marks each row's variant and round, and a summary prints each case's
medians and B/A. Interleaving keeps the card's drift (clocks, temperature) out of the ratio,
which separate processes minutes apart do not. `--also STAGE.ATTR=VALUE[,...]` (repeatable,
with --versus) adds variants C, D, ..., each A's settings with its own on top, timed in the
same rounds after B and reported against A: one process (one set of ceilings, one build a
variant) for what would take a call a step each, where device time is what runs out.

--pos sets the context position of kinds whose inputs take one (ignored, shown as '-', for
kinds that read no cache). The hip backend is untested (no AMD GPU is available to the
project) and fails with a clear message without ROCm. Defaults: kind front (synthetic until
front is registered), config glm5, TP 8 (1 for tiny), rows 2,4,8, pos 8192, workload W1,
kv fp8, cuda.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys

import numpy as np

from monokernel.critical import critical_path, path_rows
from monokernel.schedule import NS_PER_US
from tools import common

MAX_PER_GRAPH = 200  # launches per graph when small inputs need many copies to leave L2
SCORE_STAGE = "ix_score"  # the indexer's scoring: its span is read from the kernel's clocks
SPAN_LAUNCHES = 5  # timeline launches whose scoring spans are medianed
PEER_TOL = common.HOPPER_FP8_ACC_TOL  # torch peer vs our scores: both FP8 tensor-core sums
AMD_REALTIME_HZ = 100e6  # s_memrealtime: a constant 100 MHz counter on CDNA3/CDNA4


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.time_layers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_spec_options(ap, config='glm5', kv=['fp8'],
                            kind_help="comma list of launch kinds (default front; synthetic until front exists)")
    ap.add_argument("--pos", type=common.pos_list, default=[8192],
                    help="comma list of context positions (default 8192)")
    common.add_workload_option(ap)
    ap.add_argument("--backend", choices=("cuda", "hip", "interp"), default="cuda",
                    help="cuda (default), hip, or interp (with --timeline only: ticks)")
    ap.add_argument("--chip", choices=("gfx950", "gfx942"), default="gfx950",
                    help="with --backend hip: the code object's chip (default gfx950)")
    ap.add_argument("--timeline", action="store_true", help="per-stage timeline from the kernel")
    ap.add_argument("--plot", default=None, metavar="FILE.png",
                    help="with --timeline: a Gantt chart of the jobs (needs matplotlib)")
    ap.add_argument("--jobs-csv", default=None, metavar="FILE.csv",
                    help="with --timeline: every job's record (cta, position, stage, job, start, "
                         "end, from the launch's first start) as CSV, to find stragglers")
    ap.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    ap.add_argument("--per-graph", type=int, default=20, help="launches per graph (default 20)")
    ap.add_argument("--fixed-below", type=_byte_count, default=0, metavar="BYTES",
                    help="inputs smaller than BYTES are not rotated: every launch reads the "
                         "one copy, as a decode step's fixed buffers (positions, block "
                         "tables, the activations) are; default 0: every input rotates")
    ap.add_argument("--reps", type=int, default=15, help="graph replays timed (default 15)")
    ap.add_argument("--versus", type=common.tune_list, action=common.TuneAction, default=[],
                    metavar="STAGE.ATTR=VALUE",
                    help="A/B in this process: every case timed with --tune's settings (A) "
                         "and with these on top (B), A then B for --rounds rounds; prints B/A")
    ap.add_argument("--also", type=common.tune_list, action="append", default=[],
                    metavar="STAGE.ATTR=VALUE",
                    help="with --versus: one more variant (C, D, ... in the order given), "
                         "A's settings with these on top, timed after B each round and "
                         "reported against A")
    ap.add_argument("--rounds", type=int, default=2,
                    help="with --versus: rounds of A then B (default 2)")
    return ap


# -------------------------------------------------------------------------------- timeline

TALLY_COLUMN = "tallies (median a wave)"
# the stage's longest job and its time: a straggler the median hides (v32: one scoring job
# of 132 held every request's own pages, 82 us against a median of 57)
SLOWEST_COLUMN = "slowest job: time"
MODEL_COLUMN = "model (us)"  # model_spans


def stage_rows(records, scale: float, unit: str, stages, waves: int = 1,
               tally_names: dict | None = None) -> list[dict]:
    """Per stage: jobs, first start / last end (from the launch's earliest start), median job
    time, the slowest job (number: time), phase ends, tallies; `scale` converts clock ticks to `unit`, `waves` a job's waves
    (tallies are sums over them), `tally_names` a stage's names for its tallies."""
    if not records:
        return []
    t0 = min(r.start for r in records)
    out = []
    for st in stages:
        rs = [r for r in records if r.stage == st]
        if not rs:
            continue
        slow = max(rs, key=lambda r: r.end - r.start)
        out.append({"stage": st, "jobs": len(rs),
                    f"first start ({unit})": (min(r.start for r in rs) - t0) * scale,
                    f"last end ({unit})": (max(r.end for r in rs) - t0) * scale,
                    f"median job ({unit})": statistics.median(r.end - r.start for r in rs) * scale,
                    SLOWEST_COLUMN: f"{slow.job}: {(slow.end - slow.start) * scale:.2f}",
                    "phase ends (median from job start)": phase_medians(rs, scale),
                    TALLY_COLUMN: tally_medians(rs, waves, (tally_names or {}).get(st, ()))})
    return out


def tally_medians(records, waves: int, names=()) -> str:
    """'name x / ...': per tally a stage's jobs added (JobEnv.tally: sums over a job's
    waves), the median over its jobs of the per-wave value ('-' where none)."""
    parts = []
    for i in range(max((len(r.tallies) for r in records), default=0)):
        vs = [r.tallies[i] / waves for r in records if r.tallies[i]]
        if vs:
            parts.append(f"{names[i] if i < len(names) else f't{i}'} {statistics.median(vs):.0f}")
    return " / ".join(parts) or "-"


def phase_medians(records, scale: float) -> str:
    """'p0 x / p1 y ...': per phase mark a stage's jobs stamped (JobEnv.phase), the median
    time from the job's start to it ('-' where no job of the stage marks phases)."""
    parts = []
    for i in range(max((len(r.phases) for r in records), default=0)):
        ds = [(r.phases[i] - r.start) * scale for r in records if r.phases[i]]
        if ds:
            parts.append(f"p{i} {statistics.median(ds):.2f}")
    return " / ".join(parts) or "-"


def plot(records, path: str, title: str, scale: float, unit: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"--plot: matplotlib is not installed; skipped {path}"
    t0 = min(r.start for r in records)
    stages = list(dict.fromkeys(r.stage for r in records))
    colors = {s: plt.cm.tab10(i % 10) for i, s in enumerate(stages)}
    ctas = max(r.cta for r in records) + 1
    fig, ax = plt.subplots(figsize=(12, max(3, min(0.08 * ctas + 2, 30))))
    for r in records:
        ax.barh(r.cta, max((r.end - r.start) * scale, 1e-9), left=(r.start - t0) * scale,
                height=0.8, color=colors[r.stage], linewidth=0)
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    ax.set_xlabel(unit)
    ax.set_ylabel("CTA")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.invert_yaxis()
    ax.set_title(title)
    ax.legend(handles=[Patch(color=colors[s], label=s) for s in stages], loc="upper right",
              fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"wrote {path}"


def model_spans(schedule) -> dict:
    """{stage: 'first start-last end'} of the list scheduler's estimates (its cost model, in
    us): beside the measured columns, a stage the model ends far earlier than the kernel
    does shows where the scheduler placed work behind a job it thought short (v37: ix_key
    modelled 2.0-6.0 us, measured 0.4-19.8, a q-head job queued behind it)."""
    spans: dict = {}
    for key, start in schedule.start.items():
        lo, hi = spans.get(key[0], (math.inf, -math.inf))
        spans[key[0]] = (min(lo, start), max(hi, schedule.end[key]))
    return {st: f"{lo / NS_PER_US:.1f}-{hi / NS_PER_US:.1f}" for st, (lo, hi) in spans.items()}


def _print_timeline(L, stamps, scale, unit, args, title):
    recs = L.timeline(stamps)
    names = [s.name for s in L.stages]
    print(f"\ntimeline of {title} ({len(recs)} jobs on {L.table.grid} CTAs, {unit}):")
    tallies = {s.name: getattr(s, "TALLIES", ()) for s in L.stages}
    rows = stage_rows(recs, scale, unit, names, L.waves, tallies)
    model = model_spans(L.schedule)
    for row in rows:
        row[MODEL_COLUMN] = model.get(row["stage"], "-")
    print(common.table(rows, ["stage", "jobs", f"first start ({unit})", f"last end ({unit})",
                              f"median job ({unit})", SLOWEST_COLUMN, MODEL_COLUMN,
                              "phase ends (median from job start)", TALLY_COLUMN]))
    path = critical_path(L.graph, recs, L.schedule)
    print(f"critical path ({len(path)} jobs: each one's data or CTA held the next; own = "
          f"from ready to end):")
    rows = path_rows(path, scale, unit)
    print(common.table(rows, list(rows[0])))
    if args.plot:
        print(plot(recs, _numbered(args, "plot"), title, scale, unit))
    if args.jobs_csv:
        print(write_jobs_csv(recs, _numbered(args, "jobs_csv"), scale, unit))


def _numbered(args, opt: str) -> str:
    """The file option `opt`'s path, numbered from the second timeline of the run on."""
    path, n = getattr(args, opt), getattr(args, f"_n_{opt}", 0)
    setattr(args, f"_n_{opt}", n + 1)
    if not n:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{n}.{ext}" if dot else f"{path}.{n}"


def rotated_sets(prepared: dict, sizes: dict, copies: int, fixed_below: int = 0) -> list:
    """`copies` sets of the inputs named in `sizes` ({name: bytes}) for the timed launches to
    take in turn: the first is `prepared` itself, the others clones, except that an input
    smaller than `fixed_below` bytes is the same tensor in every set (--fixed-below: a TLB
    and L2 that have seen it, as a decode step's fixed buffers are seen)."""
    return [prepared] + [{n: prepared[n] if nb < fixed_below else prepared[n].clone()
                          for n, nb in sizes.items()} for _ in range(copies - 1)]


def _byte_count(text: str) -> int:
    """--fixed-below's BYTES: an integer >= 0 (suffix K / M: KiB / MiB)."""
    scale = {"K": 2**10, "M": 2**20}.get(text[-1:].upper(), 1)
    try:
        n = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a byte count >= 0, e.g. 1M")
    return n


def write_jobs_csv(records, path: str, scale: float, unit: str) -> str:
    """One row per job, times from the launch's earliest start, in `unit`."""
    import csv
    t0 = min(r.start for r in records)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        nph = max((len(r.phases) for r in records), default=0)
        nt = max((len(r.tallies) for r in records), default=0)
        w.writerow(["cta", "position", "stage", "job", f"start_{unit}", f"end_{unit}"]
                   + [f"phase{i}_{unit}" for i in range(nph)] + [f"tally{i}" for i in range(nt)])
        for r in sorted(records, key=lambda r: (r.cta, r.position)):
            w.writerow([r.cta, r.position, r.stage, r.job, (r.start - t0) * scale,
                        (r.end - t0) * scale]
                       + [(x - t0) * scale if x else "" for x in r.phases] + list(r.tallies))
    return f"--jobs-csv: {len(records)} jobs -> {path}"


# ----------------------------------------------------------------------------------- interp

def run_interp(args, ap, tp) -> int:
    from stages import kinds
    names = args.kind or common.preferred_kind("front")
    for kname in names:
        for r in args.rows:
            for kv in args.kv:
                kind = kinds.kind(kname)
                spec = common.make_spec(args.config, tp, r, kv, "interp")
                L = common.launch_for(kind, spec, args.tune)
                for pos in args.pos:
                    for wl in common.workloads_for(L, args.workload):
                        rng = np.random.default_rng(args.seed)
                        inp, used = common.workload_inputs(kind, L, spec, rng, pos, wl)
                        ts = L.timeline_buffer()
                        L.run_interp(inp, step=0, timeline=ts)
                        title = (f"{kname} {spec.path} pos {pos if used else '-'}"
                                 + (f" {wl}" if wl != "-" else "") + " (interp)")
                        _print_timeline(L, ts, 1, "ticks", args, title)
    return 0


# ------------------------------------------------------------------------------------- GPUs

class _Gpu:
    """Launch a linked kernel from raw arguments on the current stream (cuda or hip)."""

    def __init__(self, backend: str, L, timeline: bool, chip: str):
        self.backend = backend
        self.lk = L.linked("sm_90a" if backend == "cuda" else chip, None, timeline)
        if backend == "cuda":
            self.k = L.cuda_kernel(timeline)
        else:
            from monokernel.build import build
            from monokernel.launch.hip import HipKernel
            self.k = HipKernel(build(self.lk.kernel).data, self.lk.kernel)
        self.grid = L.table.grid
        self.pdl = L.pdl  # back-to-back launches overlap: each starts under the one before
        if backend == "cuda" and self.grid > self.k.max_resident:
            raise RuntimeError(f"a persistent grid of {self.grid} CTAs cannot be co-resident "
                               f"({self.k.max_resident} fit)")

    def launch(self, args):
        # plain launches (graph capture); the grid was checked co-resident above, and one
        # stream runs the launches one after another
        if self.backend == "cuda":
            self.k.launch(args, grid=self.grid, sync=False, cooperative=False, pdl=self.pdl)
        else:
            import torch
            self.k.launch(args, grid=self.grid, stream=torch.cuda.current_stream(), sync=False)


# ------------------------------------------------------------------ floors, spans, the peer

def index_work(L, inputs) -> dict:
    """What the scoring must do at least, from the launch's positions and block table: the
    distinct cache slots its rows read (a physical page that several requests' tables map
    counts ONCE: W2's shared keys are read once by a perfect kernel; W1 reads one request's
    keys), their bytes (128 B key + 4 B scale) plus the table entries, and the flops
    (2 x heads x 128 per (row, visible key))."""
    from stages.index import HD, PAGE
    p = L.plan
    pos = np.asarray(inputs["positions"]).astype(np.int64).reshape(-1)
    bt = np.asarray(inputs["block_table"]).astype(np.int64).reshape(len(pos), -1)
    filled = np.zeros(p.cache_pages, np.int64)  # keys of each physical page some row reads
    for r, x in enumerate(pos):
        filled[bt[r, :x // PAGE]] = PAGE
        last = bt[r, x // PAGE]
        filled[last] = max(filled[last], x % PAGE + 1)
    keys = int(filled.sum())
    table = 4 * int((pos // PAGE + 1).sum())
    return dict(keys=keys, key_bytes=keys * (HD + 4) + table,
                flops=2 * p.heads * HD * int((pos + 1).sum()))


def _stage(L, name):
    return next((st for st in L.stages if st.name == name), None)


def floor_parts(L, inputs, ceil) -> dict:
    """The floor (DESIGN.md section 8) in microseconds, with its parts. Kinds with a key
    cache: max(key bytes read once / copy bandwidth, scoring flops / FP8 rate) + the rest
    of the launch's bytes (weights once, activations, outputs: Launch.bytes_moved() less the
    scoring stage's own items) / copy bandwidth. Other kinds: Launch.bytes_moved() / copy
    bandwidth."""
    from monokernel.launch import timing
    moved = sum(L.bytes_moved().values())
    bw = ceil["copy_TBps"]
    st = _stage(L, SCORE_STAGE)
    if not common.has_key_cache(L) or st is None:
        return dict(moved=moved, floor_us=timing.floor_us(moved, bw))
    own = st.bytes_moved() if hasattr(st, "bytes_moved") else None
    rest = max(0, moved - sum((own or {}).values()))
    w = index_work(L, inputs)
    fp8 = ceil.get("fp8_mm_TFLOPs")
    key_us = timing.floor_us(w["key_bytes"], bw)
    flop_us = w["flops"] / (fp8 * 1e12) * 1e6 if fp8 else 0.0
    rest_us = timing.floor_us(rest, bw)
    return dict(moved=rest + w["key_bytes"], floor_us=max(key_us, flop_us) + rest_us,
                key_us=key_us, flop_us=flop_us, rest_us=rest_us, keys=w["keys"])


def producers(L, name) -> list:
    """The stages that write a region the stage `name` reads (whose results it waits for)."""
    st = _stage(L, name)
    want = {u.region for j in range(len(st.jobs())) for u in st.reads(j)}
    return [o.name for o in L.stages if o is not st and
            any(u.region in want for j in range(len(o.jobs())) for u in o.writes(j))]


def score_span(L, records, scale) -> tuple:
    """(span, tail) of the scoring stage in one launch's records: span = first start to last
    end of its jobs (their polls for queries included); tail = its last end less the last end
    of the stages it waits for (the scoring's own time once its inputs are published)."""
    rs = [r for r in records if r.stage == SCORE_STAGE]
    if not rs:
        return None, None
    prod = set(producers(L, SCORE_STAGE))
    end = max(r.end for r in rs)
    ready = max((r.end for r in records if r.stage in prod), default=min(r.start for r in rs))
    return (end - min(r.start for r in rs)) * scale, max(0, end - ready) * scale


def index_peer(L, inputs, prepared, regions, args) -> dict:
    """The torch peer (tools.peers) on the kernel's own FP8 queries and head weights and the
    N keys of the last row's table (the longest context; W2: the last request's), gathered
    contiguous from the cache the launch wrote before it is timed; graph replays, keys
    rotated beyond L2. peer_err: its scores against the kernel's on the rows of that table."""
    import torch
    from monokernel.launch import timing
    from stages.index import HD
    from stages.index_ref import kernel_operands
    from tools import peers
    p = L.plan
    dev = prepared[common.KEY_CACHE].device
    pos = np.asarray(inputs["positions"]).astype(np.int64).reshape(-1)
    bt = np.asarray(inputs["block_table"]).reshape(len(pos), -1)
    last = int(np.argmax(pos))
    n = int(pos[last]) + 1
    q8, _, _, _, w = kernel_operands(p, regions)
    keys, scale = peers.gather_keys(prepared[common.KEY_CACHE], bt[last], n)
    q = peers.as_tensor(np.ascontiguousarray(q8), dev)
    wt = peers.as_tensor(w.astype(np.float32), dev)
    pt = peers.as_tensor(pos, dev)
    got = peers.index_scores(q, wt, keys, scale, pt, fmt=p.fp8.name, fp8_mm=True,
                             bf16_head_sum=common.bf16_head_sum(L)).cpu().numpy()
    sc = np.asarray(getattr(regions["scores"], "data", regions["scores"]))
    same = [r for r in range(len(pos)) if np.array_equal(bt[r], bt[last])]
    err = max(common.rel_err(got[r, :pos[r] + 1], sc[r, :pos[r] + 1]) for r in same)
    copies = timing.rotation(n * (HD + 4))
    per_graph = max(args.per_graph, min(copies, MAX_PER_GRAPH))
    us = peers.timed_index_peer(q, wt, keys, scale, pt, copies=min(copies, per_graph),
                                per_graph=per_graph, reps=args.reps, fmt=p.fp8.name)
    del keys, scale
    torch.cuda.empty_cache()
    return dict(torch_us=us, peer_err=err)


# ---------------------------------------------------------------------------------- timing

def time_one(kind, spec, args, ceil, pos, workload: str = "W1", launch=None, ref=None,
             inputs=None) -> dict:
    """One (kind, spec, pos, workload): checked once, timed, its scoring span and peer.
    `launch`: a Launch of (kind, spec) to reuse (its kernels stay loaded); `ref`: its float64
    reference for these inputs, or a function of the inputs returning it (called after the
    timing: bench/index_h200.py computes it in another process meanwhile); `inputs`: the
    (inputs, pos used) common.workload_inputs returns for (seed, pos, workload), made elsewhere."""
    import torch
    from monokernel.launch import timing
    L = launch or common.launch_for(kind, spec, getattr(args, "tune", ()))
    rng = np.random.default_rng(args.seed)
    inp, used = inputs or common.workload_inputs(kind, L, spec, rng, pos, workload)
    keyed = common.has_key_cache(L)
    specs = L.buffer_specs()
    # correctness first: one checked launch through the Launch API (errors computed last)
    be = common.backend(args.backend, chip=args.chip)
    arena = be.new_arena(L)
    prepared = be.prepare(inp)
    res = be.run(L, prepared, arena, 0)
    outs = be.outputs(L, res, prepared, inp)
    fl = floor_parts(L, inp, ceil)
    # timing: graph replays of back-to-back launches, inputs rotated beyond L2; the key cache
    # (read and appended to) rotates with them, its copies counted by what a launch reads
    ro = [n for n, b in specs.items() if not b.output or (keyed and n == common.KEY_CACHE)]
    ro_bytes = sum(inp[n].nbytes for n in ro)
    copies = timing.rotation(ro_bytes)
    if keyed:
        copies = max(copies, timing.rotation(fl["moved"]))
    # a graph replays the same launches: rotation helps only across the launches of one
    # graph, so the graph holds at least one launch per copy (at most MAX_PER_GRAPH)
    per_graph = max(args.per_graph, min(copies, MAX_PER_GRAPH))
    copies = min(copies, per_graph)
    fixed_below = getattr(args, "fixed_below", 0)
    sets = rotated_sets(prepared, {n: inp[n].nbytes for n in ro}, copies, fixed_below)
    rotated_bytes = sum(inp[n].nbytes for n in ro if inp[n].nbytes >= fixed_below)
    outs_dev = {n: prepared[n] for n, b in specs.items() if b.output}
    gpu = _Gpu(args.backend, L, False, args.chip)
    dev = arena.device
    table = torch.from_numpy(L.table.data).to(dev)
    err = torch.zeros(1, dtype=torch.int64, device=dev)
    state = {"i": 0, "tag": L.tag(1)}

    def next_args():
        s = sets[state["i"] % copies]
        state["i"] += 1
        state["tag"] = state["tag"] % (2**32 - 1) + 1
        return dict(arena=arena, table=table, err=err, tag=state["tag"],
                    **{n: s.get(n, outs_dev.get(n)) for n in specs})

    us = timing.timed_graph(lambda: gpu.launch(gpu.lk.args(**next_args())),
                            per_graph=per_graph, reps=args.reps)
    torch.cuda.synchronize()
    moved = fl["moved"]
    row = dict(kind=kind.name, spec=spec.path, pos=pos if used else "-",
               wl=workload if keyed else "-", us=us, floor_us=fl["floor_us"],
               key_us=fl.get("key_us"), flop_us=fl.get("flop_us"), rest_us=fl.get("rest_us"),
               x_floor=us / fl["floor_us"] if fl["floor_us"] else None, MB=moved / 1e6,
               TBps=moved / (us * 1e-6) / 1e12, rotMB=copies * min(rotated_bytes, moved) / 1e6,
               graph=per_graph)
    scale = 1e-3 if args.backend == "cuda" else 1e6 / AMD_REALTIME_HZ
    if args.timeline or _stage(L, SCORE_STAGE) is not None:
        tgpu = _Gpu(args.backend, L, True, args.chip)
        stamps = torch.from_numpy(L.timeline_buffer().view(np.int64)).to(dev)
        spans = []
        for _ in range(SPAN_LAUNCHES):  # each from another input copy
            stamps.zero_()  # the tallies add up: each launch's own
            tgpu.launch(tgpu.lk.args(timeline=stamps, **next_args()))
            host = stamps.cpu().numpy().view(np.uint64)
            spans.append(score_span(L, L.timeline(host), scale))
        if spans[0][0] is not None:
            row["span_us"] = statistics.median(s[0] for s in spans)
            row["tail_us"] = statistics.median(s[1] for s in spans)
            top = max(fl.get("key_us") or 0, fl.get("flop_us") or 0)
            row["score_x"] = row["tail_us"] / top if top else None
        if args.timeline:
            row["_timeline"] = (L, host, scale, f"{kind.name} {spec.path} pos {row['pos']}"
                                + (f" {workload}" if keyed else ""))
    failure = gpu.lk.decode_error(err.cpu().numpy().view(np.uint64), L.table)  # all launches
    problems = [] if failure is None else [f"FAILED: {failure}"]
    if keyed and args.backend == "cuda":
        row.update(index_peer(L, inp, prepared, res.regions, args))
        row["vs_torch"] = us / row["torch_us"]
        tol = common.BF16_HEAD_SUM_TOL if common.bf16_head_sum(L) else PEER_TOL
        if row["peer_err"] > tol:
            problems.append(f"torch peer differs ({row['peer_err']:.1e})")
    del sets  # the input copies' device memory back before the checks (next_args is done)
    errs = common.reference_errors(L, inp, outs, res.regions,
                                   ref=ref(inp) if callable(ref) else ref)
    exact = getattr(L, "exact_errors", None)  # kind index's top-k: exact on its own scores
    errs.update(exact(inp, outs, res.regions) if exact else {})
    row["rel_err"] = max((e["rel_err"] for e in errs.values()), default=None)
    bad = [f"{n} {e['rel_err']:.1e} > {e['tol']:.0e}" for n, e in errs.items() if not e["ok"]]
    if bad:
        problems.append("ERROR vs reference: " + ", ".join(bad))
    row["status"] = "; ".join(problems) or "ok"
    return row


def time_or_report(kind, spec, args, ceil, pos, workload: str = "W1", lazy=None, **kw) -> dict:
    """time_one, or the row of a failure (status "FAILED: <error>") so a matrix of configs
    reports the one that broke and times the rest. `lazy()`: more time_one keywords, made
    inside the guard (inputs or a reference another process computes may fail too)."""
    try:
        return time_one(kind, spec, args, ceil, pos, workload, **kw, **(lazy() if lazy else {}))
    except Exception as e:  # noqa: BLE001 - report it, time the rest
        return dict(kind=kind.name, spec=spec.path, pos=pos, wl=workload,
                    status=f"FAILED: {type(e).__name__}: {e}")


VERSUS_COLUMNS = [("variant", "A/B"), "round"]  # after the workload, with --versus
COLUMNS = ["kind", "spec", "pos", ("wl", "workload"), ("us", "us/launch"),
           ("span_us", "score span"), ("tail_us", "score tail"), ("floor_us", "floor us"),
           ("key_us", "keys us"), ("flop_us", "flops us"), ("rest_us", "rest us"),
           ("x_floor", "x floor"), ("score_x", "tail x"), ("torch_us", "torch us"),
           ("vs_torch", "ours/torch"), ("MB", "MB moved"), ("TBps", "TB/s"),
           ("rel_err", "rel err"), ("rotMB", "rotated MB"), ("graph", "per graph"), "status"]


def print_ceilings(ceil):
    import torch
    dev = torch.cuda.get_device_name()
    mm = f"{ceil['fp8_mm_TFLOPs']:.0f} TFLOP/s" if ceil.get("fp8_mm_TFLOPs") else \
        f"n/a ({ceil.get('fp8_mm_error', '')})"
    print(f"{dev}: ceilings measured in this run: copy {ceil['copy_TBps']:.2f} TB/s (1 GiB, "
          f"read + write), fp8 _scaled_mm 8192^3 {mm}", flush=True)


def run_gpu(args, ap, tp) -> int:
    from stages import kinds
    from monokernel.launch import timing
    names = args.kind or common.preferred_kind("front")
    try:
        common.backend(args.backend, chip=args.chip)
    except Exception as e:  # noqa: BLE001 - a missing GPU stack: say which and stop
        print(f"error: {e}", file=sys.stderr)
        return 2
    ceil = timing.ceilings()
    print_ceilings(ceil)
    rows, bad = [], 0
    for kname in names:
        kind = kinds.kind(kname)
        for r in args.rows:
            for kv in args.kv:
                tgt = "sm_90a" if args.backend == "cuda" else args.chip
                spec = common.make_spec(args.config, tp, r, kv, tgt)
                # one Launch a variant (its kernels loaded once) for every pos
                variants = _variants(kind, spec, args, tgt)
                wls = common.workloads_for(variants[0][1], args.workload)
                if wls == ["-"] and args.workload != ["W1"]:
                    print(f"  note: {kname} has no key cache; --workload ignored", flush=True)
                for pos in args.pos:
                    for wl in wls:
                        for rnd in range(args.rounds if args.versus else 1):
                            for name, L in variants:
                                row = time_or_report(kind, spec, args, ceil, pos, wl, launch=L)
                                if name:
                                    row.update(variant=name, round=rnd + 1)
                                bad += row["status"] != "ok"
                                rows.append(row)
                                print(f"  {kname} {spec.path} pos {row.get('pos')} {wl}"
                                      f"{' ' + name if name else ''}: "
                                      f"{row.get('us', float('nan')):.2f} us ({row['status']})",
                                      flush=True)
    cols = COLUMNS[:4] + VERSUS_COLUMNS + COLUMNS[4:] if args.versus else COLUMNS
    print(common.table(rows, cols))
    print(FLOOR_NOTE)
    if args.versus:
        print(versus_summary(rows, args.tune, args.versus, args.also))
    for row in rows:
        if "_timeline" in row:
            L, stamps, scale, title = row["_timeline"]
            _print_timeline(L, stamps, scale, "us", args, title)
    return 1 if bad else 0


def _variants(kind, spec, args, target) -> list:
    """[(name, Launch)]: ("", the --tune launch); with --versus also ("A", it) and ("B", it
    with --versus' settings applied after --tune's), and ("C", ...) a further --also."""
    A = common.launch_for(kind, spec, args.tune)
    common.warn_inert_tunes(kind, spec, args.tune, A, target)
    if not args.versus:
        return [("", A)]
    out = [("A", A)]
    for name, more in zip(variant_names(1 + len(args.also)), [args.versus] + list(args.also)):
        V = common.launch_for(kind, spec, list(args.tune) + list(more))
        if common.same_code(A, V, target):
            print(f"  WARNING: variant {name} leaves {kind.name} {spec.path}'s {target} code "
                  "as A's: its ratio measures one kernel twice", flush=True)
        out.append((name, V))
    return out


def variant_names(count: int) -> list:
    """The names of `count` variants timed against A: B (--versus), then C, D, ... (--also)."""
    return [chr(ord("B") + i) for i in range(count)]


def versus_summary(rows, tune, versus, also=()) -> str:
    """A line a case (kind, spec, pos, workload) and variant against A: the two medians over
    their rounds (the runs in parentheses; a failed run is left out and counted) and V/A."""
    def names(ts):
        return ",".join(f"{s}.{a}={v}" for s, a, v in ts)
    settings = [versus] + list(also)
    vnames = variant_names(len(settings))
    defined = ", ".join(f"{v} = A + {names(t)}" for v, t in zip(vnames, settings))
    out = [f"A/B (B/A < 1: B faster): A = {names(tune) or 'the defaults'}, {defined}"]
    cases = {}
    for r in rows:
        if "variant" in r:
            key = (r["kind"], r["spec"], r.get("pos"), r.get("wl"))
            case = cases.setdefault(key, {"failed": {}})
            if r.get("status") == "ok" and r.get("us") is not None:
                case.setdefault(r["variant"], []).append(r["us"])
            else:
                case["failed"][r["variant"]] = case["failed"].get(r["variant"], 0) + 1
    for (kind, spec, pos, wl), c in cases.items():
        head = f"  {kind} {spec} pos {pos} {wl}:"
        for v in vnames:
            failed = c["failed"].get("A", 0) + c["failed"].get(v, 0)
            if not (c.get("A") and c.get(v)):
                out.append(f"{head} no ratio {v}/A ({failed} failed runs)")
                continue
            a, b = statistics.median(c["A"]), statistics.median(c[v])
            runs = {x: ", ".join(f"{u:.2f}" for u in c[x]) for x in ("A", v)}
            fail = f" ({failed} failed runs left out)" if failed else ""
            out.append(f"{head} A {a:.2f} us ({runs['A']}), {v} {b:.2f} us ({runs[v]}): "
                       f"{v}/A {b / a:.3f}{fail}")
    return "\n".join(out)


FLOOR_NOTE = ("floor = max(keys us, flops us) + rest us: key bytes read once (W2: pages the "
              "requests share count once) at the copy ceiling, scoring flops at the fp8 "
              "ceiling, the launch's other bytes at the copy ceiling; score span = first start "
              "to last end of ix_score jobs, tail = from its producers' last end (kernel "
              "clocks, median of 5 timeline launches); torch = _scaled_mm + relu + weighted "
              "head sum on the same queries and keys gathered contiguous beforehand")


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if (args.plot or args.jobs_csv) and not args.timeline:
        ap.error("--plot and --jobs-csv write the timeline: add --timeline")
    if args.backend == "interp" and not args.timeline:
        ap.error("--backend interp has no microseconds: use it with --timeline (ticks)")
    if args.per_graph < 1 or args.reps < 1:
        ap.error("--per-graph and --reps must be at least 1")
    if args.versus and (args.backend == "interp" or args.timeline):
        ap.error("--versus times two variants: a GPU backend, no --timeline (time a "
                 "variant's timeline alone with --tune)")
    if args.also and not args.versus:
        ap.error("--also adds a variant to an A/B: give --versus (B) first")
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: at least 1")
    tp = common.resolve_tp(ap, args.config, args.tp)
    try:
        if args.backend == "interp":
            return run_interp(args, ap, tp)
        return run_gpu(args, ap, tp)
    except ValueError as e:  # bad input the kind rejects, e.g. a position past its cache
        print(f"python -m tools.time_layers: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
