"""Where the selection reads its scores and first-digit histograms from (an input buffer,
an arena region, tagged pairs or plain data) and how a fused launch says they are ready."""
from __future__ import annotations

from layouts.scores import (FIRST_DIGIT_BINS, GROUP_KEYS, GROUP_MAX_REGION, REFINED_BINS,
                            group_max_word)
from monokernel.types import f32, u32

from ..base import Buffer, Use
from .config import SelectConfig


# ----------------------------------------------------------------------------- sources

class BufferScores:
    """Scores from an input buffer [rows, capacity] f32 (the `select` launch kind)."""
    in_region = False

    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.scores

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(f32, (c.rows, c.capacity))}

    def reads(self, r: int) -> list:
        return []

    def prepare(self, k, io):
        pass

    def load4(self, k, io, r, p, mask):
        return k.load(getattr(io.args, self.name), r * self.cfg.capacity + p, u32, 4, mask=mask)

    def prefetch_line(self, k, io, r, p, nbytes, mask):
        """A hint: the L2 line of scores p .. (nbytes from there) of row r."""
        k.prefetch_l2(getattr(io.args, self.name), (r * self.cfg.capacity + p) * 4, nbytes,
                      mask=mask, line=True)


class RegionScores:
    """Scores from an arena region [rows, capacity] f32 written by an earlier stage of the
    launch: a BulkBuffer (each job acquires its counter before reading) or, with
    `bulk=False`, a PlainBuffer whose writer releases before publishing the `score_hist`
    pairs that sel_h0 waits on (sel_h0 then takes an acquire fence; later stages are
    ordered after sel_h0 through the messages)."""
    in_region = True

    def __init__(self, cfg: SelectConfig, bulk: bool = True):
        self.cfg, self.name, self.bulk = cfg, cfg.names.scores, bulk

    def buffers(self):
        return {}

    def reads(self, r: int) -> list:
        c = self.cfg
        return [Use(self.name, r * c.capacity, (r + 1) * c.capacity)]

    def prepare(self, k, io):
        if self.bulk:
            io.acquire(self.name)

    def load4(self, k, io, r, p, mask):
        v = io.load(self.name, r * self.cfg.capacity + p, 4, mask=mask)
        return k.bitcast(v, u32)

    def prefetch_line(self, k, io, r, p, nbytes, mask):
        io.prefetch_line(self.name, r * self.cfg.capacity + p, nbytes, mask=mask)


class GroupMaxPlain:
    """The scoring's 16-key group maxima (`score_gmax` [rows, capacity / GROUP_KEYS] f32,
    IndexPlan.group_max), plain words its jobs store before the release the selection's
    first wait orders them behind (as `scores`). A NaN or -inf score does not show in its
    group's maximum (the scoring keeps no per-score select for it): sel_h1 learns that a
    row holds one from its refined first digits' bin 0 and then scans every group."""
    name = GROUP_MAX_REGION
    marks_unselectable = False

    def __init__(self, cfg: SelectConfig):
        self.cfg = cfg

    def buffers(self):
        return {}

    def reads(self, r: int) -> list:
        c = self.cfg
        return [Use(self.name, group_max_word(c.capacity, r, 0),
                    group_max_word(c.capacity, r + 1, 0))]

    def load4(self, k, io, r, g, mask):
        """Maxima g .. g + 3 of row r (g a multiple of 4: 16 aligned bytes)."""
        return io.load(self.name, group_max_word(self.cfg.capacity, r, g * GROUP_KEYS), 4,
                       mask=mask)


class GroupMaxBuffer:
    """Group maxima given as an input (`score_gmax` [rows, capacity / GROUP_KEYS] f32, the
    select_hist kind with group_max: what a scoring would publish beside its first digits),
    +inf in every group that holds a NaN or -inf score (`reference.group_maxima`), so the
    groups to scan show in the maxima alone (no row flag, no refined digits needed)."""
    name = GROUP_MAX_REGION
    marks_unselectable = True

    def __init__(self, cfg: SelectConfig):
        self.cfg = cfg

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(f32, (c.rows, c.capacity // GROUP_KEYS))}

    def reads(self, r: int) -> list:
        return []

    def load4(self, k, io, r, g, mask):
        """Maxima g .. g + 3 of row r (g a multiple of 4: 16 aligned bytes)."""
        return k.load(getattr(io.args, self.name),
                      group_max_word(self.cfg.capacity, r, g * GROUP_KEYS), u32, 4, mask=mask)


class HistBuffer:
    """First digits from an input buffer [rows, segments, 64] u32."""
    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.score_hist

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(u32, (c.rows, c.segments, FIRST_DIGIT_BINS))}

    def reads(self, r):
        return []

    def read(self, k, io, index, mask):
        return k.load(getattr(io.args, self.name), index, u32, mask=mask)

    def read4(self, k, io, index, mask):
        return k.load(getattr(io.args, self.name), index, u32, 4, mask=mask)


class HistRegion:
    """First digits from the scoring's tagged pairs [rows, segments, 64] u32 (region owned by
    the scoring stage, or by `ScoreHistStage` in a standalone launch)."""
    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.score_hist

    def buffers(self):
        return {}

    def reads(self, r):
        w = self.cfg.segments * FIRST_DIGIT_BINS
        return [Use(self.name, r * w, (r + 1) * w)]

    def read(self, k, io, index, mask):
        return io.wait(self.name, index, mask=mask)


class HistPlain(HistRegion):
    """First digits from the scoring's plain region [rows, segments, 64] u32 (the index
    launch's `score_hist`), read after the scoring's `score_done` pairs (a `Ready`): the same
    region and uses as `HistRegion`, read with plain loads instead of tag polls."""

    def read(self, k, io, index, mask):
        return io.load(self.name, index, mask=mask)

    def read4(self, k, io, index, mask):
        return io.load(self.name, index, 4, mask=mask)


class FineBuffer:
    """Refined first digits (SelectConfig.fine_digits) from an input buffer [fine_parts,
    rows, 1024] u32 (the select_hist kind: the host's stages.select.reference.
    fine_histograms)."""
    def __init__(self, cfg: SelectConfig):
        self.cfg, self.name = cfg, cfg.names.score_fine

    def buffers(self):
        c = self.cfg
        return {self.name: Buffer(u32, (c.fine_parts, c.rows, REFINED_BINS))}

    def reads(self, r):
        return []

    def read4(self, k, io, index, mask):
        return k.load(getattr(io.args, self.name), index, u32, 4, mask=mask)


class FinePlain(FineBuffer):
    """Refined first digits from the scoring's plain region [jobs, rows, 1024] u32 (the
    index launch's `score_fine`), written before the scoring's `score_done` pairs that
    sel_h0 (or a folding sel_h1) acquires."""
    def buffers(self):
        return {}

    def reads(self, r):
        c = self.cfg
        rows = [Use(c.names.score_rows, 0, c.fine_parts * c.rows * FIRST_DIGIT_BINS)] \
            if c.row_parts else []
        return [Use(self.name, 0, c.fine_parts * c.rows * REFINED_BINS), *rows]

    def read4(self, k, io, index, mask):
        return io.load(self.name, index, 4, mask=mask)

    def read_rows4(self, k, io, index, mask):
        """16 bytes of `score_rows` [fine_parts, rows, 64] (SelectConfig.row_parts): a job's
        first-digit counts of a row, written with its `score_fine` part."""
        return io.load(self.cfg.names.score_rows, index, 4, mask=mask)


class Ready:
    """What sel_h0 waits for before reading scores (and first digits) that an earlier stage
    of the launch writes as plain data: `wait(k, io)` emits the polls and the acquire fence
    (wave 0, then a CTA barrier), `reads(r)` declares them (e.g. the index launch's
    stages.index.wait_scored / scored_reads). Later stages are ordered after sel_h0 through
    the messages (release -> acquire chains)."""

    def __init__(self, reads, wait):
        self.reads, self.wait = reads, wait


def score_done_ready(cfg: SelectConfig, jobs: int) -> Ready:
    """The scoring protocol of stages/index.py: every scoring job publishes its pair of
    `score_done` [jobs] after a release fence; a consumer polls them all, then acquires."""
    name = cfg.names.score_done

    def wait(k, io):
        for j0 in range(0, jobs, k.L):
            j = j0 + k.lane_id()
            io.wait(name, k.min(j, jobs - 1), mask=j < jobs)
        k.fence("acquire", "device")
    return Ready(lambda r: [Use(name, 0, jobs)], wait)

