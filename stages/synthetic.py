"""A synthetic multi-stage launch: every protocol of the linker in one small kernel.

    produce[t*S + s]  (tiles x splits jobs)  partial GEMV over K-split s of row tile t:
                      partials[t, s, r] = sum_{k in split s} W[t*T + r, k] * h[k]
                      -> tagged pairs 'partials'
    reduce[t]         (tiles jobs, fan-in S) y[t*T + r] = sum_s partials[t, s, r], summed in
                      the FIXED order s = 0, 1, ..., S-1 (bit-identical run to run)
                      -> tagged pairs 'y'
    norm[c]           (fan-in: every reduce job; fan-out: every reduce job feeds every norm
                      job) z = y * rsqrt(mean(y^2) + eps) * g on chunk c
                      -> bulk 'z' (plain stores, release, counter bumped by each norm job)
    gather[j]         acquires the counter of 'z' (all norm jobs), then
                      out[m] = z[m] - 0.5 * z[N-1-m] on chunk j: reads other CTAs' bulk data
                      -> buffer 'out'

Variants for negative tests: `skip_publish` (True: no produce job publishes; an int: that job
does not), `release=False` (norm drops its release fence), `acquire=False` (gather drops
its acquire fence).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from layouts.regions import BulkBuffer, TaggedPairs
from monokernel.types import f32

from .base import Buffer, Job, Stage, Use
from .launch import Launch


@dataclass(frozen=True)
class SyntheticConfig:
    tiles: int = 4
    splits: int = 4
    tile_rows: int = 64
    k: int = 64
    norm_jobs: int = 4
    gather_jobs: int = 2
    eps: float = 1e-6

    @property
    def n(self) -> int:
        return self.tiles * self.tile_rows

    def __post_init__(self):
        if self.k % self.splits:
            raise ValueError(f"K = {self.k} must split evenly into {self.splits}")
        if self.n % self.norm_jobs or self.n % self.gather_jobs:
            raise ValueError(f"N = {self.n} must split evenly into {self.norm_jobs} norm and "
                             f"{self.gather_jobs} gather jobs")


def _tid(k):
    return k.wave_id() * k.L + k.lane_id()


class Produce(Stage):
    name = "produce"

    def __init__(self, cfg: SyntheticConfig, skip_publish=False):
        self.cfg = cfg
        self.skip_publish = skip_publish

    def jobs(self):
        c = self.cfg
        ks = c.k // c.splits
        return [Job(j, cost_bytes=c.tile_rows * ks * 4 + ks * 4 + c.tile_rows * 8,
                    cost_flops=2 * c.tile_rows * ks) for j in range(c.tiles * c.splits)]

    def regions(self):
        c = self.cfg
        return [TaggedPairs("partials", (c.tiles, c.splits, c.tile_rows), f32)]

    def buffers(self):
        c = self.cfg
        return {"W": Buffer(f32, (c.n, c.k)), "h": Buffer(f32, (c.k,))}

    def writes(self, j):
        T = self.cfg.tile_rows
        return [Use("partials", j * T, (j + 1) * T)]

    def body(self, k, job, io):
        c = self.cfg
        T, S, K = c.tile_rows, c.splits, c.k
        KS = K // S
        t, s = job / S, job % S
        for r0 in k.range(0, T, k.L * k.W):
            r = r0 + _tid(k)
            m = r < T
            row = t * T + r
            acc = k.lane_var(0.0, f32)
            for kk in k.range(KS):
                col = s * KS + kk
                w = k.load(io.args.W, row * K + col, f32, mask=m)
                x = k.load(io.args.h, col, f32)
                acc.set(acc.get() + w * x)
            if self.skip_publish is True:
                continue
            if self.skip_publish is False:
                io.publish("partials", job * T + r, acc.get(), mask=m)
            else:
                with k.if_(job.ne(int(self.skip_publish))):
                    io.publish("partials", job * T + r, acc.get(), mask=m)

    def reference(self, env):
        c = self.cfg
        ks = c.k // c.splits
        W = env["W"].reshape(c.tiles, c.tile_rows, c.splits, ks)
        h = env["h"].reshape(c.splits, ks)
        import torch
        return {"partials": torch.einsum("trsk,sk->tsr", W, h)}


class Reduce(Stage):
    name = "reduce"

    def __init__(self, cfg: SyntheticConfig):
        self.cfg = cfg

    def jobs(self):
        c = self.cfg
        return [Job(t, cost_bytes=c.splits * c.tile_rows * 8 + c.tile_rows * 8,
                    cost_flops=c.splits * c.tile_rows) for t in range(c.tiles)]

    def regions(self):
        return [TaggedPairs("y", (self.cfg.n,), f32)]

    def reads(self, t):
        c = self.cfg
        span = c.splits * c.tile_rows
        return [Use("partials", t * span, (t + 1) * span)]

    def writes(self, t):
        T = self.cfg.tile_rows
        return [Use("y", t * T, (t + 1) * T)]

    def body(self, k, job, io):
        c = self.cfg
        T, S = c.tile_rows, c.splits
        for r0 in k.range(0, T, k.L * k.W):
            r = r0 + _tid(k)
            m = r < T
            acc = io.wait("partials", (job * S) * T + r, mask=m)
            for s in range(1, S):  # a Python loop: the summation order is fixed in the code
                acc = acc + io.wait("partials", (job * S + s) * T + r, mask=m)
            io.publish("y", job * T + r, acc, mask=m)

    def reference(self, env):
        return {"y": env["partials"].sum(1).reshape(self.cfg.n)}


class Norm(Stage):
    name = "norm"
    rel_tol = 2e-5

    def __init__(self, cfg: SyntheticConfig, release=True):
        self.cfg = cfg
        self.release = release

    @property
    def chunk(self):
        return self.cfg.n // self.cfg.norm_jobs

    def jobs(self):
        c = self.cfg
        return [Job(j, cost_bytes=c.n * 8 + self.chunk * 12, cost_flops=2 * c.n + 3 * self.chunk)
                for j in range(c.norm_jobs)]

    def regions(self):
        c = self.cfg
        return [BulkBuffer("z", f32, (c.n,), publishers=c.norm_jobs)]

    def buffers(self):
        return {"g": Buffer(f32, (self.cfg.n,))}

    def reads(self, j):
        return [Use("y", 0, self.cfg.n)]

    def writes(self, j):
        return [Use("z", j * self.chunk, (j + 1) * self.chunk)]

    def body(self, k, job, io):
        c = self.cfg
        N, NC = c.n, self.chunk
        ss = k.lane_var(0.0, f32)
        for i0 in k.range(0, N, k.L):  # every wave sums all of y itself: no cross-wave step
            i = i0 + k.lane_id()
            v = io.wait("y", i, mask=i < N)
            ss.set(ss.get() + v * v)
        mean = k.wave_sum(ss.get()) / float(N)
        scale = k.rsqrt(mean + c.eps)
        for i0 in k.range(0, NC, k.L * k.W):
            i = i0 + _tid(k)
            m = i < NC
            e = job * NC + i
            v = io.wait("y", e, mask=m)
            g = k.load(io.args.g, e, f32, mask=m)
            io.store("z", e, v * scale * g, mask=m)
        io.release("z", fence=self.release)

    def reference(self, env):
        import torch
        y = env["y"]
        return {"z": y * torch.rsqrt((y * y).mean() + self.cfg.eps) * env["g"]}


class Gather(Stage):
    name = "gather"
    rel_tol = 2e-5

    def __init__(self, cfg: SyntheticConfig, acquire=True):
        self.cfg = cfg
        self.acquire = acquire

    @property
    def chunk(self):
        return self.cfg.n // self.cfg.gather_jobs

    def jobs(self):
        return [Job(j, cost_bytes=self.chunk * 12, cost_flops=2 * self.chunk)
                for j in range(self.cfg.gather_jobs)]

    def buffers(self):
        return {"out": Buffer(f32, (self.cfg.n,), output=True)}

    def reads(self, j):
        return [Use("z", 0, self.cfg.n)]

    def body(self, k, job, io):
        N, NG = self.cfg.n, self.chunk
        io.acquire("z", fence=self.acquire)
        for i0 in k.range(0, NG, k.L * k.W):
            i = i0 + _tid(k)
            m = i < NG
            e = job * NG + i
            a = io.load("z", e, mask=m)
            b = io.load("z", (N - 1) - e, mask=m)
            k.store(io.args.out, e, a - b * 0.5, mask=m & io.ok)

    def reference(self, env):
        z = env["z"]
        return {"out": z - 0.5 * z.flip(0)}


def synthetic_stages(cfg: SyntheticConfig = SyntheticConfig(), *, skip_publish=False,
                     release=True, acquire=True) -> list:
    return [Produce(cfg, skip_publish), Reduce(cfg), Norm(cfg, release), Gather(cfg, acquire)]


def synthetic_launch(cfg: SyntheticConfig = SyntheticConfig(), *, grid: int = 8, waves: int = 1,
                     poll_bound: int | None = None, skip_publish=False, release=True,
                     acquire=True, **kw) -> Launch:
    stages = synthetic_stages(cfg, skip_publish=skip_publish, release=release, acquire=acquire)
    if poll_bound is not None:
        kw["poll_bound"] = poll_bound
    return Launch("synthetic", stages, grid=grid, waves=waves, **kw)


def make_inputs(cfg: SyntheticConfig, rng) -> dict:
    n, k = cfg.n, cfg.k
    return dict(W=(rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32),
                h=rng.standard_normal(k).astype(np.float32),
                g=rng.uniform(0.5, 1.5, n).astype(np.float32),
                out=np.full(n, np.nan, np.float32))


def max_rel_err(got, ref) -> float:
    """Max-norm relative error against the float64 reference."""
    got = np.asarray(got, np.float64).reshape(-1)
    ref = np.asarray(ref, np.float64).reshape(-1)
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


def _kind_launch(spec):
    """The synthetic launch as a kind: the grid is the target's (one CTA per CU/SM), a small
    one in the interpreter."""
    grid = 8 if spec.target == "interp" else spec.target_info.num_ctas
    return synthetic_launch(SyntheticConfig(), grid=grid)


def _kind_inputs(launch, spec, rng):
    return make_inputs(SyntheticConfig(), rng)


from .kinds import Kind, register  # noqa: E402

register(Kind("synthetic", "producer -> K-split reduction -> fan-in/fan-out norm -> gather "
              "(the assembly's proof launch)", _kind_launch, _kind_inputs, default=False))
