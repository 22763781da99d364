"""Kind `index` with its selection fused after the scoring (issue 7): the top-k of the scores
the launch itself computed is exact (DESIGN.md section 7), checked against independent code
(tools.check_topk.check_rows: layouts.scores.exact_topk_positions) and by the launch's own
exact check (IndexLaunch.exact_errors, what check_layer reports)."""
from __future__ import annotations

import numpy as np
import pytest

from spec import BuildSpec
from stages.index import _index_inputs, index_launch
from tools.check_topk import check_rows

PAGES = 48  # cache pages: every page of a 2.6K-key request mapped


@pytest.mark.parametrize("rows,pos,mode,chip", [(2, 2300, "relaxed", "gfx950"),
                                                (4, 2600, "random", "gfx950"),
                                                (4, 2600, "relaxed", "sm_90a")])
def test_index_kind_selects_the_exact_topk_of_its_own_scores(rows, pos, mode, chip):
    """More keys than K = 2048, so the selection drops some; rows of one request at
    consecutive positions; outputs poisoned beforehand (-2 slots, all-ones diagnostics).
    sm_90a: the Hopper scoring with its default bf16 head sum on the tensor cores."""
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    L = index_launch(spec, chip=chip, cache_pages=PAGES)
    assert [s.name for s in L.stages][-1] == "sel_out" and L.select_cfg.topk == 2048
    sums = {op.attrs["atom"].name for op in L.kernel("interp", 32 if chip == "sm_90a" else 64)
            .walk() if op.opcode == "wgmma" and op.attrs["atom"].k == 16}
    assert sums == ({"sm90_wgmma_m64n8k16_bf16"} if chip == "sm_90a" else set())
    inp = _index_inputs(L, spec, np.random.default_rng(rows), pos)
    assert (inp["topk"] == -2).all() and (inp["topk_diag"] == 0xFFFFFFFF).all()
    res = L.run_interp(inp, step=0, mode=mode, seed=rows)
    n = inp["positions"].astype(np.int64) + 1
    assert n.max() > L.select_cfg.topk
    scores = res.regions["scores"]
    assert not check_rows(scores, n, inp["block_table"], res.outputs["topk"],
                          res.outputs["topk_diag"])
    assert all(e["ok"] for e in L.exact_errors(inp, res.outputs, res.regions).values())
    assert "topk" not in L.reference(inp)  # exact on its own scores, not float64's
    # the negative control: one slot moved to an unselected key, one diagnostic word off
    bad = {n_: v.copy() for n_, v in res.outputs.items()}
    bad["topk"][0, 7] = bad["topk"][0, 8]
    bad["topk_diag"][1, 1] += 1
    errs = L.exact_errors(inp, bad, res.regions)
    assert not errs["topk"]["ok"] and not errs["topk_diag"]["ok"]
    assert check_rows(scores, n, inp["block_table"], bad["topk"], bad["topk_diag"])


def test_overlaid_stage_lds_gives_the_same_outputs_and_regions():
    """launch.lds_overlay: front, indexer and selection stages share one LDS range (a CTA
    runs one job at a time): the launch's LDS is its largest stage's, and every output and
    arena region is bit-identical to the stacked layout's (the interpreter poisons the
    stages' LDS between jobs either way, so no job can count on another's bytes)."""
    spec = BuildSpec.make("tiny", rows=2, target="interp")
    runs = []
    for overlay in (False, True):
        L = index_launch(spec, chip="sm_90a", cache_pages=PAGES)
        L.lds_overlay = overlay
        inp = _index_inputs(L, spec, np.random.default_rng(11), 900)
        runs.append((L.kernel("interp", 32), L.run_interp(inp, step=0, mode="random", seed=2)))
    (k0, r0), (k1, r1) = runs
    L.lds_overlay = None  # the default: overlaid on sm_90a only
    assert L.overlays_lds("sm_90a") and not L.overlays_lds("interp")
    assert not L.overlays_lds("gfx950") and not L.overlays_lds("gfx942")
    assert k0.waves > 1 and k1.lds_bytes < k0.lds_bytes
    offs = {a.offset for a in k1.lds if a.name.startswith(("front_", "ix_", "sel_h1_"))}
    assert len(offs) < len([a for a in k1.lds if a.name.startswith(("front_", "ix_", "sel_h1_"))])
    for name in r0.outputs:
        assert np.array_equal(r0.outputs[name], r1.outputs[name]), name
    for name, v in r0.regions.items():  # bytes: a NaN (a group maximum's) equals itself
        assert np.asarray(v).tobytes() == np.asarray(r1.regions[name]).tobytes(), name
