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
    L.reference(inputs)                          the stages' float64 references, chained

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
        self.schedule = list_schedule(self.graph, grid, cost)
        self.witness = check_deadlock_free(self.schedule, self.graph, max_resident_ctas=grid)
        self.table = mlink.make_table(self.stages, self.schedule, self.graph, grid)
        self._linked: dict = {}
        self._cuda = None

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
    def linked(self, target: str = "interp", wave_size: int | None = None) -> mlink.LinkedKernel:
        key = (target, wave_size)
        if key not in self._linked:
            arena = self.arena
            self._linked[key] = mlink.link(
                self.name, self.stages, target=target, waves=self.waves, wave_size=wave_size,
                io=lambda env: protocol.Mailbox(env, arena), poll_bound=self.poll_bound)
        return self._linked[key]

    def kernel(self, target: str = "interp", wave_size: int | None = None):
        return self.linked(target, wave_size).kernel

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
                   max_steps: int = 50_000_000) -> Result:
        """Run the launch in the interpreter. `arena` is updated in place (pass the same one to
        every launch: it is never reset); `inputs` output buffers are written in place.
        Raises link.LaunchFailed naming the stage, job and CTA that timed out and the producer
        jobs whose words never arrived."""
        tag = self._tag(step, tag)
        arena = self.new_arena() if arena is None else arena
        if arena.dtype != np.uint8 or arena.size != self.arena.total_bytes:
            raise ValueError(f"arena must be {self.arena.total_bytes} uint8 bytes")
        lk = self.linked("interp", wave_size)
        err = lk.error_word()
        args = lk.args(arena=arena, table=self.table, err=err, tag=tag, **self._buffers(inputs))
        from monokernel import interp
        interp.run(lk.kernel, args, grid=self.table.grid, mode=mode, seed=seed,
                   on_stall=on_stall, max_steps=max_steps)
        self._check(lk, err, arena, tag)
        return self._result(inputs, arena, tag)

    def _buffers(self, inputs):
        specs = self.buffer_specs()
        missing = [n for n in specs if n not in inputs]
        if missing:
            raise ValueError(f"launch {self.name}: missing buffers {missing}")
        return {n: inputs[n] for n in specs}

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

    def run_cuda(self, inputs: dict, *, arena, step: int | None = None, tag: int | None = None,
                 device=None):
        """Run on an NVIDIA GPU (sm_90a PTX, cooperative launch on the schedule's grid).
        `inputs` and `arena` are CUDA torch tensors (the arena is never reset: pass the same
        one to every launch); raises link.LaunchFailed on a timeout. The Result's regions are
        decoded from a host copy of the arena."""
        import torch
        from monokernel.launch.cuda import CudaKernel
        tag = self._tag(step, tag)
        lk = self.linked("sm_90a")
        if self._cuda is None:
            self._cuda = CudaKernel(lk.kernel, device=device)
        dev = arena.device
        table = torch.from_numpy(self.table.data).to(dev)
        err = torch.zeros(1, dtype=torch.int64, device=dev)
        args = lk.args(arena=arena, table=table, err=err, tag=tag, **self._buffers(inputs))
        self._cuda.launch(args, grid=self.table.grid)
        host_err = err.cpu().numpy().view(np.uint64)
        host_arena = arena.cpu().numpy()
        self._check(lk, host_err, host_arena, tag)
        return self._result(inputs, host_arena, tag)
