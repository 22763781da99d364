"""Timing-only probes of the selection's key pass (sel_h1): `tools.time_layers` with parts of
sel_h1's per-key work removed, to see what its time is made of (bench/NOTES.md v12). The
outputs of a probed launch are WRONG by design (time_layers says so in its status column);
only the sel_h1 row of `--timeline` means anything, and only against the unprobed run of the
same call.

    python3 bench/select_probes.py PROBE [time_layers options...]

PROBE: none | no_count (no next-digit counts in sel_h1) | no_store (the list's offsets
computed, its stores dropped) | no_append (neither offsets nor stores: sel_h1 counts only)
| bare (neither counts nor list: the loads and the key mapping) | unroll2 / unroll8 (a real
variant, outputs exact: SCAN_UNROLL score loads a lane an iteration instead of 4)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBES = ("none", "no_count", "no_store", "no_append", "bare", "unroll2", "unroll8")


def apply(probe: str):
    import stages.select as sel
    from stages.select import SelectPass
    if probe not in PROBES:
        raise SystemExit(f"probe {probe!r}: one of {', '.join(PROBES)}")
    if probe.startswith("unroll"):
        sel.SCAN_UNROLL = int(probe[len("unroll"):])
        return
    count, append, scan = SelectPass._count_digits, SelectPass._append, SelectPass._scan_scores

    def no_count(self, k, *a, **kw):
        if self.q != 1:
            return count(self, k, *a, **kw)

    def no_store(self, k, io, *a, **kw):
        cls = type(io)
        orig = cls.store
        cls.store = lambda *_a, **_kw: None
        try:
            return append(self, k, io, *a, **kw)
        finally:
            cls.store = orig

    def no_append(self, k, io, sl, lds, first, append=True, nans=True):
        return scan(self, k, io, sl, lds, first, append=self.q != 1 and append, nans=nans)
    if probe in ("no_count", "bare"):
        SelectPass._count_digits = no_count
    if probe == "no_store":
        SelectPass._append = no_store
    if probe in ("no_append", "bare"):
        SelectPass._scan_scores = no_append


if __name__ == "__main__":
    apply(sys.argv[1])
    from tools import time_layers
    sys.exit(time_layers.main(sys.argv[2:]))
