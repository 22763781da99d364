"""Time launches on a GPU against their byte floor; per-stage timelines from the kernel.

    python -m tools.time_layers [--kind front] [--config glm5] [--tp 8] [--rows 2,4,8]
                                [--pos 8192] [--kv fp8] [--backend cuda|hip|interp]
                                [--timeline [--plot FILE.png]]

Per (kind, rows, kv, pos): microseconds per launch = the median over CUDA-graph replays of
back-to-back launches (monokernel.launch.timing.timed_graph; 20 a graph, more where small
inputs need more copies, at most 200), each launch reading its own copy of the inputs (the
copies span more than 4x the 60 MB L2, so nothing is timed from L2, unless 200 copies do not:
the "rotated MB" column says) and carrying its own tag on one never-reset arena, as a decode
step's launches do. The byte floor
is what the launch must move (Launch.bytes_moved: weights once, caches once, activations in,
outputs out) over the device-to-device copy bandwidth measured in the same run (1 GiB, read +
write); the FP8 _scaled_mm ceiling is printed beside it. `x floor` = us / floor. Before
timing, one launch is checked against the float64 reference (rel err column) and the error
word after the replays must be clear.

`--timeline` links the kernel with per-job timestamps (monokernel.link: lane 0 of wave 0
stores the clock at each job's start and end), runs it once more and prints per stage: jobs,
first start and last end (from the launch's earliest start) and the median job time;
`--plot FILE.png` draws the jobs as a Gantt chart (one row per CTA) with matplotlib, if it is
installed. Clocks: globaltimer ns on NVIDIA (shown in us), s_memrealtime on AMD (100 MHz,
shown in us), and with `--backend interp` (for testing, --timeline only) the interpreter's
tick counter (memory accesses, shown in ticks).

--pos sets the context position of kinds whose inputs take one (ignored, shown as '-', for
kinds that read no cache). The hip backend is untested (no AMD GPU is available to the
project) and fails with a clear message without ROCm. Defaults: kind front (synthetic until
front is registered), config glm5, TP 8 (1 for tiny), rows 2,4,8, pos 8192, kv fp8, cuda.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from tools import common

MAX_PER_GRAPH = 200  # launches per graph when small inputs need many copies to leave L2
AMD_REALTIME_HZ = 100e6  # s_memrealtime: a constant 100 MHz counter on CDNA3/CDNA4


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.time_layers", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_spec_options(ap, config='glm5', kv=['fp8'],
                            kind_help="comma list of launch kinds (default front; synthetic until front exists)")
    ap.add_argument("--pos", type=common.pos_list, default=[8192],
                    help="comma list of context positions (default 8192)")
    ap.add_argument("--backend", choices=("cuda", "hip", "interp"), default="cuda",
                    help="cuda (default), hip, or interp (with --timeline only: ticks)")
    ap.add_argument("--chip", choices=("gfx950", "gfx942"), default="gfx950",
                    help="with --backend hip: the code object's chip (default gfx950)")
    ap.add_argument("--timeline", action="store_true", help="per-stage timeline from the kernel")
    ap.add_argument("--plot", default=None, metavar="FILE.png",
                    help="with --timeline: a Gantt chart of the jobs (needs matplotlib)")
    ap.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    ap.add_argument("--per-graph", type=int, default=20, help="launches per graph (default 20)")
    ap.add_argument("--reps", type=int, default=15, help="graph replays timed (default 15)")
    return ap


# -------------------------------------------------------------------------------- timeline

def stage_rows(records, scale: float, unit: str, stages) -> list[dict]:
    """Per stage: jobs, first start / last end (from the launch's earliest start), median job
    time; `scale` converts clock ticks to `unit`."""
    if not records:
        return []
    t0 = min(r.start for r in records)
    out = []
    for st in stages:
        rs = [r for r in records if r.stage == st]
        if not rs:
            continue
        out.append({"stage": st, "jobs": len(rs),
                    f"first start ({unit})": (min(r.start for r in rs) - t0) * scale,
                    f"last end ({unit})": (max(r.end for r in rs) - t0) * scale,
                    f"median job ({unit})": statistics.median(r.end - r.start for r in rs) * scale})
    return out


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


def _print_timeline(L, stamps, scale, unit, args, title):
    recs = L.timeline(stamps)
    names = [s.name for s in L.stages]
    print(f"\ntimeline of {title} ({len(recs)} jobs on {L.table.grid} CTAs, {unit}):")
    print(common.table(stage_rows(recs, scale, unit, names),
                       ["stage", "jobs", f"first start ({unit})", f"last end ({unit})",
                        f"median job ({unit})"]))
    if args.plot:
        path = args.plot
        if getattr(args, "_n_plots", 0):
            stem, dot, ext = path.rpartition(".")
            path = f"{stem}.{args._n_plots}.{ext}" if dot else f"{path}.{args._n_plots}"
        args._n_plots = getattr(args, "_n_plots", 0) + 1
        print(plot(recs, path, title, scale, unit))


# ----------------------------------------------------------------------------------- interp

def run_interp(args, ap, tp) -> int:
    from stages import kinds
    names = args.kind or common.preferred_kind("front")
    for kname in names:
        for r in args.rows:
            for kv in args.kv:
                for pos in args.pos:
                    kind = kinds.kind(kname)
                    spec = common.make_spec(args.config, tp, r, kv, "interp")
                    L = kind.launch(spec)
                    inp, used = common.kind_inputs(kind, L, spec, np.random.default_rng(args.seed),
                                                   pos)
                    ts = L.timeline_buffer()
                    L.run_interp(inp, step=0, timeline=ts)
                    title = f"{kname} {spec.path} pos {pos if used else '-'} (interp)"
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
        if backend == "cuda" and self.grid > self.k.max_resident:
            raise RuntimeError(f"a persistent grid of {self.grid} CTAs cannot be co-resident "
                               f"({self.k.max_resident} fit)")

    def launch(self, args):
        # plain launches (graph capture); the grid was checked co-resident above, and one
        # stream runs the launches one after another
        if self.backend == "cuda":
            self.k.launch(args, grid=self.grid, sync=False, cooperative=False)
        else:
            import torch
            self.k.launch(args, grid=self.grid, stream=torch.cuda.current_stream(), sync=False)


def time_one(kind, spec, args, ceil, pos) -> dict:
    import torch
    from monokernel.launch import timing
    L = kind.launch(spec)
    rng = np.random.default_rng(args.seed)
    inp, used = common.kind_inputs(kind, L, spec, rng, pos)
    specs = L.buffer_specs()
    # correctness first: one checked launch through the Launch API
    be = common.backend(args.backend, chip=args.chip)
    arena = be.new_arena(L)
    prepared = be.prepare(inp)
    res = be.run(L, prepared, arena, 0)
    errs = common.reference_errors(L, inp, be.outputs(L, res, prepared, inp), res.regions)
    worst = max((e["rel_err"] for e in errs.values()), default=None)
    # timing: graph replays of back-to-back launches, inputs rotated beyond L2
    ro = [n for n, b in specs.items() if not b.output]
    ro_bytes = sum(inp[n].nbytes for n in ro)
    # a graph replays the same launches: rotation helps only across the launches of one
    # graph, so the graph holds at least one launch per copy (at most MAX_PER_GRAPH)
    copies = timing.rotation(ro_bytes)
    per_graph = max(args.per_graph, min(copies, MAX_PER_GRAPH))
    copies = min(copies, per_graph)
    sets = [prepared] + [{n: common.to_device(inp[n]) for n in ro} for _ in range(copies - 1)]
    outs = {n: prepared[n] for n, b in specs.items() if b.output}
    gpu = _Gpu(args.backend, L, False, args.chip)
    dev = arena.device
    table = torch.from_numpy(L.table.data).to(dev)
    err = torch.zeros(1, dtype=torch.int64, device=dev)
    state = {"i": 0, "tag": L.tag(1)}

    def launch():
        s = sets[state["i"] % copies]
        state["i"] += 1
        state["tag"] = state["tag"] % (2**32 - 1) + 1
        bufs = {n: s.get(n, outs.get(n)) for n in specs}
        gpu.launch(gpu.lk.args(arena=arena, table=table, err=err, tag=state["tag"], **bufs))
    us = timing.timed_graph(launch, per_graph=per_graph, reps=args.reps)
    torch.cuda.synchronize()
    failure = gpu.lk.decode_error(err.cpu().numpy().view(np.uint64), L.table)
    moved = sum(L.bytes_moved().values())
    floor = timing.floor_us(moved, ceil["copy_TBps"])
    row = dict(kind=kind.name, spec=spec.path, pos=pos if used else "-", us=us,
               floor_us=floor, x_floor=us / floor if floor else None, MB=moved / 1e6,
               TBps=moved / (us * 1e-6) / 1e12, rel_err=worst,
               rotMB=copies * ro_bytes / 1e6, graph=per_graph,
               status="ok" if failure is None and all(e["ok"] for e in errs.values())
               else ("FAILED: " + str(failure) if failure else "ERROR vs reference"))
    if args.timeline:
        tgpu = _Gpu(args.backend, L, True, args.chip)
        stamps = torch.zeros(2 * int(L.table.data[3]), dtype=torch.int64, device=dev)
        for _ in range(3):  # the last of a few launches, each from another input copy
            launch_args = {n: sets[state["i"] % copies].get(n, outs.get(n)) for n in specs}
            state["i"] += 1
            state["tag"] = state["tag"] % (2**32 - 1) + 1
            tgpu.launch(tgpu.lk.args(arena=arena, table=table, err=err, tag=state["tag"],
                                     timeline=stamps, **launch_args))
        torch.cuda.synchronize()
        scale = 1e-3 if args.backend == "cuda" else 1e6 / AMD_REALTIME_HZ
        row["_timeline"] = (L, stamps.cpu().numpy().view(np.uint64), scale,
                            f"{kind.name} {spec.path} pos {row['pos']}")
    return row


def run_gpu(args, ap, tp) -> int:
    from stages import kinds
    from monokernel.launch import timing
    names = args.kind or common.preferred_kind("front")
    try:
        common.backend(args.backend, chip=args.chip)
    except Exception as e:  # noqa: BLE001 - a missing GPU stack: say which and stop
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch
    ceil = timing.ceilings()
    dev = torch.cuda.get_device_name()
    mm = f"{ceil['fp8_mm_TFLOPs']:.0f} TFLOP/s" if ceil.get("fp8_mm_TFLOPs") else \
        f"n/a ({ceil.get('fp8_mm_error', '')})"
    print(f"{dev}: ceilings measured in this run: copy {ceil['copy_TBps']:.2f} TB/s (1 GiB, "
          f"read + write), fp8 _scaled_mm 8192^3 {mm}", flush=True)
    rows, bad = [], 0
    for kname in names:
        kind = kinds.kind(kname)
        for r in args.rows:
            for kv in args.kv:
                for pos in args.pos:
                    tgt = "sm_90a" if args.backend == "cuda" else args.chip
                    spec = common.make_spec(args.config, tp, r, kv, tgt)
                    try:
                        row = time_one(kind, spec, args, ceil, pos)
                    except Exception as e:  # noqa: BLE001 - report it, time the rest
                        row = dict(kind=kname, spec=spec.path, pos=pos,
                                   status=f"FAILED: {type(e).__name__}: {e}")
                    bad += row["status"] != "ok"
                    rows.append(row)
                    print(f"  {kname} {spec.path} pos {row.get('pos')}: "
                          f"{row.get('us', float('nan')):.2f} us ({row['status']})", flush=True)
    print(common.table(rows, ["kind", "spec", "pos", ("us", "us/launch"), ("floor_us", "floor us"),
                              ("x_floor", "x floor"), ("MB", "MB moved"), ("TBps", "TB/s"),
                              ("rel_err", "rel err"), ("rotMB", "rotated MB"),
                              ("graph", "per graph"), "status"]))
    for row in rows:
        if "_timeline" in row:
            L, stamps, scale, title = row["_timeline"]
            _print_timeline(L, stamps, scale, "us", args, title)
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.plot and not args.timeline:
        ap.error("--plot draws the timeline: add --timeline")
    if args.backend == "interp" and not args.timeline:
        ap.error("--backend interp has no microseconds: use it with --timeline (ticks)")
    if args.per_graph < 1 or args.reps < 1:
        ap.error("--per-graph and --reps must be at least 1")
    tp = common.resolve_tp(ap, args.config, args.tp)
    if args.backend == "interp":
        return run_interp(args, ap, tp)
    return run_gpu(args, ap, tp)


if __name__ == "__main__":
    sys.exit(main())
