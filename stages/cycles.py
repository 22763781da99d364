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
    """Named parts of a wave's clocks, in the job's tallies in the order of `names` (the
    stage's TALLIES); `count(name)` makes a part a counter instead."""

    def __init__(self, k, env, names):
        if not 0 < len(names) <= TALLY_SLOTS:
            raise ValueError(f"CycleTally: {len(names)} parts; a job has {TALLY_SLOTS} tallies")
        self.k, self.env, self.on, self.names = k, env, env.timing, tuple(names)
        if self.on:
            self.sums = [k.uniform_var(k.const(0, u64), u64) for _ in self.names]
            self.last = k.uniform_var(k.cycles(), u64)

    def mark(self, name: str):
        """Add the clocks since the last mark (or the tally's creation) to part `name`."""
        part = self._part(name)
        if self.on:
            now = self.k.cycles()
            self.sums[part].set(self.sums[part].get() + (now - self.last.get()))
            self.last.set(now)

    def count(self, name: str, n: int = 1):
        part = self._part(name)
        if self.on:
            self.sums[part].set(self.sums[part].get() + self.k.const(n, u64))

    def _part(self, name: str) -> int:
        if name not in self.names:
            raise ValueError(f"CycleTally: no part {name!r}; the parts are {', '.join(self.names)}")
        return self.names.index(name)

    def flush(self):
        """Every part into the job's tallies (call once, at the job's top level)."""
        if self.on:
            for i, s in enumerate(self.sums):
                self.env.tally(i, s.get())
