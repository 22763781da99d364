"""IndexPlan.group_max (sm_90a, `--tune launch.group_max=1`): the scoring also writes each
row's aligned 16-key group maxima (`score_gmax`, layouts/scores.py GROUP_KEYS), an
unselectable score counted as +inf, from the head-sum path's lanes and the one-pair chains';
the fix-up's rescored keys leave +inf (their old maximum may be stale), which a selection
reading it must take as "scan".
Checked in the interpreter (the sm_90a paths, chip="sm_90a") against numpy's group maxima
of the launch's own scores, the region poisoned with NaN before the run, so a group left
unwritten shows; the outputs (scores, top-k) unchanged by the option."""
from __future__ import annotations

import numpy as np
import pytest

from layouts.scores import GROUP_KEYS

POISON = np.float32(np.nan)


def _launch(rows, tunes=(), group_max=True):
    from spec import BuildSpec
    from stages import kinds
    from tools import common
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    kind = kinds.kind("index")
    # (the fused index's selection then skips groups too: it needs the spans loop)
    L = common.apply_tunes(kind.launch(spec, chip="sm_90a", group_max=group_max,
                                       lean_spans=True), list(tunes))
    return kind, spec, L


def _run(rows, workload, tunes=(), mode="relaxed", group_max=True, pos=2049):
    from tools import common
    kind, spec, L = _launch(rows, tunes, group_max)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(rows), pos, workload)
    arena = L.new_arena()
    if group_max:  # unwritten maxima read NaN, never equal to anything
        at = L.arena["score_gmax"].data_offset
        n = L.arena["score_gmax"].region.nbytes
        arena[at:at + n] = np.frombuffer(np.full(n // 4, POISON, np.float32).tobytes(), np.uint8)
    r = L.run_interp(inp, arena=arena, step=0, mode=mode, seed=11)
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
    return L, inp, r


def expected_maxima(scores, positions):
    """{(row, group): max} over each row's visible keys (0 .. positions[row]): unselectable
    scores (-inf, NaN) as +inf."""
    out = {}
    for row, pos in enumerate(np.asarray(positions).reshape(-1)):
        s = scores[row, :pos + 1].astype(np.float64)
        s = np.where(np.isfinite(s) | (s == np.inf), s, np.inf)
        pad = -(-len(s) // GROUP_KEYS) * GROUP_KEYS
        g = np.full(pad, -np.inf)
        g[:len(s)] = s
        for grp, m in enumerate(g.reshape(-1, GROUP_KEYS).max(axis=1)):
            out[(row, grp)] = m
    return out


def _check(L, inp, r, exact: bool):
    scores = np.asarray(r.regions["scores"], np.float32).reshape(L.plan.rows, L.plan.capacity)
    gmax = np.asarray(r.regions["score_gmax"], np.float32).reshape(L.plan.rows, -1)
    want = expected_maxima(scores, inp["positions"])
    real = unknown = 0
    for (row, grp), m in want.items():
        got = float(gmax[row, grp])
        if got == m:
            real += 1
        else:
            assert not exact and got == np.inf, (row, grp, got, m)
            unknown += 1
    return real, unknown


@pytest.mark.parametrize("mode", ["relaxed", "random"])
def test_one_request_of_eight_rows_writes_every_groups_maximum(mode):
    """W1 at rows 8: one group of four pairs, every step on the mma head-sum path: each
    visible group's maximum exactly (groups across page and segment ends included)."""
    L, inp, r = _run(8, "W1", mode=mode)
    real, unknown = _check(L, inp, r, exact=True)
    assert real > 0 and unknown == 0


def test_one_pair_chains_and_shared_pages_write_every_groups_maximum():
    """W2 at rows 8 (one-pair requests on the FMA epilogue, the pages they share scored once
    on the head-sum path) and W1 at rows 2 (one pair: the FMA epilogue alone): every visible
    group's maximum exactly, from either lane layout."""
    for rows, workload in ((8, "W2"), (2, "W1")):
        L, inp, r = _run(rows, workload)
        real, unknown = _check(L, inp, r, exact=True)
        assert real > 0 and unknown == 0


def test_the_fix_ups_rescored_keys_leave_their_groups_unknown():
    """With the fix-up (cached_new_keys=0) a rescored new key's group reads +inf: its old
    maximum may be stale."""
    L, inp, r = _run(8, "W1", tunes=[("ix_score", "cached_new_keys", "0")])
    _check(L, inp, r, exact=False)
    gmax = np.asarray(r.regions["score_gmax"], np.float32).reshape(L.plan.rows, -1)
    for row, pos in enumerate(np.asarray(inp["positions"]).reshape(-1)):
        assert gmax[row, pos // GROUP_KEYS] == np.inf


def test_the_option_changes_no_output_and_is_refused_off_sm90a():
    from spec import BuildSpec
    from stages import kinds
    outs = []
    for on in (True, False):
        L, inp, r = _run(8, "W1", group_max=on)
        outs.append((np.asarray(r.regions["scores"]), r.outputs[L.select_cfg.names.out]))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    with pytest.raises(ValueError, match="group_max .* chip 'gfx950'"):
        kinds.kind("index").launch(BuildSpec.make("tiny", rows=8, target="interp"),
                                   group_max=True)


def _select_run(rows, workload, pos, mode, **kw):
    from tools import common
    from spec import BuildSpec
    from stages import kinds
    kind = kinds.kind("index")
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    L = kind.launch(spec, chip="sm_90a", lean_spans=True, **kw)
    inp, _ = common.workload_inputs(kind, L, spec, np.random.default_rng(rows + pos), pos,
                                    workload)
    r = L.run_interp(inp, step=0, mode=mode, seed=13)
    assert all(e["ok"] for e in L.exact_errors(inp, r.outputs, r.regions).values())
    c = L.select_cfg
    return L, {n: np.asarray(r.regions[n]) for n in (c.list_keys, c.list_pos)}, \
        np.asarray(r.outputs[c.names.out]), np.asarray(r.outputs[c.names.diag])


@pytest.mark.parametrize("rows,workload,pos,mode", [
    (8, "W1", 2049, "relaxed"), (8, "W1", 2049, "random"), (8, "W2", 2049, "relaxed"),
    (4, "W1", 1500, "inorder"), (8, "W1", 700, "relaxed")])
def test_sel_h1_skipping_groups_lists_what_the_spans_loop_lists(rows, workload, pos, mode):
    """SelectConfig.group_skip (launch.group_max with lean_spans): sel_h1 lists only the
    16-key groups whose maximum reaches its threshold, a flagged group a lane: the lists
    (keys and positions), the top-k and its diagnostics bit for bit the lean spans loop's,
    at W1 (real maxima), W2 (some +inf), a context under K (every key selected)."""
    _, lists, out, diag = _select_run(rows, workload, pos, mode, group_max=True)
    _, lists0, out0, diag0 = _select_run(rows, workload, pos, mode)
    for name in lists0:  # (fresh arenas: words neither run wrote are zero in both)
        np.testing.assert_array_equal(lists[name], lists0[name])
    np.testing.assert_array_equal(out, out0)
    np.testing.assert_array_equal(diag, diag0)


def test_group_skip_needs_the_spans_loop_and_the_scorings_maxima():
    from spec import BuildSpec
    from stages import kinds
    with pytest.raises(ValueError, match="group_skip: .* lean_spans"):
        kinds.kind("index").launch(BuildSpec.make("tiny", rows=8, target="interp"),
                                   chip="sm_90a", group_max=True)
