"""The standalone launches' producers of what the scoring publishes in the fused index
launch: first-digit histograms, scores fed from an input, a scoring-like model."""
from __future__ import annotations

import numpy as np

from layouts.regions import BulkBuffer, PlainBuffer, TaggedPairs
from layouts.scores import FIRST_DIGIT_BINS, FIRST_DIGIT_SHIFT
from monokernel.types import f32, i32, u32

from ..base import Buffer, Job, Stage, Use
from .config import SelectConfig
from .lanes import _barrier, _flat, _i, _u, _wave0, ordered_keys
from .reference import segment_histograms



# ----------------------------------------------------------------------------- producers
# (standalone launches: what the scoring will publish in the fused index launch)

class ScoreHistStage(Stage):
    """The scoring's first-digit histograms, as the scoring publishes them: per (row,
    segment) job, the 64 counts of key >> 26 over the segment's visible keys (key 0, i.e.
    -inf and NaN, in bin 0; positions >= n_keys not counted) -> tagged pairs `score_hist`."""

    def __init__(self, cfg: SelectConfig, scores):
        self.cfg = cfg
        self.scores = scores
        self.name = f"{cfg.prefix}_feed_hist"

    def jobs(self):
        c = self.cfg
        return [Job(j, cost_bytes=c.segment * 4, cost_flops=c.segment)
                for j in range(c.rows * c.segments)]

    def regions(self):
        c = self.cfg
        return [TaggedPairs(c.names.score_hist, (c.rows, c.segments, FIRST_DIGIT_BINS), u32)]

    def buffers(self):
        c = self.cfg
        out = {c.names.n_keys: Buffer(i32, (c.rows,))}
        out.update(self.scores.buffers())
        return out

    def reads(self, j):
        return list(self.scores.reads(j // self.cfg.segments))

    def writes(self, j):
        return [Use(self.cfg.names.score_hist, j * FIRST_DIGIT_BINS, (j + 1) * FIRST_DIGIT_BINS)]

    def reference(self, env):
        import torch
        c = self.cfg
        h = segment_histograms(c, env[c.names.scores].cpu().numpy().astype(np.float32),
                               c.n_of(env[c.names.n_keys].cpu().numpy()))
        return {c.names.score_hist: torch.as_tensor(h.astype(np.int64), dtype=torch.float64)}

    def body(self, k, job, io):
        io = _flat(io)
        c = self.cfg
        r = job / c.segments
        g = job % c.segments
        n = k.load(getattr(io.args, c.names.n_keys), r, i32) + (1 if c.positions else 0)
        n = k.min(k.max(n, 0), c.capacity)
        lo = g * c.segment
        hi = k.min(lo + c.segment, n)
        hist = k.lds(f"{self.name}_hist", u32, FIRST_DIGIT_BINS)
        t = k.thread_id()
        T = k.W * k.L
        for i in range((FIRST_DIGIT_BINS + T - 1) // T):
            idx = t + i * T
            k.store(hist, k.min(idx, FIRST_DIGIT_BINS - 1), k.const(0, u32),
                    mask=idx < FIRST_DIGIT_BINS)
        _barrier(k)
        self.scores.prepare(k, io)
        one = k.const(1, u32)
        with k.if_(lo < hi):
            for base in k.range(lo, hi, 4 * T):
                p = base + 4 * t
                m = p < hi
                key, _ = ordered_keys(k, self.scores.load4(k, io, r, p, m))
                valid = k.vec(p, p + 1, p + 2, p + 3) < hi
                digit = key >> FIRST_DIGIT_SHIFT
                for e in range(4):
                    k.atomic("add", hist, _i(k, k.extract(digit, e)), one,
                             mask=k.extract(valid, e), scope="cta")
        _barrier(k)
        for i in range((FIRST_DIGIT_BINS + T - 1) // T):
            b = t + i * T
            m = b < FIRST_DIGIT_BINS
            bb = k.min(b, FIRST_DIGIT_BINS - 1)
            v = k.load(hist, bb, u32, mask=m)
            io.publish(c.names.score_hist, job * FIRST_DIGIT_BINS + bb, v, mask=m)


class _InjectedScores(Stage):
    """A stage that hands injected scores (input buffer `source_name`) to the selection: one
    job a row, reading and writing the row's capacity of f32 scores."""
    SUFFIX = ""

    def __init__(self, cfg: SelectConfig, source_name: str = "scores_in"):
        self.cfg = cfg
        self.src = source_name
        self.name = f"{cfg.prefix}_feed_{self.SUFFIX}"

    def jobs(self):
        c = self.cfg
        return [Job(r, cost_bytes=c.capacity * 8) for r in range(c.rows)]

    def reference(self, env):
        return {self.cfg.names.scores: env[self.src]}  # (the visible part is what is read)


class ScoresFeed(_InjectedScores):
    """Copies the input scores into the arena region the selection reads (a BulkBuffer, one
    publisher per row): the fused launch's scoring writes the region instead."""
    SUFFIX = "scores"

    def regions(self):
        c = self.cfg
        return [BulkBuffer(c.names.scores, f32, (c.rows, c.capacity), publishers=c.rows)]

    def buffers(self):
        c = self.cfg
        return {self.src: Buffer(f32, (c.rows, c.capacity))}

    def writes(self, r):
        c = self.cfg
        return [Use(c.names.scores, r * c.capacity, (r + 1) * c.capacity)]

    def body(self, k, job, io):
        io = _flat(io)
        c = self.cfg
        t = k.thread_id()
        T = k.W * k.L
        for base in k.range(0, c.capacity, 4 * T):
            p = base + 4 * t
            m = p < c.capacity
            v = k.load(getattr(io.args, self.src), job * c.capacity + p, f32, 4, mask=m)
            io.store(c.names.scores, job * c.capacity + p, v, mask=m)
        io.release(c.names.scores)


class ScoringModel(_InjectedScores):
    """The index launch's scoring protocol (stages/index.py), on injected scores: job r
    writes row r's visible scores to the plain region `scores` and their first-digit counts
    per segment to the plain region `score_hist` (segments past the row's last key
    untouched), then a release fence and its `score_done` pair. A consumer waits for all of
    them (`score_done_ready`): as with the scoring, any job may write any row."""
    SUFFIX = "scoring"

    def regions(self):
        c, nm = self.cfg, self.cfg.names
        return [PlainBuffer(nm.scores, f32, (c.rows, c.capacity)),
                PlainBuffer(nm.score_hist, u32, (c.rows, c.segments, FIRST_DIGIT_BINS)),
                TaggedPairs(nm.score_done, (c.rows,), u32)]

    def buffers(self):
        c = self.cfg
        return {self.src: Buffer(f32, (c.rows, c.capacity)), c.names.n_keys: Buffer(i32, (c.rows,))}

    def writes(self, r):
        c, nm = self.cfg, self.cfg.names
        w = c.segments * FIRST_DIGIT_BINS
        return [Use(nm.scores, r * c.capacity, (r + 1) * c.capacity),
                Use(nm.score_hist, r * w, (r + 1) * w), Use(nm.score_done, r, r + 1)]

    def body(self, k, job, io):
        io = _flat(io)
        c, nm = self.cfg, self.cfg.names
        n = k.load(getattr(io.args, nm.n_keys), job, i32) + (1 if c.positions else 0)
        n = k.min(k.max(n, 0), c.capacity)
        t = k.thread_id()
        T = k.W * k.L
        hist = k.lds(f"{self.name}_hist", u32, FIRST_DIGIT_BINS)
        one = k.const(1, u32)
        row = job * c.capacity
        for g in k.range(0, (n + (c.segment - 1)) / c.segment):
            for i in range((FIRST_DIGIT_BINS + T - 1) // T):
                b = t + i * T
                k.store(hist, k.min(b, FIRST_DIGIT_BINS - 1), k.const(0, u32),
                        mask=b < FIRST_DIGIT_BINS)
            _barrier(k)
            lo = g * c.segment
            hi = k.min(lo + c.segment, n)
            for base in k.range(lo, hi, 4 * T):
                p = base + 4 * t
                m = p < hi
                v = k.load(getattr(io.args, self.src), row + p, u32, 4, mask=m)
                valid = k.vec(p, p + 1, p + 2, p + 3) < hi
                for e in range(4):  # the scoring stores visible scores only
                    io.store(nm.scores, row + p + e, k.bitcast(k.extract(v, e), f32),
                             mask=k.extract(valid, e))
                key, _ = ordered_keys(k, v)
                digit = key >> FIRST_DIGIT_SHIFT
                for e in range(4):
                    k.atomic("add", hist, _i(k, k.extract(digit, e)), one,
                             mask=k.extract(valid, e), scope="cta")
            _barrier(k)
            for i in range((FIRST_DIGIT_BINS + T - 1) // T):
                b = t + i * T
                m = b < FIRST_DIGIT_BINS
                bb = k.min(b, FIRST_DIGIT_BINS - 1)
                io.store(nm.score_hist, (job * c.segments + g) * FIRST_DIGIT_BINS + bb,
                         k.load(hist, bb, u32, mask=m), mask=m)
            _barrier(k)
        k.fence("release", "device")
        _barrier(k)
        with _wave0(k):
            io.publish(nm.score_done, job, _u(k, n))

