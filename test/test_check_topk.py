"""tools/check_topk.py: the CLI checks the selection on injected distributions and writes
digests that tools.check_layer --compare reads; its checker catches each kind of wrong
selection; the distributions are what they say."""
from __future__ import annotations

import json

import numpy as np
import pytest

from layouts.scores import exact_topk_positions
from tools import check_layer, check_topk
from tools.check_topk import DISTS, check_rows, scores_for


def _cli(tmp, *extra):
    return check_topk.main(["--config", "tiny", "--pos", "65,2049", "--rows", "2",
                            "--dist", "normal,allequal,nan", "--dump", str(tmp), *extra])


def test_cli_checks_and_dumps_digests_comparable_with_check_layer(tmp_path, capsys):
    a, b, c = tmp_path / "local", tmp_path / "scoring", tmp_path / "seed1"
    assert _cli(a) == 0
    out = capsys.readouterr().out
    assert "6 of 6 cases exact" in out
    d = json.loads((a / "tiny" / "r2" / "select.json").read_text())
    assert d["format"] == check_layer.FORMAT and d["kind"] == "select"
    assert [(r["pos"], r["dist"]) for r in d["launches"]] == \
        [(p, x) for p in (65, 2049) for x in ("normal", "allequal", "nan")]
    assert all(r["exact"] and set(r["digests"]) == {"output/topk", "output/topk_diag"}
               for r in d["launches"])
    # first digits from the scoring's pairs: the same digests, compared by check_layer
    assert _cli(b, "--first-digits", "stage") == 0
    capsys.readouterr()
    assert check_layer.compare(a, b) == 0
    assert "all 12 digests equal" in capsys.readouterr().out
    # other inputs: the digests differ
    assert _cli(c, "--seed", "1") == 0
    capsys.readouterr()
    assert check_layer.compare(a, c) == 1


def test_cli_takes_the_tail_by_key_count_and_gives_the_rounds_digests(tmp_path, capsys):
    """--tune launch.tail_min_keys=N (the tail finish for rows of at least N keys) reaches the
    selection launch: rows of 65 keys keep the rounds, rows of 2049 take the tail; the same
    digests as the rounds' (the tail finish is exact), and the setting is no error (v50's
    device step died on it)."""
    a, b = tmp_path / "rounds", tmp_path / "keyed"
    assert _cli(a) == 0
    capsys.readouterr()
    assert _cli(b, "--tune", "launch.tail_min_keys=1024") == 0
    assert "6 of 6 cases exact" in capsys.readouterr().out
    assert check_layer.compare(a, b) == 0


def test_through_index_checks_the_fused_launchs_own_scores_end_to_end(tmp_path, capsys):
    """--through index: kind index (front + indexer + selection) on its own inputs, rows with
    fewer and with more keys than K = 2048, W1 and W2; every row exact, digests repeatable,
    another seed gives other digests; a wrong workload is refused."""
    def cli(d, *extra):
        return check_topk.main(["--through", "index", "--rows", "2", "--pos", "64,2049",
                                "--workload", "W1,W2", "--dump", str(d), *extra])
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert cli(a) == 0
    out = capsys.readouterr().out
    assert "4 of 4 cases exact" in out
    d = json.loads((a / "tiny" / "r2" / "index.json").read_text())
    assert d["kind"] == "index" and all(r["exact"] for r in d["launches"])
    assert [(r["pos"], r["workload"]) for r in d["launches"]] == \
        [(p, w) for p in (64, 2049) for w in ("W1", "W2")]
    assert cli(b) == 0
    capsys.readouterr()
    assert check_layer.compare(a, b) == 0
    assert cli(c, "--seed", "1") == 0
    capsys.readouterr()
    assert check_layer.compare(a, c) == 1
    with pytest.raises(SystemExit):
        cli(tmp_path / "d", "--workload", "W3")
    assert "W3" in capsys.readouterr().err


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        check_topk.main(["--dist", "normal,bogus"])
    assert "unknown distribution" in capsys.readouterr().err
    assert check_topk.main(["--pos", "40000", "--rows", "2", "--dist", "normal",
                            "--dump", str(tmp_path)]) == 2
    assert "past the capacity 32768" in capsys.readouterr().err


def _selection(scores, n, bt):
    from stages.select import reference_select
    return reference_select(scores, n, bt)


def test_checker_catches_each_kind_of_wrong_selection():
    rng = np.random.default_rng(0)
    n = np.array([3000, 100])
    s = scores_for("nan", rng, n, 4096)
    bt = np.tile(rng.permutation(200)[:64].astype(np.int32), (2, 1))
    out, diag = _selection(s, n, bt)
    assert check_rows(s, n, bt, out, diag) == []
    bad = out.copy()
    bad[0, [5, 6]] = bad[0, [6, 5]]  # order
    assert "ascending False" in check_rows(s, n, bt, bad, diag)[0]
    bad = out.copy()
    bad[0, 7] = bt[0, 63] * 64 + 63  # a key that is not in the top-k
    assert "1 missing" in check_rows(s, n, bt, bad, diag)[0]
    bad = out.copy()
    bad[1, 95] = -2  # padding of a row with fewer selectable keys than K
    assert check_rows(s, n, bt, bad, diag)
    d2 = diag.copy()
    d2[0, 0] += 1  # NaN count
    assert "diagnostic" in check_rows(s, n, bt, out, d2)[0]
    d2 = diag.copy()
    d2[1, 1] -= 1  # selected count
    assert "diagnostic" in check_rows(s, n, bt, out, d2)[0]


@pytest.mark.parametrize("m", [2047, 2048, 2049])
def test_above_distributions_put_exactly_m_keys_above_a_tie(m):
    s = DISTS[f"above{m}"](np.random.default_rng(1), 9000, 2048)
    assert int((s > 1.0).sum()) == m and np.unique(s[s > 1.0]).size == m
    assert int((s == 1.0).sum()) > 4000
    sel = exact_topk_positions(s)
    ties = sel[s[sel] == 1.0]
    assert ties.size == max(0, 2048 - m)
    if ties.size:  # the tie goes to the lowest position
        assert ties[0] == np.flatnonzero(s == 1.0)[0]


def test_distributions_have_their_features():
    rng = np.random.default_rng(2)
    n = 5000
    assert np.unique(DISTS["few"](rng, n, 2048)).size == 5
    assert np.unique(DISTS["allequal"](rng, n, 2048)).size == 1
    assert np.isneginf(DISTS["neginf"](rng, n, 2048)).mean() >= 0.75
    assert np.isfinite(DISTS["fewsel"](rng, n, 2048)).sum() == 100
    x = DISTS["nan"](rng, n, 2048)
    assert np.isnan(x).mean() > 0.2 and (np.signbit(x) & np.isnan(x)).any()
    z = DISTS["zeros"](rng, n, 2048)
    assert (np.signbit(z) & (z == 0)).any() and ((z != 0) & (np.abs(z) < 1e-44)).any()
    e = DISTS["extreme"](rng, n, 2048)
    assert np.isposinf(e).any() and np.isneginf(e).any() and np.isnan(e).any()
    s = scores_for("normal", rng, [0, 3], 128)
    assert np.isposinf(s[0]).all() and np.isposinf(s[1, 3:]).all()  # never to be read
