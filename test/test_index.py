"""The long-context indexer (stages/index.py): projections, the key cache append and the
scoring of every visible key, against the float64 reference (stages/index_ref.py), in the
interpreter's three modes, with each chip's tiling (gfx950 16x16x128, gfx942 16x16x32 fnuz,
Hopper wgmma in warp32); keys past a row's bound never scored; first-digit histograms equal
the host's; builds: zero spills on gfx950/gfx942, the key loop's ISA, PTX for sm_90a; the
check_layer digests.

Tolerances (max-norm relative error of a row's visible scores):
  * against float64 scores of the kernel's OWN quantized operands (q8, w, new keys): 1e-5
    (exact fp8 products, f32 sums);
  * against the end-to-end float64 reference (which quantizes q and k by the same rule):
    2e-2, the room an isolated fp8 rounding flip of q or k leaves (an element of x / s
    within f32 rounding of a midpoint); the seeds here measure <= 1e-6.
"""
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from conftest import INDEX_JOB_LOOP_SPILL_BYTES, check_job_loop_spills, ptxas_report
from layouts.decode import decode, write_plain
from layouts.scores import FIRST_DIGIT_BINS, first_digit, ordered_key
from spec import BuildSpec
from spec.catalogue import TINY
from stages.index import (DEPTH, HD, PAGE, PAGE_BYTES, _index_inputs, index_launch,
                          index_scoring_launch, score_runs)
from stages.index_ref import (kernel_operands, make_inputs, reference,
                              scores_from_kernel)
from stages.index_tiling import KeyTiling, tiling
from tools.common import bf16_head_sum  # the scoring's precision, as the tools read it

SENTINEL = np.uint32(0x7FC0BEEF)  # a NaN no kernel computes: "never written"
E2E_TOL = 2e-2
# relu(q . k) and w each rounded to bf16 (2**-9 relative each) by the bf16 head sum, with room
BF16_TERM_TOL = 2.0 ** -7
OWN_TOL = 1e-5
CAP = 4096
PAGES = 80


def _launch(rows, chip="gfx950", cfg="tiny", **kw):
    spec = BuildSpec.make(cfg, rows=rows, target="interp")
    return index_scoring_launch(spec, chip=chip, capacity=CAP, cache_pages=PAGES, **kw)


def _run(L, inp, mode="inorder", seed=0, step=0, arena=None, on_stall="raise"):
    arena = L.new_arena() if arena is None else arena
    sent = np.full((L.plan.rows, L.plan.capacity), SENTINEL, np.uint32).view(np.float32)
    write_plain(L.arena, arena, "scores", sent)
    hs = np.full((L.plan.rows, L.plan.segments, FIRST_DIGIT_BINS), SENTINEL, np.uint32)
    write_plain(L.arena, arena, "score_hist", hs)
    res = L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()},
                       arena=arena, step=step, mode=mode, seed=seed, on_stall=on_stall)
    return res


def _rel(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def check_launch(L, inp, res):
    """Every check of one run; returns the worst (own, end-to-end) errors."""
    p = L.plan
    R = p.rows
    ref = reference(p, inp)
    bf16 = bf16_head_sum(L)
    own = scores_from_kernel(p, inp, res.regions, bf16_head_sum=bf16)
    # the bf16 head sum's own roundings against the model's float64 scores: up to
    # BF16_TERM_TOL of the terms' magnitudes (a score whose terms cancel is small against them)
    slack = BF16_TERM_TOL * scores_from_kernel(p, inp, res.regions, magnitude=True) if bf16 \
        else np.zeros_like(own)
    sc = res.regions["scores"]
    pos = inp["positions"].astype(np.int64)
    bits = sc.view(np.uint32)
    worst = [0.0, 0.0]
    for r in range(R):
        n = int(pos[r]) + 1
        got = sc[r, :n].astype(np.float64)
        assert np.isfinite(got).all(), f"row {r}: a visible score is not finite (a poisoned key?)"
        assert (bits[r, n:] == SENTINEL).all(), f"row {r}: a key past its bound {n - 1} was scored"
        worst[0] = max(worst[0], _rel(got, own[r, :n]))
        want = ref["scores"][r, :n]
        off = np.maximum(np.abs(got - want) - slack[r, :n], 0.0)
        worst[1] = max(worst[1], float(off.max() / max(np.abs(want).max(), 1e-30)))
    assert worst[0] <= OWN_TOL, worst
    assert worst[1] <= E2E_TOL, worst
    # first-digit histograms: the host's histogram of the stored scores, per (row, segment);
    # with IndexPlan.row_parts (the fused index on sm_90a) none (the region as poisoned), and
    # each job's counts a row (`score_rows`) summed over the jobs are the row's
    hist = res.regions["score_hist"]
    S = p.segment
    kept = next(s for s in L.stages if s.name == "ix_score").segment_hist
    assert kept or (hist == SENTINEL).all(), "row_parts: a segment histogram was written"
    for r in range(R):
        n = int(pos[r]) + 1
        dig = first_digit(ordered_key(sc[r, :n]))
        if not kept:
            parts = np.asarray(res.regions["score_rows"]).reshape(p.score_jobs, R, -1)
            want = np.bincount(dig, minlength=FIRST_DIGIT_BINS)
            assert np.array_equal(parts[:, r].sum(0), want), f"row {r}: score_rows"
            continue
        for s in range(p.segments):
            if s * S < n:
                want = np.bincount(dig[s * S:min(n, (s + 1) * S)], minlength=FIRST_DIGIT_BINS)
                assert np.array_equal(hist[r, s], want), (r, s)
            else:
                assert (hist[r, s] == SENTINEL).all(), (r, s)
    # every scoring job announced itself
    assert decode(L.arena, res.arena, "score_done").all_tagged(res.tag)
    # the quantized operands against the reference's, and the cache append
    q8, sq, k8, sk, w = kernel_operands(p, res.regions)
    assert np.mean(q8 == ref["q8"]) > 0.995 and np.mean(k8 == ref["k8"]) > 0.99
    assert np.allclose(sq, ref["sq"], rtol=0, atol=0) or np.mean(sq == ref["sq"]) > 0.95
    assert _rel(w, ref["w"]) < 1e-5 or np.mean(np.isclose(w, ref["w"], rtol=1e-5)) > 0.95
    cache = res.outputs["index_cache"].reshape(-1, PAGE_BYTES)
    before = inp["index_cache"].reshape(-1, PAGE_BYTES)
    bt = inp["block_table"]
    touched = np.zeros(cache.shape, bool)
    for r in range(R):
        pg, off = int(bt[r, pos[r] // PAGE]), int(pos[r] % PAGE)
        assert np.array_equal(cache[pg, off * HD:(off + 1) * HD], k8[r]), f"row {r}: key bytes"
        assert cache[pg, PAGE * HD + 4 * off:PAGE * HD + 4 * off + 4].view(np.float32)[0] == \
            np.float32(sk[r]), f"row {r}: key scale"
        touched[pg, off * HD:(off + 1) * HD] = True
        touched[pg, PAGE * HD + 4 * off:PAGE * HD + 4 * off + 4] = True
    assert np.array_equal(cache[~touched], before[~touched]), "the cache changed outside the new slots"
    return worst


# ----------------------------------------------------------------------------- host side

@pytest.mark.parametrize("name", ["gfx950_mfma_f32_16x16x128_f8f6f4",
                                  "gfx942_mfma_f32_16x16x32_fp8", "sm90_wgmma_m64n64k32_e4m3"])
def test_key_tiling_is_32_contiguous_bytes_a_lane_as_the_kernel_computes(name):
    from monokernel.atoms.nvidia import wgmma_e4m3
    t = tiling(name) if not name.startswith("sm90") else KeyTiling.of(wgmma_e4m3(64))
    assert sorted(t.perm) == list(range(HD))
    h = t.holder_of_lane()
    lanes = np.arange(h.shape[0])
    if name.startswith("sm90"):
        assert (h == (lanes % 4)[:, None]).all()  # holder t = lane % 4 for both keys
        assert t.a_words == tuple(((0, 2 * c), (1, 2 * c), (0, 2 * c + 1), (1, 2 * c + 1))
                                  for c in range(4))
    else:
        assert (h[:, 0] == lanes // 16).all()  # holder = lane // 16, key row = lane % 16
        assert (t.b_window_of_lane() == lanes // 16).all()
        words = [w for c in range(t.chunks) for (_, w) in t.a_words[c]]
        assert words == list(range(8)) and [w for c in t.b_words for w in c] == list(range(8))


@pytest.mark.parametrize("piece", [4, 16, 32])
def test_key_pieces_keep_the_a_words_and_read_whole_spans(piece):
    """IndexScore.key_piece: a Hopper lane's 32 key bytes in loads of `piece` contiguous
    bytes, the four holders' i-th pieces adjacent (one load instruction of a key's holders
    reads 4 * piece contiguous bytes); the A registers keep their (key slot, word) and the
    permutation stays a bijection, so only the load addresses and the staged query order
    move."""
    from monokernel.atoms.nvidia import wgmma_e4m3
    base = KeyTiling.of(wgmma_e4m3(64))
    t = KeyTiling.of(wgmma_e4m3(64), piece)
    assert sorted(t.perm) == list(range(HD)) and t.a_words == base.a_words
    for i in range(32 // piece):  # the holders' i-th pieces cover one contiguous span
        span = sorted(KeyTiling.key_byte(q, i * piece + b, piece)
                      for q in range(4) for b in range(piece))
        assert span == list(range(4 * piece * i, 4 * piece * (i + 1)))
    for lane in range(4):  # within a piece the lane's bytes are contiguous and in order
        got = [KeyTiling.key_byte(lane, b, piece) for b in range(32)]
        for i in range(0, 32, piece):
            assert got[i:i + piece] == list(range(got[i], got[i] + piece))
    assert t.perm != base.perm if piece != 32 else t.perm == base.perm


def test_key_pieces_are_checked():
    """A piece size the tiling does not take, or a narrow piece on AMD's register-B atoms
    (a lane's query bytes in one 32-byte window), is an error naming it."""
    from monokernel.atoms.nvidia import wgmma_e4m3
    with pytest.raises(ValueError, match="key pieces of 8 bytes"):
        KeyTiling.of(wgmma_e4m3(64), 8)
    with pytest.raises(ValueError, match="32-byte window"):
        KeyTiling.of("gfx950_mfma_f32_16x16x128_f8f6f4", 16)


def test_score_runs_cover_every_unit_once_with_balanced_cost():
    rng = np.random.default_rng(3)
    L = _launch(8)
    p = L.plan
    for requests in ([(8, 4000)], [(1, 0), (2, 63), (4, 2045), (1, 100)], [(2, 4000)] * 4):
        pos, bt = [], []
        from stages.index_ref import request_layout
        pos, bt = request_layout(replace(p, cache_pages=400), rng, requests)
        runs = score_runs(p, pos, bt)
        seen, costs = {}, []
        for j, mine in enumerate(runs):
            c = slots = 0
            for f, n, lo, hi in mine:
                for s in range(lo, hi):
                    assert (f, s) not in seen
                    seen[(f, s)] = j
                c += (hi - lo) * ((n + 1) // 2)
                slots += (hi - lo) * n
            costs.append(c)
            assert slots <= p.hist_slots
        for f, n in {(f, n) for m in runs for f, n, _, _ in m}:
            assert {s for (ff, s) in seen if ff == f} == set(range(int(pos[f + n - 1]) // p.segment + 1))
        total = sum(costs)
        assert max(costs) <= total / p.score_jobs + p.pairs + 1


def test_invalid_input_is_rejected_naming_the_row():
    L = _launch(2)
    inp = make_inputs(L.plan, np.random.default_rng(0), [(2, 100)], cache_pages=PAGES)
    bad = dict(inp, positions=np.array([100, CAP], np.int32))
    with pytest.raises(ValueError, match="row 1: position 4096 outside"):
        L.run_interp(bad, step=0)
    bt = inp["block_table"].copy()
    bt[0, 1] = -1
    with pytest.raises(ValueError, match=r"row 0: block_table\[0, 1\] = -1"):
        L.run_interp(dict(inp, block_table=bt), step=0)


# ------------------------------------------------------------------------- interpreter runs

# (rows, requests [(rows, first position)], chip, mode): contexts 1, 63, 64, 65, 2047, 2048,
# 2049 keys, one request and several mixed, pages shuffled, every interpreter mode
CASES = [
    (2, [(1, 0), (1, 62)], "gfx950", "inorder"),            # contexts 1, 63 (two requests)
    (2, [(2, 62)], "gfx950", "relaxed"),                    # 63, 64 (one request)
    (4, [(1, 64), (3, 2044)], "gfx950", "random"),          # 65, 2045..2047 (mixed)
    (8, [(8, 2041)], "gfx950", "inorder"),                  # 2042..2049 (one request)
    (4, [(2, 2046), (2, 2047)], "gfx942", "relaxed"),       # 2047, 2048 | 2048, 2049 (fnuz)
    (8, [(1, 0), (2, 63), (4, 2045), (1, 100)], "sm_90a", "random"),  # wgmma, warp32
    (4, [(4, 2045)], "sm_90a", "inorder"),                  # 2046..2049 on the wgmma tiling
    (8, [(8, 2043)], "sm_90a", "acquire_only"),             # one group: the N = 256 wgmma
    (8, [(7, 1500), (1, 64)], "sm_90a", "inorder"),         # 7 rows from row 0: wide chain, odd
]


@pytest.mark.parametrize("rows,requests,chip,mode", CASES,
                         ids=[f"r{c[0]}-{c[2]}-{c[3]}-{'+'.join(f'{n}@{s}' for n, s in c[1])}"
                              for c in CASES])
def test_scores_against_float64_reference(rows, requests, chip, mode):
    L = _launch(rows, chip)
    inp = make_inputs(L.plan, np.random.default_rng(rows * 7 + len(requests)), requests,
                      cache_pages=PAGES)
    res = _run(L, inp, mode=mode, seed=5)
    check_launch(L, inp, res)


@pytest.mark.parametrize("chip", ["sm_90a", "gfx950"])
def test_dropped_acquires_fail_in_acquire_only_mode(chip, monkeypatch):
    """Every device-scope acquire fence of the launch dropped (the waits' own, after their
    polls): the acquire_only interpreter shows stale bytes (check_launch fails), where the
    same launch with its fences passes (test_scores_against_float64_reference). The
    relaxed mode's random refreshes may hide this (bench/NOTES.md v59)."""
    from test_memory_modes import drop_device_acquires
    drop_device_acquires(monkeypatch)
    L = _launch(8, chip)
    inp = make_inputs(L.plan, np.random.default_rng(8 * 7 + 1), [(8, 2043)], cache_pages=PAGES)
    res = _run(L, inp, mode="acquire_only", seed=5)
    with pytest.raises(AssertionError):
        check_launch(L, inp, res)


def test_each_acquire_of_the_sm90a_scoring_is_needed(monkeypatch):
    """index_scoring r8 on sm_90a's defaults (one poller a scoring CTA, ix_nb first; q_splits
    2, so a head's q jobs and its ix_q sit on different CTAs): dropping any ONE device-scope
    acquire fence (each call path of KernelBuilder.fence that emits one: ix_q's, ix_key's,
    the scoring's) fails the checks in acquire_only mode (CausalMemory: an acquire covers
    only what its polls observed). A fence no check needs would be dead weight or a test
    gap; this says there is neither here (bench/NOTES.md v59)."""
    import traceback
    from monokernel.dsl import KernelBuilder
    real = KernelBuilder.fence
    seen, drop = [], [None]

    def call_path():
        return tuple(f"{fr.filename}:{fr.lineno}" for fr in traceback.extract_stack()[:-2]
                     if "/stages/" in fr.filename or "/layouts/" in fr.filename)

    def fence(self, order="acq_rel", scope="device"):
        if order == "acquire" and scope in ("device", "system"):
            where = call_path()
            if where not in seen:
                seen.append(where)
            if where == drop[0]:
                return None
        return real(self, order, scope)
    monkeypatch.setattr(KernelBuilder, "fence", fence)

    def passes() -> bool:
        L = _launch(8, "sm_90a", q_splits=2)
        inp = make_inputs(L.plan, np.random.default_rng(57), [(8, 2043)], cache_pages=PAGES)
        res = _run(L, inp, mode="acquire_only", seed=5)
        try:
            check_launch(L, inp, res)
        except AssertionError:
            return False
        return True
    assert passes()
    assert len(seen) >= 3, seen  # ix_q, ix_key, the scoring
    for where in list(seen):
        drop[0] = where
        assert not passes(), f"the acquire at {where[-1]} dropped: no check failed"


def test_two_steps_on_one_arena_and_more_waves():
    """A second launch on the same never-reset scratch (new tag, new contexts) and a CTA of
    4 waves (two waves a row pair) give the same checks."""
    L = _launch(4, waves=4)
    arena = L.new_arena()
    rng = np.random.default_rng(11)
    for step, req in enumerate(([(4, 700)], [(2, 130), (2, 1500)])):
        inp = make_inputs(L.plan, rng, req, cache_pages=PAGES)
        res = _run(L, inp, mode="random", seed=step, step=step, arena=arena)
        assert res.tag == step + 1
        check_launch(L, inp, res)


def test_full_32_heads_by_128():
    """The real head count and head dim (32 x 128: two 16-head MFMA halves) at a small
    context, on the gfx950 and the Hopper tiling."""
    cfg = replace(TINY, name="tiny32", index_heads=32, q_lora_rank=128, hidden=256)
    for chip, req in (("gfx950", [(2, 120), (2, 190)]), ("sm_90a", [(4, 61)])):
        spec = BuildSpec.make(cfg, tp=1, rows=4, target="interp")
        L = index_scoring_launch(spec, chip=chip, capacity=1024, cache_pages=16, k_splits=1)
        inp = make_inputs(L.plan, np.random.default_rng(2), req, cache_pages=16)
        res = _run(L, inp, mode="inorder")
        check_launch(L, inp, res)


def test_index_kind_runs_the_front_and_the_indexer_in_one_launch():
    """Kind `index`: the front (RMSNorm, q_a | kv_a, qr, MLA cache) and the indexer, whose qr
    comes from the front's partial sums and whose key / head-weight projections use x * g
    with the front's 1/rms, in one persistent kernel; the front's qr output stays within
    its own tolerance, the indexer's checks are those above (reference chained from x)."""
    from monokernel import numerics
    from stages.front import front_reference
    for rows, chip, mode in ((4, "gfx950", "random"), (2, "sm_90a", "relaxed")):
        spec = BuildSpec.make("tiny", rows=rows, target="interp")
        L = index_launch(spec, chip=chip)
        assert [s.name for s in L.stages][:3] == ["front_proj", "front_kv", "ix_qr"]
        inp = _index_inputs(L, spec, np.random.default_rng(rows))
        res = _run(L, inp, mode=mode, seed=3)
        check_launch(L, inp, res)
        fr = front_reference(inp, L.plan.front)
        qr = numerics.to_f64(res.outputs["qr"], "bf16")
        assert _rel(qr, fr["qr"]) <= 2.0 ** -8 + 1e-5
        # ix_qr rounds qr once and stores it twice: the output is the q heads' own input
        np.testing.assert_array_equal(np.asarray(res.outputs["qr"]).view(np.uint16).ravel(),
                                      np.asarray(res.regions["ix_qr"]).view(np.uint16).ravel())


# ------------------------------------------------------------------------------- builds

def _amd_artifacts():
    pytest.importorskip("elftools", reason="pyelftools reads the code objects' notes")
    from monokernel.build import build_many
    kernels = [mk(BuildSpec.make("glm5", rows=rows, target=chip)).kernel(chip)
               for mk in (index_launch, index_scoring_launch)
               for chip in ("gfx950", "gfx942") for rows in (2, 4, 8)]
    return kernels, build_many(kernels)


@pytest.fixture(scope="module")
def amd_builds():
    return _amd_artifacts()


def test_glm5_builds_for_gfx950_and_gfx942_without_spills(amd_builds):
    """Kinds index (front + indexer) and index_scoring, GLM-5, 2/4/8 rows, both chips."""
    _, arts = amd_builds
    assert len(arts) == 12
    for a in arts:
        f = a.figures()
        assert f["vgpr_spill"] == 0 and f["sgpr_spill"] == 0 and f["scratch"] == 0, f
        assert f["agpr"] == 0, f  # no AGPR used as spill space
        assert f["vgpr"] <= 256 and f["lds"] == a.kernel.lds_bytes, f


@pytest.mark.parametrize("chip,per_step", [("gfx950", 4), ("gfx942", 16)])
def test_key_loop_isa(amd_builds, chip, per_step):
    """Kind index (GLM-5, 8 rows): the key loop's loads are nontemporal (`nt`) dwordx4 straight to
    registers, no LDS store, no barrier and no spill code in it, and it issues DEPTH steps x
    2 rows x 2 head halves x chunks MFMAs (16x16x128: one a head; gfx942 16x16x32: four)."""
    import re
    from monokernel.backend.toolchain import compile_amdgcn_asm
    _, arts = amd_builds
    a = arts[("gfx950", "gfx942").index(chip) * 3 + 2]  # kind index, 8 rows
    assert a.target == chip and a.kernel.name == "index"
    asm = compile_amdgcn_asm(a.llvm_ir, chip)
    lines = asm.splitlines()
    start = next(i for i, s in enumerate(lines) if s.strip() == f"{a.kernel.name}:")
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(".Lfunc_end"))
    lines = lines[start:end]
    labels = {m.group(1): i for i, s in enumerate(lines)
              if (m := re.match(r"^(\.LBB\d+_\d+):", s))}
    loops = [(labels[m.group(1)], i) for i, s in enumerate(lines)
             if (m := re.match(r"\s*s_(?:cbranch_\w+|branch)\s+(\.LBB\d+_\d+)", s))
             and m.group(1) in labels and labels[m.group(1)] <= i]
    mnem = "v_mfma_scale_f32_16x16x128_f8f6f4" if chip == "gfx950" else "v_mfma_f32_16x16x32_fp8_fp8"
    # the front's projection (stages/mma_tile.py) runs the chip's bf16 MFMA, the scoring the FP8 one
    assert all(mnem in s or "_bf16" in s for s in lines if "v_mfma" in s)
    mf = [i for i, s in enumerate(lines) if mnem in s]
    assert mf, "the scoring's MFMA is the chip's FP8 one"
    lo, hi = min(((a_, b_) for a_, b_ in loops if a_ <= mf[0] and b_ >= mf[-1]),
                 key=lambda x: x[1] - x[0])
    body = [s.split(";")[0].strip() for s in lines[lo:hi + 1]]
    count = lambda pat: sum(1 for s in body if re.search(pat, s))  # noqa: E731
    assert count("v_mfma") == DEPTH * per_step, count("v_mfma")
    kloads = [s for s in body if s.startswith("global_load_dwordx4")]
    assert len(kloads) == 2 * DEPTH and all(re.search(r"\bnt\b", s) for s in kloads), kloads
    assert count(r"^global_load_dword\s.*\bnt\b") == DEPTH  # the key scales
    assert count(r"^ds_(write|store)|^buffer_store|_lds\b") == 0
    assert count(r"^s_barrier") == 0 and count(r"^(v_readlane|v_writelane|scratch_)") == 0
    assert count(r"^ds_add_u32") >= 1  # the first-digit histogram (LDS atomics)


def test_sm90a_ptx_builds():
    from monokernel.build import build_many
    kernels = [mk(BuildSpec.make("glm5", rows=r, target="sm_90a")).kernel("sm_90a")
               for mk, r in ((index_scoring_launch, 2), (index_launch, 8))]
    # one-pair chains, 4 chunks each, unrolled DEPTH times, two pages a step in the rows-2
    # build (IndexScore.pages_per_step; the alternating one-pair pipeline is off by default:
    # its own test is in test_index_score_pipeline)
    for a, unrolled in zip(build_many(kernels), (2 * DEPTH, DEPTH)):
        ptx = a.data.decode()
        assert ".target sm_90a" in ptx
        assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3") == unrolled * 4
    report = ptxas_report(ptx)
    if report is not None:  # the last: index rows 8 (IndexScore.narrow_prefetch's note)
        check_job_loop_spills(report, ptx, INDEX_JOB_LOOP_SPILL_BYTES)


# ----------------------------------------------------------------------------- check_layer

def test_check_layer_digests_repeat_and_perturb_changes_them(tmp_path):
    if not os.path.exists(os.path.join(os.path.dirname(__file__), "..", "tools", "check_layer.py")):
        pytest.skip("tools/check_layer.py is not there yet")
    from stages import kinds
    kind = "index" if "index" in kinds.names() else "index_scoring"
    root = os.path.join(os.path.dirname(__file__), "..")
    base = [sys.executable, "-m", "tools.check_layer", "--kind", kind, "--config", "tiny",
            "--rows", "2,4", "--kv", "fp8,bf16", "--backend", "interp"]
    dumps = []
    for name, extra in (("a", []), ("b", []), ("p", ["--perturb"])):
        d = str(tmp_path / name)
        r = subprocess.run(base + ["--dump", d] + extra, cwd=root, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        dumps.append(d)
    cmp = [sys.executable, "-m", "tools.check_layer", "--compare"]
    same = subprocess.run(cmp + dumps[:2], cwd=root, capture_output=True, text=True)
    assert same.returncode == 0, same.stdout
    diff = subprocess.run(cmp + [dumps[0], dumps[2]], cwd=root, capture_output=True, text=True)
    assert diff.returncode == 1 and "differ" in diff.stdout, diff.stdout


def test_scoring_digit_of_canonical_scores_is_the_contracts_first_digit():
    """The scoring's 5-operation digit (index_dsl.ordered_digit_canonical) equals the
    contract's first digit (layouts.scores: ordered_key >> 26) on every special bit pattern
    and random ones, -0.0 excepted: the scoring stores no -0.0, its scale's FMA (adding
    +0.0) turns a -0.0 product into +0.0 and leaves every other product's bits alone."""
    from monokernel import interp
    from monokernel.dsl import ABI, Ptr, build_kernel
    from monokernel.types import f32, u32
    from stages.index_dsl import ordered_digit_canonical
    from stages.index_score import IndexScore
    from test_select import SPECIAL
    rng = np.random.default_rng(5)
    bits = np.concatenate([SPECIAL[SPECIAL != 0x80000000],
                           rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)])
    bits = bits[:128]
    scale = np.float32(rng.uniform(0.5, 2.0, 128).astype(np.float32))
    scale[:4] = [1.0, -1.0, 0.0, -0.0]

    def kern(k):
        i = k.lane_id() * 4
        x = k.bitcast(k.load(k.args.x, i, u32, 4), f32, 4)
        s = k.load(k.args.s, i, f32, 4)
        k.store(k.args.digit, i, ordered_digit_canonical(k, x))
        k.store(k.args.scaled, i, IndexScore._scaled(k, x, s))
    K = build_kernel("digits", kern, abi=ABI(x=Ptr(u32), s=Ptr(f32), digit=Ptr(u32),
                                             scaled=Ptr(f32)), wave_size=32)
    args = dict(x=bits.copy(), s=scale.copy(), digit=np.zeros(128, np.uint32),
                scaled=np.zeros(128, np.float32))
    with np.errstate(all="ignore"):  # the specials' products: inf, NaN
        interp.run(K, args)
        f = bits.view(np.float32)
        prod = f * scale
    assert np.array_equal(args["digit"], first_digit(ordered_key(f)))
    got = args["scaled"]
    zero = prod == 0
    assert not np.signbit(got[zero]).any(), "a zero score kept its sign"
    same = ~zero & ~np.isnan(prod)
    assert np.array_equal(got[same].view(np.uint32), prod[same].view(np.uint32))
    assert np.array_equal(np.isnan(got), np.isnan(prod))


def test_segments_must_be_powers_of_two():
    with pytest.raises(ValueError, match="a segment of 192 keys; segments are powers of two"):
        index_scoring_launch(BuildSpec.make("tiny", rows=2, target="interp"), capacity=3072,
                             segment=192)
