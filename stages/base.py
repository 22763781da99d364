"""What a stage is (DESIGN.md sections 4 and 9).

A stage declares, in plain Python:

    name                      unique within a launch
    jobs()          -> [Job]  count, cost estimate (bytes, flops), LDS bytes
    regions()       -> [Region]   the arena regions it writes (it owns them)
    buffers()       -> {name: Buffer}   the tensors it reads or writes outside the arena
    reads(j)        -> [Use]  the region elements job j reads
    writes(j)       -> [Use]  the region elements job j writes
    body(k, job, io)          DSL; `job` is a uniform runtime i32, `io` a layouts.Mailbox
    reference(env)  -> {name: tensor}   torch float64 of what it computes
    bytes_moved()   -> {item: bytes} | None   optional: the byte floor (default: its buffers)
    prefetch(k, job, args)    optional, for launches linked with pdl: ask the L2 for what job
                              `job` (the CTA's first) reads of its Buffer(constant=True)
                              buffers (`args`: its kernel arguments), before the kernel's
                              grid_dep_wait, so those bytes stream while the launch before
                              this one finishes; nothing else may be touched there
    prefetch_lds(k, job, args)  optional, with pdl, where `lds_prefetch()` is true: instead of
                              prefetch, start copying those bytes into the job's own LDS
                              (asynchronous copies, not the waves' loads) before the wait;
                              the job's body then finds `io.env.lds_prefetched` true and
                              does not ask for them again

and never names a CTA, a lane number of a vendor, a byte offset or a tag. Which job produced
what a job reads is derived from the writes of every stage of the launch (`resolve`), so the
dependencies the scheduler orders, the deadlock proof checks and the kernel waits on are the
same declared facts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from layouts.regions import BulkBuffer, TaggedPairs
from monokernel.ir import Ptr, Scalar
from monokernel.types import DType, dtype as as_dtype


@dataclass(frozen=True)
class Job:
    index: int
    cost_bytes: float = 0
    cost_flops: float = 0
    lds_bytes: int = 0
    # the job does real work before its first wait (monokernel.schedule.JobNode.lead): it
    # runs first on a CTA of its own, so that work overlaps its producers
    lead: bool = False


@dataclass(frozen=True)
class Use:
    """Elements [lo, hi) of region `region` (flat, row-major element indices)."""
    region: str
    lo: int
    hi: int

    def __post_init__(self):
        if not (isinstance(self.lo, int) and isinstance(self.hi, int) and 0 <= self.lo < self.hi):
            raise ValueError(f"use of {self.region!r}: [{self.lo}, {self.hi}) is not a non-empty range")

    def overlaps(self, other: "Use") -> bool:
        return self.region == other.region and self.lo < other.hi and other.lo < self.hi


@dataclass(frozen=True)
class Buffer:
    """A tensor outside the arena (weights, activations, outputs): a kernel argument."""
    dtype: DType | str
    shape: tuple
    output: bool = False
    # the same bytes every launch (weights): readable before the kernel's grid_dep_wait
    constant: bool = False

    def __post_init__(self):
        object.__setattr__(self, "dtype", as_dtype(self.dtype))
        if self.output and self.constant:
            raise ValueError("a Buffer cannot be both an output and constant (the same bytes "
                             "every launch)")
        shape = (self.shape,) if isinstance(self.shape, int) else tuple(self.shape)
        object.__setattr__(self, "shape", shape)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def ptr(self) -> Ptr:
        return Ptr(self.dtype, readonly=not self.output, constant=self.constant)


class Stage:
    """Base class: subclasses set `name` and implement jobs/body/reference and what they
    declare. `deps(j)` is filled by `resolve` from every stage's writes."""
    name: str = ""
    rel_tol: float = 1e-5  # relative error against the float64 reference (max-norm)
    # attributes a user may set per run (the tools' --tune STAGE.ATTR=VALUE): a stage's
    # measured alternatives, each documented where it is defined
    TUNABLES: tuple = ()

    def jobs(self) -> list[Job]:
        raise NotImplementedError

    def regions(self) -> list:
        return []

    def buffers(self) -> dict:
        return {}

    def scalars(self) -> dict:
        return {}

    def bytes_moved(self) -> dict | None:
        """{item: bytes} this stage must move per launch (weights once, caches once: the byte
        floor), or None to count its declared buffers (Launch.bytes_moved)."""
        return None

    def reads(self, j: int) -> list[Use]:
        return []

    def writes(self, j: int) -> list[Use]:
        return []

    def body(self, k, job, io):
        raise NotImplementedError

    def reference(self, env: dict) -> dict:
        raise NotImplementedError

    # -- what the linker calls --------------------------------------------------------------
    def kernel_args(self) -> dict:
        out = {n: b.ptr for n, b in self.buffers().items()}
        out.update({n: Scalar(as_dtype(d)) for n, d in self.scalars().items()})
        return out

    def deps(self, j: int) -> list:
        try:
            return self._deps[j]
        except AttributeError:
            raise RuntimeError(f"stage {self.name!r}: dependencies are derived by "
                               "stages.base.resolve(stages) before scheduling") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def resolve(stages) -> dict:
    """Derive every job's producers from the writes of all stages, and check the declarations:
    reads and writes name regions of the launch, each pairs element is written by one job,
    every element read is written by some job of an EARLIER stage, and a bulk region has
    exactly `publishers` writer jobs (its counter counts them). A job waits for every writer
    of what it reads; of a bulk region, for all its writers (the counter is all-or-nothing).
    Returns {region: [(Use, key)]} (the writers)."""
    regions = {}
    for st in stages:
        for r in st.regions():
            if r.name in regions:
                raise ValueError(f"region {r.name!r} declared by two stages")
            regions[r.name] = (r, st.name)
    order = {st.name: i for i, st in enumerate(stages)}
    writers: dict[str, list] = {name: [] for name in regions}
    for st in stages:
        for job in st.jobs():
            for u in st.writes(job.index):
                if u.region not in regions:
                    raise ValueError(f"stage {st.name!r} job {job.index} writes unknown region {u.region!r}")
                r, owner = regions[u.region]
                if owner != st.name:
                    raise ValueError(f"stage {st.name!r} writes region {u.region!r}, owned by {owner!r}")
                if u.hi > _elements(r):
                    raise ValueError(f"stage {st.name!r} job {job.index} writes {u.region!r}"
                                     f"[{u.lo}:{u.hi}] past its {_elements(r)} elements")
                if isinstance(r, TaggedPairs):
                    for (w, key) in writers[u.region]:
                        if w.overlaps(u):
                            raise ValueError(f"pairs {u.region!r}[{max(u.lo, w.lo)}] is written by "
                                             f"{key[0]}[{key[1]}] and {st.name}[{job.index}]")
                writers[u.region].append((u, (st.name, job.index)))
    for name, (r, owner) in regions.items():
        if isinstance(r, BulkBuffer):
            n = len({key for _, key in writers[name]})
            if n != r.publishers:
                raise ValueError(f"bulk {name!r} declares {r.publishers} publishers but {n} jobs "
                                 "write it")
    bulk_writes: dict = {}  # bulk region -> its writes sorted by lo (every reader waits for all)
    for st in stages:
        deps = {}
        for job in st.jobs():
            ks, seen = [], set()
            for u in st.reads(job.index):
                if u.region not in regions:
                    raise ValueError(f"stage {st.name!r} job {job.index} reads unknown region {u.region!r}")
                r, owner = regions[u.region]
                if order[owner] >= order[st.name]:
                    raise ValueError(f"stage {st.name!r} reads {u.region!r}, written by the later or "
                                     f"same stage {owner!r}")
                if isinstance(r, BulkBuffer):
                    hit = writers[u.region]
                    if u.region not in bulk_writes:
                        bulk_writes[u.region] = sorted((w for w, _ in hit), key=lambda w: w.lo)
                    ws = bulk_writes[u.region]
                else:
                    hit = [(w, key) for (w, key) in writers[u.region] if w.overlaps(u)]
                    ws = [w for w, _ in hit]
                covered = _covered(u, ws)
                if not covered:
                    raise ValueError(f"stage {st.name!r} job {job.index} reads {u.region!r}"
                                     f"[{u.lo}:{u.hi}], which no job writes entirely")
                for _, key in hit:
                    if key not in seen:
                        seen.add(key)
                        ks.append(key)
            deps[job.index] = ks
        st._deps = deps
    return writers


def _elements(r) -> int:
    return r.elements if hasattr(r, "elements") else math.prod(r.shape)


def _covered(u: Use, ws) -> bool:
    pos = u.lo
    for w in sorted(ws, key=lambda w: w.lo):
        if w.lo > pos:
            return False
        pos = max(pos, w.hi)
        if pos >= u.hi:
            return True
    return pos >= u.hi
