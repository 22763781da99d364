"""A launch: stages -> arena layout -> schedule -> link (DESIGN.md section 2's one way).

    L = Launch("synthetic", stages, grid=8)
    L.arena          the scratch layout of every region the stages declare
    L.proofs         the offset-width proof of every arena and buffer access
    L.schedule       the critical-path list schedule, checked deadlock-free
    L.table          the schedule as the kernel reads it (a kernel argument)
    L.linked(target) the persistent kernel (monokernel.link), built once per target
    L.tag(step)      layouts.tags.tag_for(step, launch_index, launches_per_step)
    L.run_interp(inputs, arena=..., step=...)   run, check the error word, decode the arena
    L.run_cuda(inputs, arena=..., step=...)     the same through the CUDA driver
    L.run_hip(inputs, arena=..., step=...)      the same through HIP (monokernel.launch.hip)
    L.reference(inputs)                          the stages' float64 references, chained
    L.bytes_moved()                              the byte floor's numerator (weights once, ...)
    L.timeline_buffer() / L.timeline(stamps)     per-job timestamps (run_*(timeline=buffer))

The arena passed in is the scratch: zeroed once (`L.new_arena()`), then reused by every
launch, never reset; the tag tells each launch's words from the previous ones'.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layouts import protocol
from layouts.arena import Arena
from layouts.decode import decode
from layouts.offsets import Access, prove_all, region_access
from layouts.regions import BulkBuffer, TaggedPairs
from layouts.tags import tag_for
from monokernel import link as mlink
from monokernel.schedule import check_deadlock_free, list_schedule

from .base import resolve


@dataclass
class Result:
    outputs: dict  # output buffers (numpy)
    regions: dict  # decoded arena regions: pairs -> values, bulk/plain -> data
    tag: int
    arena: np.ndarray


# Targets whose builds overlay the stages' LDS by default (Launch.lds_overlay): measured on
# the H200 (bench/NOTES.md v25: the fused index 181 -> 70 KB, no measurable speed change;
# kept for the room it leaves later stages)
LDS_OVERLAY_TARGETS = ("sm_90a",)


class Launch:
    def __init__(self, name, stages, *, grid: int, waves: int = 1, launch_index: int = 0,
                 launches_per_step: int = 1, poll_bound: int = protocol.DEFAULT_POLL_BOUND,
                 cost=None):
        self.name = name
        self.stages = list(stages)
        self.waves = waves
        self.launch_index, self.launches_per_step = launch_index, launches_per_step
        self.poll_bound = poll_bound
        self.writers = resolve(self.stages)
        self.arena = Arena.from_regions([r for st in self.stages for r in st.regions()])
        self.proofs = prove_all(self.accesses())
        self.graph = mlink.job_graph(self.stages)
        self.grid = grid
        # the list scheduler's lead_alone (monokernel.schedule.list_schedule): nothing queued
        # behind a lead job on its CTA. Off until timed (bench/NOTES.md v38); --tune
        # launch.lead_alone=1 reschedules
        self.lead_alone = False
        self._linked: dict = {}
        self._cuda: dict = {}
        self._hip: dict = {}
        self.reschedule(cost)
        # programmatic dependent launch (sm_90a; --tune launch.pdl=1): each launch may start
        # under the one before it, its first job's constant inputs asked of the L2 before
        # its grid_dep_wait (monokernel.link); values never change with it
        self.pdl = False
        # the stages' LDS allocations share one range (a CTA runs one job at a time), the
        # kernel's LDS the largest stage's rather than the sum (monokernel.link); values
        # never change with it. None: on for LDS_OVERLAY_TARGETS, off elsewhere (AMD:
        # unmeasured, its code objects unchanged; the interpreter); --tune
        # launch.lds_overlay=0 / 1
        self.lds_overlay = None
        # every job asks the L2 for the next job's constant inputs before it runs, the CTA's
        # first job's at the start (Stage.prefetch; monokernel.link); values never change
        # with it. --tune launch.prefetch_next=1
        self.prefetch_next = False
        # the pause between every wait's polls, in the chip's shortest (ir.Kernel.
        # poll_backoff: 64 ns on sm_90a, 64 clocks on AMD); values never change with it.
        # --tune launch.poll_backoff=N
        self.poll_backoff = 1

    def reschedule(self, cost=None):
        """Place the jobs again under `cost` (a schedule.CostModel, a ProfiledCost from
        monokernel.profile, or None: the grid's default), check the placement deadlock-free
        and rebuild the schedule table; kernels built before are dropped (their table is
        the old one). Outputs never depend on the placement, only when each job runs."""
        schedule = list_schedule(self.graph, self.grid, cost, lead_alone=self.lead_alone)
        witness = check_deadlock_free(schedule, self.graph, max_resident_ctas=self.grid)
        table = mlink.make_table(self.stages, schedule, self.graph, self.grid)
        self.schedule, self.witness, self.table = schedule, witness, table
        for built in (self._linked, self._cuda, self._hip):
            built.clear()
        return self

    # -- layout and proofs ----------------------------------------------------------------
    def accesses(self) -> list[Access]:
        """Every access the kernel forms: per (stage, region, read/write) the union of the
        element ranges its jobs touch, through the arena resource; per (stage, buffer) the
        whole buffer, indexed in int32."""
        out = []
        for st in self.stages:
            spans: dict = {}
            for job in st.jobs():
                for how, uses in (("reads", st.reads(job.index)), ("writes", st.writes(job.index))):
                    for u in uses:
                        lo, hi = spans.get((how, u.region), (u.lo, u.hi))
                        spans[(how, u.region)] = (min(lo, u.lo), max(hi, u.hi))
            for (how, region), (lo, hi) in spans.items():
                out.append(region_access(self.arena, region, (lo, hi - 1),
                                         name=f"{st.name} {how} {region}"))
            for bname, b in st.buffers().items():
                out.append(Access(f"{st.name} {bname}", bname, b.dtype.bytes, (0, b.elements - 1),
                                  buffer_elems=b.elements))
        return out

    def new_arena(self) -> np.ndarray:
        """The scratch, zeroed once."""
        return self.arena.zeros()

    def tag(self, step: int) -> int:
        return tag_for(step, self.launch_index, self.launches_per_step)

    # -- build ----------------------------------------------------------------------------
    def linked(self, target: str = "interp", wave_size: int | None = None,
               timeline: bool = False) -> mlink.LinkedKernel:
        overlay = self.overlays_lds(target)
        key = (target, wave_size, bool(timeline)) + self._link_settings(target)
        if key not in self._linked:
            arena = self.arena
            self._linked[key] = mlink.link(
                self.name, self.stages, target=target, waves=self.waves, wave_size=wave_size,
                io=lambda env: protocol.Mailbox(env, arena), poll_bound=self.poll_bound,
                timeline=timeline, pdl=self.pdl, lds_overlay=overlay,
                prefetch_next=self.prefetch_next, poll_backoff=self.poll_backoff)
        return self._linked[key]

    def _link_settings(self, target: str) -> tuple:
        """What a built kernel of `target` depends on besides the stages (the keys of the
        built kernels: a setting changed after a build builds anew)."""
        return (self.pdl, self.overlays_lds(target), self.prefetch_next, self.poll_backoff)

    def overlays_lds(self, target: str) -> bool:
        """Whether the build for `target` overlays the stages' LDS (Launch.lds_overlay)."""
        if self.lds_overlay is None:
            return target in LDS_OVERLAY_TARGETS
        return bool(self.lds_overlay)

    def kernel(self, target: str = "interp", wave_size: int | None = None,
               timeline: bool = False):
        return self.linked(target, wave_size, timeline).kernel

    # -- what it moves and when each job ran --------------------------------------------------
    def bytes_moved(self) -> dict:
        """The bytes the launch must move, by item (the byte floor's numerator: weights once,
        caches once, activations in, outputs out; never the arena's mailbox traffic). A stage
        may say it exactly with `bytes_moved() -> {item: bytes}`; a stage that returns None
        (the default) counts its declared buffers, each buffer once per launch however many
        stages declare it."""
        out: dict = {}
        seen: set = set()
        for st in self.stages:
            own = st.bytes_moved() if hasattr(st, "bytes_moved") else None
            names = set(st.buffers())
            if own is None:
                own = {n: b.elements * b.dtype.bytes for n, b in st.buffers().items()
                       if n not in seen}
            for item, nb in own.items():
                out[item] = out.get(item, 0) + int(nb)
            seen |= names
        return out

    def timeline_buffer(self) -> np.ndarray:
        """A zeroed timestamp buffer (2 u64 per schedule entry) for run_*(timeline=...)."""
        return mlink.timeline_buffer(self.table)

    def timeline(self, stamps) -> list:
        """link.TimelineRecord per job that ran: CTA, position, stage, job, start, end."""
        return mlink.timeline_records(self.table, stamps)

    def buffer_specs(self) -> dict:
        out = {}
        for st in self.stages:
            for n, b in st.buffers().items():
                if n in out and out[n] != b:
                    raise ValueError(f"buffer {n!r} declared differently by two stages")
                out[n] = b
        return out

    # -- reference --------------------------------------------------------------------------
    def reference(self, inputs: dict) -> dict:
        """Every stage's float64 torch reference, in stage order; returns numpy float64 of
        everything computed (regions and output buffers)."""
        import torch
        env = {n: torch.as_tensor(np.asarray(v), dtype=torch.float64) for n, v in inputs.items()
               if isinstance(v, np.ndarray)}
        produced = []
        for st in self.stages:
            out = st.reference(env)
            produced += [n for n in out if n not in produced]
            env.update(out)
        return {n: env[n].detach().cpu().numpy() for n in produced}

    # -- running ----------------------------------------------------------------------------
    def _tag(self, step, tag):
        if (step is None) == (tag is None):
            raise ValueError("give exactly one of step= or tag=")
        return self.tag(step) if tag is None else tag

    def run_interp(self, inputs: dict, *, arena: np.ndarray | None = None, step: int | None = None,
                   tag: int | None = None, mode: str = "inorder", seed: int = 0,
                   on_stall: str = "raise", wave_size: int | None = None,
                   max_steps: int = 50_000_000, timeline: np.ndarray | None = None,
                   prefetched: dict | None = None) -> Result:
        """Run the launch in the interpreter. `arena` is updated in place (pass the same one to
        every launch: it is never reset); `inputs` output buffers are written in place.
        Raises link.LaunchFailed naming the stage, job and CTA that timed out and the producer
        jobs whose words never arrived. With `timeline` (a `timeline_buffer()`), the timeline
        kernel runs and fills it with interpreter ticks. `prefetched`: interp.run's (each
        buffer's bytes asked of the L2 by prefetch_l2, counted)."""
        tag = self._tag(step, tag)
        arena = self.new_arena() if arena is None else arena
        if arena.dtype != np.uint8 or arena.size != self.arena.total_bytes:
            raise ValueError(f"arena must be {self.arena.total_bytes} uint8 bytes")
        lk = self.linked("interp", wave_size, timeline is not None)
        err = lk.error_word()
        args = lk.args(arena=arena, table=self.table, err=err, tag=tag,
                       **self._buffers(inputs, timeline))
        from monokernel import interp
        interp.run(lk.kernel, args, grid=self.table.grid, mode=mode, seed=seed,
                   on_stall=on_stall, max_steps=max_steps, prefetched=prefetched)
        self._check(lk, err, arena, tag)
        return self._result(inputs, arena, tag)

    def _buffers(self, inputs, timeline=None):
        specs = self.buffer_specs()
        missing = [n for n in specs if n not in inputs]
        if missing:
            raise ValueError(f"launch {self.name}: missing buffers {missing}")
        out = {n: inputs[n] for n in specs}
        if timeline is not None:
            out[mlink.TIMELINE_ARG] = timeline
        return out

    def _result(self, inputs, arena, tag) -> Result:
        """Output buffers (as passed: numpy, or CUDA tensors) and the decoded host arena."""
        regions = {}
        for p in self.arena:
            d = decode(self.arena, arena, p.name)
            regions[p.name] = d.values if isinstance(p.region, TaggedPairs) else \
                d.data if isinstance(p.region, BulkBuffer) else d
        outs = {n: inputs[n] for n, b in self.buffer_specs().items() if b.output}
        return Result(outs, regions, tag, arena)

    def _check(self, lk, err, arena, tag):
        failure = lk.decode_error(err, self.table, tag)
        if failure is None:
            return
        if failure.stage is not None:
            missing = self.missing_producers(arena, failure.stage, failure.job, tag)
            if missing:
                names = ", ".join(f"{s}[{j}]" for s, j in missing)
                msg = f"{failure}; not published for this launch by: {names}"
                failure = mlink.LaunchFailed(msg, stage=failure.stage, job=failure.job,
                                             cta=failure.cta, what=failure.what, word=failure.word,
                                             missing=missing)
        raise failure

    def missing_producers(self, arena, stage: str, job: int, tag: int) -> list:
        """The writer jobs of what `stage[job]` reads whose words do not carry `tag` (pairs)
        or whose bulk counter is incomplete: who failed to publish, read from the arena."""
        st = next(s for s in self.stages if s.name == stage)
        out = []
        for u in st.reads(job):
            r = self.arena.region(u.region)
            d = decode(self.arena, arena, u.region)
            for w, key in self.writers[u.region]:
                if isinstance(r, TaggedPairs):
                    lo, hi = max(u.lo, w.lo), min(u.hi, w.hi)
                    if lo < hi and not (d.tags.reshape(-1)[lo:hi] == tag).all() and key not in out:
                        out.append(key)
                elif isinstance(r, BulkBuffer) and not d.complete(tag, r.publishers):
                    if key not in out:
                        out.append(key)
        return out

    def cuda_kernel(self, timeline: bool = False, device=None):
        """The CudaKernel of the sm_90a build (loaded once per timeline flag)."""
        from monokernel.launch.cuda import CudaKernel
        key = (timeline,) + self._link_settings("sm_90a")
        if key not in self._cuda:
            self._cuda[key] = CudaKernel(self.linked("sm_90a", None, timeline).kernel,
                                         device=device)
        return self._cuda[key]

    def run_cuda(self, inputs: dict, *, arena, step: int | None = None, tag: int | None = None,
                 device=None, timeline=None):
        """Run on an NVIDIA GPU (sm_90a PTX, cooperative launch on the schedule's grid).
        `inputs` and `arena` are CUDA torch tensors (the arena is never reset: pass the same
        one to every launch); raises link.LaunchFailed on a timeout. The Result's regions are
        decoded from a host copy of the arena. `timeline`: a CUDA u64/int64 tensor of
        2 x entries stamps (globaltimer ns) runs the timeline kernel."""
        import torch
        tag = self._tag(step, tag)
        lk = self.linked("sm_90a", None, timeline is not None)
        ck = self.cuda_kernel(timeline is not None, device)
        dev = arena.device
        table = torch.from_numpy(self.table.data).to(dev)
        err = torch.zeros(1, dtype=torch.int64, device=dev)
        args = lk.args(arena=arena, table=table, err=err, tag=tag,
                       **self._buffers(inputs, timeline))
        ck.launch(args, grid=self.table.grid, pdl=self.pdl)
        host_err = err.cpu().numpy().view(np.uint64)
        host_arena = arena.cpu().numpy()
        self._check(lk, host_err, host_arena, tag)
        return self._result(inputs, host_arena, tag)

    def run_hip(self, inputs: dict, *, arena, step: int | None = None, tag: int | None = None,
                target: str = "gfx950", code_object: bytes | None = None, timeline=None):
        """Run on an AMD GPU through HIP (monokernel.launch.hip; untested: no AMD GPU is
        available to the project). `inputs` and `arena` are ROCm torch tensors; the code
        object is built for `target` unless given."""
        import torch
        from monokernel.launch.hip import HipKernel
        tag = self._tag(step, tag)
        lk = self.linked(target, None, timeline is not None)
        key = (target, timeline is not None) + self._link_settings(target)
        if key not in self._hip:
            if code_object is None:
                from monokernel.build import build
                code_object = build(lk.kernel).data
            self._hip[key] = HipKernel(code_object, lk.kernel)
        dev = arena.device
        table = torch.from_numpy(self.table.data).to(dev)
        err = torch.zeros(1, dtype=torch.int64, device=dev)
        args = lk.args(arena=arena, table=table, err=err, tag=tag,
                       **self._buffers(inputs, timeline))
        self._hip[key].launch(args, grid=self.table.grid)
        host_err = err.cpu().numpy().view(np.uint64)
        host_arena = arena.cpu().numpy()
        self._check(lk, host_err, host_arena, tag)
        return self._result(inputs, host_arena, tag)
