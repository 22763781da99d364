"""Cycle accounts of a stage's loop (time_layers --timeline's tallies column).

A wave reads its processor clock (k.cycles()) at marks inside its loop and adds the clocks
since the previous mark to a part; at the job's end every part goes to the job's tallies
(JobEnv.tally: sums over the job's waves). Where the kernel is not a timeline kernel no code
is built, so the measured code object differs from the timed one only in the timeline build
(the clock reads also constrain the compiler's scheduling there: read the parts as a
breakdown of the timeline build, next to its own span)."""
from __future__ import annotations

from monokernel.link import TALLY_SLOTS
from monokernel.types import u64


class CycleTally:
    """Parts 0 .. n-1 of a wave's clocks; `count(i)` makes part i a counter instead."""

    def __init__(self, k, env, parts: int):
        if not 0 < parts <= TALLY_SLOTS:
            raise ValueError(f"CycleTally: {parts} parts; a job has {TALLY_SLOTS} tallies")
        self.k, self.env, self.on = k, env, env.timing
        if self.on:
            self.sums = [k.uniform_var(k.const(0, u64), u64) for _ in range(parts)]
            self.last = k.uniform_var(k.cycles(), u64)

    def start(self):
        """Start a part here (the clocks since the last mark count nowhere)."""
        if self.on:
            self.last.set(self.k.cycles())

    def mark(self, i: int):
        """Add the clocks since the last mark (or start) to part i."""
        if self.on:
            now = self.k.cycles()
            self.sums[i].set(self.sums[i].get() + (now - self.last.get()))
            self.last.set(now)

    def count(self, i: int, n: int = 1):
        if self.on:
            self.sums[i].set(self.sums[i].get() + self.k.const(n, u64))

    def flush(self):
        """Every part into the job's tallies (call once, at the job's top level)."""
        if self.on:
            for i, s in enumerate(self.sums):
                self.env.tally(i, s.get())
