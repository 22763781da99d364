"""The rounds' publish with the cum histogram summed by every wave (SelectConfig.cta_publish):
each wave turns its bins' share of LDS hist into suffix sums in place
(`lanes._cta_suffix_sums`), and wave 0 copies them into the message as vectors, releases and
announces. Checked here: the exact top-k (independent
numpy order) and the same slots, diagnostics and messages as wave 0's walk, bit for bit, on
every check_topk distribution in relaxed memory mode (a missing release shows), with the
deferred lists, the bucketed tail finish and first digits given; one wave keeps the walk;
the publish without its release fails."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from layouts.scores import ScoresLayout
from stages.select import (SelectConfig, make_inputs, random_block_table, request_positions,
                           select_launch)
from tools.check_topk import DISTS, check_rows, scores_for

# K = 128 of 12K keys a row, 4 slices a row over 3 CTAs (test_select_tail's CFG)
CFG = SelectConfig(ScoresLayout(2, 16384, 512), max_slices=4, topk=128, defer_fat_bins=True,
                   digits=(6, 9, 9, 8))


def _case(dist, seed=41):
    rng = np.random.default_rng([seed, sorted(DISTS).index(dist)])
    n = request_positions(12000, CFG.rows)
    s = scores_for(dist, rng, n, CFG.capacity, CFG.topk)
    return s, n, random_block_table(CFG, rng)


def _run(cfg, s, n, bt, waves=3, hist=None, **fences):
    L = select_launch(cfg, grid=3, waves=waves, hist=hist, **fences)
    return L.run_interp(make_inputs(cfg, s, n, bt, hist=hist), step=0, mode="relaxed",
                        seed=5)


def _same(a, b):
    """The same outputs and the same messages, word for word."""
    for name in ("topk", "topk_diag"):
        assert np.array_equal(a.outputs[name], b.outputs[name]), name
    msgs = [n for n in a.regions if n.startswith(f"{CFG.prefix}_msg")]
    assert msgs
    for name in msgs:
        assert np.array_equal(a.regions[name], b.regions[name]), name


@pytest.mark.parametrize("dist", sorted(DISTS))
def test_every_wave_publishing_selects_what_wave_0_selects(dist):
    s, n, bt = _case(dist)
    walk = _run(CFG, s, n, bt)
    shared = _run(dataclasses.replace(CFG, cta_publish=True), s, n, bt)
    assert not check_rows(s, n, bt, shared.outputs["topk"], shared.outputs["topk_diag"],
                          CFG.topk)
    _same(shared, walk)


@pytest.mark.parametrize("variant", [dict(tail_finish=True), dict(defer_fat_bins=False),
                                     dict(digits=(6, 7, 7, 6, 6))],
                         ids=["tail_finish", "no_defer", "five_digits"])
@pytest.mark.parametrize("hist", [None, "buffer"])
def test_every_wave_publishing_with_the_other_options(variant, hist):
    s, n, bt = _case("normal", seed=43)
    cfg = dataclasses.replace(CFG, **variant)
    walk = _run(cfg, s, n, bt, hist=hist)
    shared = _run(dataclasses.replace(cfg, cta_publish=True), s, n, bt, hist=hist)
    assert not check_rows(s, n, bt, shared.outputs["topk"], shared.outputs["topk_diag"],
                          CFG.topk)
    _same(shared, walk)


def test_one_wave_keeps_the_walk():
    """A CTA of one wave has nobody to share the sums with: the same program as without."""
    def opcodes(cfg, waves):
        return [op.opcode for op in select_launch(cfg, grid=3, waves=waves).kernel().walk()]
    cfg = dataclasses.replace(CFG, cta_publish=True)
    assert opcodes(cfg, 1) == opcodes(CFG, 1)
    assert opcodes(cfg, 3) != opcodes(CFG, 3)


def test_the_publish_without_its_release_fails():
    """The negative control: the messages' sums are plain stores, visible to the row's other
    slices only through the releases before the pairs (a store may still become visible at
    a random point before its reader looks: not every seed shows it)."""
    s, n, bt = _case("normal", seed=45)
    cfg = dataclasses.replace(CFG, cta_publish=True)
    bad = 0
    for seed in range(3):
        L = select_launch(cfg, grid=3, waves=3, release=False)
        r = L.run_interp(make_inputs(cfg, s, n, bt), step=0, mode="relaxed", seed=seed)
        bad += bool(check_rows(s, n, bt, r.outputs["topk"], r.outputs["topk_diag"],
                               CFG.topk))
    assert bad >= 1
