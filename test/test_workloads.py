"""Workloads W1/W2 of the kinds with a key cache (DESIGN.md section 8), the indexer's torch peer
and the floor's parts (issue 6):

  * W2's layout: R/2 requests of 2 rows whose block tables map the same physical pages for
    every page they only read, each request's written page its own (distinct new-key slots),
    accepted by the launch's input check, and exact through the interpreter against the
    float64 reference (rows 4 = 2 requests on shared pages, also across a page boundary);
  * the cache holds keys exactly at the slots some row reads and no row writes;
  * the peer's math (tools.peers.index_scores, float path) equals stages.index_ref's float64
    scores on the tiny config, masks keys past each row, and its FP8 path (CUDA only) equals
    its float path;
  * the floor counts W2's shared keys once; the scoring span comes from the records;
  * score_errors fails a corrupted score; --workload parses, and a bad name is a clear error.
"""
import numpy as np
import pytest

from spec import BuildSpec
from stages import kinds
from stages.index import PAGE, PAGE_BYTES, check_inputs, groups_of
from stages.index_ref import kernel_operands, reference, request_layout
from tools import check_layer, common, peers, time_layers

ROWS = 4
POS = 200  # 3 whole pages below the written one: W2's shared pages


def _launch(kind="index_scoring", rows=ROWS):
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    k = kinds.kind(kind)
    return k, spec, k.launch(spec)


def _w2(pos=POS, kind="index_scoring", rows=ROWS, seed=0):
    k, spec, L = _launch(kind, rows)
    inp, used = common.workload_inputs(k, L, spec, np.random.default_rng(seed), pos, "W2")
    assert used
    return L, inp


# ------------------------------------------------------------------------------- W2 layout

@pytest.mark.parametrize("pos", [POS, 4 * PAGE])  # the 2 rows on one page / across pages
def test_w2_requests_share_the_pages_they_read_and_own_the_ones_they_write(pos):
    L, inp = _w2(pos)
    p = L.plan
    bt, ps = inp["block_table"], inp["positions"]
    assert ps.tolist() == [pos - 1, pos] * (ROWS // 2)
    assert groups_of(ps, bt) == [(0, 2), (2, 2)]  # two requests, scored as two groups
    first = (pos - 1) // PAGE
    assert (bt[0, :first] == bt[2, :first]).all() and first > 0  # the same physical pages
    own = [set(bt[r, first:pos // PAGE + 1].tolist()) for r in (0, 2)]
    assert not own[0] & own[1] and not own[0] & set(bt[0, :first].tolist())
    slots = {int(bt[r, ps[r] // PAGE]) * PAGE + int(ps[r]) % PAGE for r in range(ROWS)}
    assert len(slots) == ROWS  # no two rows write one slot
    check_inputs(p, ps, bt)  # the launch accepts it


def test_shared_layout_with_different_starts_keeps_each_written_page_private():
    _, _, L = _launch(rows=4)
    p = L.plan
    pos, bt = request_layout(p, np.random.default_rng(3), [(1, 70), (3, 300)], shared=True)
    assert pos.tolist() == [70, 300, 301, 302]
    assert bt[0, 0] == bt[1, 0]  # page 0: both only read it, one physical page
    # logical page 1: request 0 writes it (its own page), request 1 only reads it (a common
    # page): they must differ, or request 1 would read a slot request 0 writes
    assert bt[0, 1] != bt[1, 1] and bt[0, 1] not in bt[1, :5]
    check_inputs(p, pos, bt)


def test_w2_is_exact_through_the_interpreter_against_the_float64_reference():
    L, inp = _w2()
    res = L.run_interp(inp, step=0)
    ref = L.reference(inp)
    errs = common.reference_errors(L, inp, res.outputs, res.regions, ref=ref)
    assert {"scores vs float64", "scores vs own operands"} <= set(errs)
    assert all(e["ok"] for e in errs.values()), errs
    # both requests see the shared keys: their scores differ only by their own queries
    sc = res.regions["scores"]
    assert np.isfinite(sc[:, :POS + 1]).all()


def test_w2_front_kind_keeps_the_fronts_inputs_consistent():
    L, inp = _w2(kind="index", rows=2)
    L.check_inputs(inp)
    assert inp["positions"].tolist() == [POS - 1, POS]


def test_cache_holds_keys_exactly_where_rows_read_and_nobody_writes():
    L, inp = _w2()
    cache = inp["index_cache"].reshape(-1, PAGE_BYTES)
    scl = cache[:, PAGE * 128:].copy().view(np.float32)  # [pages, 64] scales
    pos, bt = inp["positions"], inp["block_table"]
    read = set()
    for r, x in enumerate(pos):
        read |= {(int(bt[r, q // PAGE]), q % PAGE) for q in range(x + 1)}
    written = {(int(bt[r, x // PAGE]), int(x) % PAGE) for r, x in enumerate(pos)}
    for pg in range(scl.shape[0]):
        for o in range(PAGE):
            want = (pg, o) in read - written
            assert np.isfinite(scl[pg, o]) == want, (pg, o)


def test_unknown_workload_and_odd_rows_are_clear_errors():
    k, spec, L = _launch()
    with pytest.raises(ValueError, match="unknown workload 'W9'"):
        common.workload_inputs(k, L, spec, np.random.default_rng(0), POS, "W9")
    with pytest.raises(ValueError, match="W2 takes requests of 2 rows"):
        common.w2_requests(3, POS)
    with pytest.raises(ValueError, match="W2 takes requests of 2 rows"):
        common.w2_requests(4, 0)


# ---------------------------------------------------------------------------------- the peer

def _peer_case(workload="W1"):
    k, spec, L = _launch()
    inp, _ = common.workload_inputs(k, L, spec, np.random.default_rng(5), POS, workload)
    ref = reference(L.plan, inp)
    return L, inp, ref


@pytest.mark.parametrize("workload", ["W1", "W2"])
def test_peer_float_path_equals_the_float64_reference(workload):
    L, inp, ref = _peer_case(workload)
    p = L.plan
    pos, bt = inp["positions"].astype(np.int64), inp["block_table"]
    for r in range(p.rows):  # each row against its own table's keys (the launch's new keys in)
        keys, scale = peers.gather_keys(ref["cache"], bt[r], int(pos[r]) + 1)
        got = peers.index_scores(ref["q8"][r:r + 1], ref["w"][r:r + 1], keys, scale,
                                 pos[r:r + 1], fmt=p.fp8.name, fp8_mm=False).numpy()[0]
        want = ref["scores"][r, :pos[r] + 1]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()


def test_peer_masks_keys_past_each_row_and_a_wrong_weight_shows():
    L, inp, ref = _peer_case()
    p = L.plan
    pos, bt = inp["positions"].astype(np.int64), inp["block_table"]
    n = int(pos.max()) + 1
    keys, scale = peers.gather_keys(ref["cache"], bt[-1], n)
    got = peers.index_scores(ref["q8"], ref["w"], keys, scale, pos, fmt=p.fp8.name,
                             fp8_mm=False).numpy()
    for r, x in enumerate(pos):
        assert np.isneginf(got[r, x + 1:]).all() and np.isfinite(got[r, :x + 1]).all()
        assert np.allclose(got[r, :x + 1], ref["scores"][r, :x + 1], rtol=1e-12, atol=0)
    w = ref["w"].copy()
    w[0, 1] *= 1.5
    bad = peers.index_scores(ref["q8"], w, keys, scale, pos, fmt=p.fp8.name, fp8_mm=False)
    assert not np.allclose(bad.numpy()[0, :pos[0] + 1], ref["scores"][0, :pos[0] + 1])


def test_peer_float32_path_is_within_f32_sums():
    import torch
    L, inp, ref = _peer_case()
    pos, bt = inp["positions"].astype(np.int64), inp["block_table"]
    keys, scale = peers.gather_keys(ref["cache"], bt[-1], int(pos.max()) + 1)
    a = peers.index_scores(ref["q8"], ref["w"].astype(np.float32), keys, scale, pos,
                           fp8_mm=False, dtype=torch.float32).double().numpy()
    fin = np.isfinite(ref["scores"][:, :a.shape[1]])
    rel = np.abs(a[fin] - ref["scores"][:, :a.shape[1]][fin]).max() / np.abs(a[fin]).max()
    assert rel < 1e-5


@pytest.mark.gpu
def test_peer_fp8_path_equals_its_float_path_on_cuda():
    import torch
    L, inp, ref = _peer_case()
    pos, bt = inp["positions"].astype(np.int64), inp["block_table"]
    keys, scale = peers.gather_keys(peers.as_tensor(ref["cache"], "cuda"), bt[-1],
                                    int(pos.max()) + 1)
    w = ref["w"].astype(np.float32)
    args = (peers.as_tensor(ref["q8"], "cuda"), peers.as_tensor(w, "cuda"), keys, scale,
            peers.as_tensor(pos, "cuda"))
    f8 = peers.index_scores(*args, fp8_mm=True).cpu().double().numpy()
    f64 = peers.index_scores(*args, fp8_mm=False, dtype=torch.float64).cpu().numpy()
    fin = np.isfinite(f64)
    assert (np.isneginf(f8) == ~fin).all()
    # _scaled_mm sums on Hopper's FP8 tensor cores (~14-bit accumulation: tools.common)
    tol = common.HOPPER_FP8_ACC_TOL
    assert np.abs(f8[fin] - f64[fin]).max() <= tol * np.abs(f64[fin]).max()


# --------------------------------------------------------------------- floor, span, checks

def test_floor_counts_w2_shared_keys_once():
    _, inp1, _ = _peer_case("W1")
    L, inp2 = _w2()
    p = L.plan
    w1, w2 = time_layers.index_work(L, inp1), time_layers.index_work(L, inp2)
    assert w1["keys"] == POS + 1  # one request: its visible keys
    shared = ((POS - 1) // PAGE) * PAGE
    assert w2["keys"] == shared + 2 * (POS + 1 - shared)  # shared pages once, own pages each
    assert w2["flops"] == 2 * p.heads * 128 * 2 * (POS + POS + 1)
    ceil = dict(copy_TBps=4.0, fp8_mm_TFLOPs=1000.0)
    fl = time_layers.floor_parts(L, inp2, ceil)
    assert fl["floor_us"] == pytest.approx(max(fl["key_us"], fl["flop_us"]) + fl["rest_us"])
    assert fl["key_us"] == pytest.approx(w2["key_bytes"] / 4e12 * 1e6)
    assert fl["rest_us"] > 0  # the launch's weights


def test_score_span_and_tail_from_the_records():
    from monokernel.link import TimelineRecord as T
    _, _, L = _launch()
    assert set(time_layers.producers(L, "ix_score")) >= {"ix_key"}
    prod = time_layers.producers(L, "ix_score")[0]
    recs = [T(0, 0, prod, 0, 100, 300), T(1, 0, "ix_score", 0, 150, 900),
            T(2, 0, "ix_score", 1, 200, 700)]
    span, tail = time_layers.score_span(L, recs, 1e-3)
    assert span == pytest.approx(0.75) and tail == pytest.approx(0.6)


def test_score_errors_fail_a_corrupted_score():
    L, inp = _w2()
    res = L.run_interp(inp, step=0)
    regions = dict(res.regions)
    sc = np.array(regions["scores"], copy=True)
    sc[3, POS // 2] *= 1.01
    regions["scores"] = sc
    errs = common.score_errors(L, inp, res.outputs, regions, None)
    assert not errs["scores vs own operands"]["ok"]
    q8, *_ = kernel_operands(L.plan, regions)
    assert q8.shape == (ROWS, L.plan.heads, 128)


def _bf16_head_sum_case(seed, mean_weight, heads=32, keys=4096):
    """One row: FP8 queries of alike heads, FP8 keys, head weights around `mean_weight` (of
    both signs: their terms partly cancel), positive key scales."""
    import torch
    rng = np.random.default_rng(seed)
    f8 = torch.float8_e4m3fn
    base = rng.normal(size=(1, 128))
    q = torch.from_numpy(base + 0.3 * rng.normal(size=(heads, 128))).to(f8)
    k = torch.from_numpy(base + rng.normal(size=(keys, 128))).to(f8)
    w = rng.normal(mean_weight, 1.0, size=heads)
    scale = np.abs(rng.normal(size=keys)) + 0.5
    return q.view(torch.uint8).numpy(), k.view(torch.uint8).numpy(), w, scale


def _kernel_like_bf16_sum(q8, k8, w, scale, rel_acc, seed):
    """What the bf16 head sum computes: each head's logit with an accumulator error of up to
    `rel_acc` of its sum of |products| (the tensor cores' ~14-bit sums), relu, rounded to
    bf16, times bf16 w, summed in float64, times the key scale."""
    import torch
    f8 = torch.float8_e4m3fn
    q = torch.from_numpy(q8).view(f8).to(torch.float64)
    k = torch.from_numpy(k8).view(f8).to(torch.float64)
    exact = q @ k.t()
    size = q.abs() @ k.abs().t()
    noise = torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, size=tuple(exact.shape)))
    a = (exact + rel_acc * size * noise).relu().to(torch.float32).to(torch.bfloat16)
    wb = torch.from_numpy(w).to(torch.bfloat16).to(torch.float64)
    return ((wb @ a.to(torch.float64)) * torch.from_numpy(scale)).numpy()


@pytest.mark.parametrize("mean_weight", [0.5, 0.2, 0.0])
def test_the_bf16_head_sum_tolerance_against_rounding_flips(mean_weight):
    """common.BF16_HEAD_SUM_TOL: scores computed as the bf16 head sum does, with accumulators
    up to 2**-14 of their |products| off (each flip of a head's bf16 rounding one ulp, up to
    2**-7 of its term), against the reference's rounding of the exact logits: within it
    where the weights' terms cancel partly (weights around 0.5 and 0.2), and a key scored as
    the row's best key is not; around 0 (the terms cancel to ~1/25 of their sum) flips
    exceed it: the bound's stated limit (common.py), asserted so that it stays known."""
    q8, k8, w, scale = _bf16_head_sum_case(1, mean_weight)
    n = k8.shape[0]
    ref = peers.index_scores(q8[None], w[None], k8, scale, np.array([n - 1]), fp8_mm=False,
                             bf16_head_sum=True).numpy()[0]
    worst = max(common.rel_err(_kernel_like_bf16_sum(q8, k8, w, scale, 2.0 ** -14, s), ref)
                for s in range(4))
    if mean_weight == 0.0:
        assert worst > common.BF16_HEAD_SUM_TOL
        return
    assert worst <= common.BF16_HEAD_SUM_TOL
    wrong = ref.copy()
    wrong[n // 2] = ref.max()
    assert common.rel_err(wrong, ref) > common.BF16_HEAD_SUM_TOL


# ------------------------------------------------------------------------------------- CLIs

def test_workload_option_parses_and_rejects_a_bad_name(capsys):
    ap = time_layers._parser()
    assert ap.parse_args([]).workload == ["W1"]
    assert ap.parse_args(["--workload", "w2,W1,W2"]).workload == ["W2", "W1"]
    with pytest.raises(SystemExit):
        check_layer._parser().parse_args(["--workload", "W1,W3"])
    err = capsys.readouterr().err
    assert "unknown workload 'W3'; choose from W1, W2" in err


def test_check_layer_runs_w2_into_its_own_dump_and_ignores_it_without_a_key_cache(tmp_path,
                                                                                   capsys):
    rc = check_layer.main(["--kind", "index_scoring,synthetic", "--rows", "2", "--kv", "fp8",
                           "--workload", "W1,W2", "--launches", "1", "--dump", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "note: synthetic has no key cache; --workload ignored" in out
    d = tmp_path / "tiny" / "tp1" / "r2" / "fp8"
    assert (d / "index_scoring.json").exists() and (d / "index_scoring.W2.json").exists()
    assert (d / "synthetic.json").exists() and not (d / "synthetic.W2.json").exists()


def test_time_layers_interp_timeline_per_workload(capsys):
    rc = time_layers.main(["--kind", "index_scoring", "--config", "tiny", "--rows", "2",
                           "--pos", "100", "--workload", "W1,W2", "--backend", "interp",
                           "--timeline"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "pos 100 W1 (interp)" in out and "pos 100 W2 (interp)" in out


# ------------------------------------------------------------------------------------ bench

def test_bench_workers_build_the_same_inputs_as_the_gpu_loop(capsys):
    import torch
    from bench import index_h200 as bench
    plan = [("index_scoring", 2, 8191, "W2")]
    for refs, ins in ((1, 1), (0, 0)):  # worker processes, and inline
        work = bench.Workers(plan, 0, refs, ins)
        try:
            inp, used = work.inputs(0)
            assert used and inp["positions"].tolist() == [8190, 8191]
            ref = work.reference(0, "r2 W2")(inp)
            assert ref[common.REF_SCORES].shape == (2, 1 << 19)
            inp["block_table"][1, 0] += 1  # other inputs: the check must say so
            with pytest.raises(RuntimeError, match="other inputs"):
                work.reference(0, "r2 W2")(inp)
        finally:
            work.close()
    if not torch.cuda.is_available():
        assert bench.main(["--rows", "2", "--ref-workers", "0"]) == 2
        assert "error:" in capsys.readouterr().err


@pytest.mark.gpu
def test_time_layers_times_w1_and_w2_with_span_floor_and_peer(capsys):
    rc = time_layers.main(["--kind", "index_scoring", "--rows", "2", "--pos", "8191",
                           "--workload", "W1,W2", "--reps", "2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ours/torch" in out and "score span" in out and " W2 " in out


class _CpuAsCuda(common.Backend):
    """The interpreter behind torch CPU tensors: time_one's GPU path, run on a CPU."""
    name, target = "cuda", "interp"

    def new_arena(self, L):
        import torch
        return torch.zeros(L.arena.total_bytes, dtype=torch.uint8)

    def prepare(self, inputs):
        return {n: common.to_device(v, "cpu") for n, v in inputs.items()
                if isinstance(v, np.ndarray)}

    def run(self, L, prepared, arena, step, timeline=None):
        import torch
        host = {n: t.numpy().copy() for n, t in prepared.items()}
        res = L.run_interp(host, arena=arena.numpy(), step=step)
        for n, v in res.outputs.items():
            prepared[n].copy_(torch.from_numpy(np.ascontiguousarray(v).view(
                prepared[n].numpy().dtype)))
        return res

    def outputs(self, L, result, prepared, inputs):
        return {n: np.asarray(v).view(inputs[n].dtype) for n, v in result.outputs.items()}


def test_time_one_gpu_path_runs_on_a_cpu_with_the_interpreter(monkeypatch):
    """The Python of the GPU path (floor, rotation, span, peer, checks): the kernel runs once
    in the interpreter, the graph timings are stubbed, the peer's FP8 matmul is its float path."""
    import torch
    from monokernel.launch import timing

    class Gpu:
        def __init__(self, backend, L, timeline, chip):
            self.lk = L.linked("interp", None, timeline)

        def launch(self, args):
            pass

    real_scores = peers.index_scores
    monkeypatch.setattr(common, "backend", lambda *a, **k: _CpuAsCuda())
    monkeypatch.setattr(time_layers, "_Gpu", Gpu)
    monkeypatch.setattr(timing, "timed_graph", lambda fn, per_graph, reps: (fn(), 10.0)[1])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(peers, "index_scores",
                        lambda *a, **k: real_scores(*a, **{**k, "fp8_mm": False}))
    k, spec, L = _launch()
    args = time_layers._parser().parse_args(["--reps", "1", "--per-graph", "2"])
    ceil = dict(copy_TBps=4.0, fp8_mm_TFLOPs=1000.0)
    for wl in ("W1", "W2"):
        row = time_layers.time_one(k, spec, args, ceil, POS, wl, launch=L)
        assert row["status"] == "ok", row
        assert row["wl"] == wl and row["us"] == 10.0 and row["torch_us"] == 10.0
        assert row["peer_err"] < 1e-5 and row["vs_torch"] == 1.0
        assert row["floor_us"] == pytest.approx(max(row["key_us"], row["flop_us"])
                                                + row["rest_us"])
