"""The index projections' partial-sum jobs (stages/index.py `ix_proj`, stages/mma_tile.py):
the job geometry derived from the config and the grid, every partial sum against float64
(from the kernel's own activations), and bit-identical results under other interleavings.

Tolerance of a partial sum (max-norm relative over a region): 1e-5, f32 accumulation (the
bf16 MMA's) of at most 1024 exact products (FP8 -> bf16 is exact, bf16 x bf16 products are
exact in f32; x * g of two bf16 is fed as exact bf16 halves), block scales applied per block.
"""
import numpy as np
import pytest

from monokernel import numerics
from spec import BuildSpec
from stages.index import HD, _index_inputs, index_launch, index_scoring_launch
from stages.index_plan import KEY_JOBS_IN_ROUND
from stages.index_ref import dec_bf16, dec_fp8, make_inputs
from stages.mma_tile import LOADS_IN_FLIGHT

PART_TOL = 1e-5
PAGES = 80


def _rel(got, ref):
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def _weights(p, inp):
    """Dequantized W_qb_idx [heads*128, q_lora], W_k [128, hidden], W_w [heads, hidden]."""
    fmt, H = p.fp8.name, p.heads
    ws = np.asarray(inp["ix_ws"], np.float64)
    nq = H * p.q_lora // 128
    wq = dec_fp8(inp["ix_wq"], fmt).reshape(H * HD, p.q_lora)
    wq = wq * np.repeat(np.repeat(ws[:nq].reshape(H, -1), HD, 0), 128, 1)
    wk = dec_fp8(inp["ix_wk"], fmt).reshape(HD, p.hidden) * np.repeat(ws[nq:], 128)[None, :]
    ww = dec_bf16(inp["ix_ww"]).reshape(H, p.hidden)
    return wq, wk, ww


def check_partials(L, inp, res, qr, h):
    """ix_qpart [q_splits, R, heads*128] and ix_kpart [k_splits, R, 128 + heads] against
    float64 sums over each split's chunk of the given activations."""
    p = L.plan
    wq, wk, ww = _weights(p, inp)
    qc, kc = p.qchunk, p.kchunk
    want_q = np.stack([qr[:, s * qc:(s + 1) * qc] @ wq[:, s * qc:(s + 1) * qc].T
                       for s in range(p.q_splits)])
    want_k = np.stack([np.concatenate([h[:, s * kc:(s + 1) * kc] @ wk[:, s * kc:(s + 1) * kc].T,
                                       h[:, s * kc:(s + 1) * kc] @ ww[:, s * kc:(s + 1) * kc].T], 1)
                       for s in range(p.k_splits)])
    got_q = np.asarray(res.regions["ix_qpart"], np.float64).reshape(want_q.shape)
    got_k = np.asarray(res.regions["ix_kpart"], np.float64).reshape(want_k.shape)
    eq, ek = _rel(got_q, want_q), _rel(got_k, want_k)
    assert eq <= PART_TOL and ek <= PART_TOL, (eq, ek)
    return eq, ek


# ------------------------------------------------------------------------------ geometry

@pytest.mark.parametrize("target", ["gfx950", "gfx942", "sm_90a"])
def test_glm5_job_geometry_from_config_and_grid(target):
    """GLM-5: AMD (256 / 304 CTAs): 256 q jobs of 32 KB of W_qb_idx, in one round of the grid
    and more than half of it (the largest such split), every load of a wave's m-tile in
    flight at once within LOADS_IN_FLIGHT; sm_90a (132 CTAs, KEY_JOBS_IN_ROUND): the q jobs
    and the key jobs in one round, 64 q jobs of 128 KB; key jobs <= 64 KB, their loads in
    flight at once; the costs add up to the weights."""
    for rows in (2, 8):
        L = index_launch(BuildSpec.make("glm5", rows=rows, target=target))
        p = L.plan
        assert p.q_splits * p.qchunk == p.q_lora and p.k_splits * p.kchunk == p.hidden
        if target in KEY_JOBS_IN_ROUND:
            assert p.proj_jobs <= p.grid < p.heads * 2 * p.q_splits + p.k_splits, p.proj_jobs
            assert p.q_splits == 2 and HD * p.qchunk == 128 << 10, p.q_splits
        else:
            assert p.grid / 2 < p.q_jobs <= p.grid, (p.q_jobs, p.grid)
            assert p.q_splits == 8 and HD * p.qchunk == 32 << 10, p.q_splits
            assert p.q_loads <= LOADS_IN_FLIGHT
        assert (HD + 2 * p.heads) * p.kchunk <= 64 << 10
        assert p.k_loads <= LOADS_IN_FLIGHT
        st = next(s for s in L.stages if s.name == "ix_proj")
        jobs = st.jobs()
        assert len(jobs) == p.proj_jobs
        weights = sum(st.bytes_moved()[n] for n in ("ix_wq", "ix_wk", "ix_ww", "ix_ws"))
        assert weights <= sum(j.cost_bytes for j in jobs) <= 1.5 * weights  # + L2-hot x, partials


def test_key_jobs_in_the_round_choose_the_q_split_first():
    """proj_splits' key_jobs_in_round: GLM-5 on 132 CTAs (8 waves of 32 lanes) takes 64 q
    jobs + 24 key jobs (128 + 24 would need 152) though its 128 KB jobs' loads pass the
    ring's depth; without it 128 q jobs (the loads' bound first); on a grid that holds no
    such round (40 CTAs: 32 + 24) the rule without it."""
    from stages import mma_tile
    from stages.index_plan import proj_splits
    cfg = BuildSpec.make("glm5", rows=8, target="sm_90a").config
    atom = mma_tile.proj_atom_name("sm_90a", 32, "sm_90a")
    assert proj_splits(cfg, atom, 8, 132, key_jobs_in_round=True) == (2, 24)
    assert proj_splits(cfg, atom, 8, 132) == (4, 24)
    assert proj_splits(cfg, atom, 8, 40, key_jobs_in_round=True) == proj_splits(cfg, atom, 8, 40)


# ------------------------------------------------------------------------- the partial sums

CASES = [  # rows, chip, waves, q_splits, k_splits, mode
    (2, "gfx950", None, 2, 4, "inorder"),
    (4, "gfx942", None, 1, 8, "random"),
    (8, "gfx950", 4, 2, 2, "relaxed"),
    (2, "sm_90a", None, 2, 1, "random"),
    (8, "sm_90a", 8, 1, 4, "inorder"),
]


@pytest.mark.parametrize("rows,chip,waves,qs,ks,mode", CASES,
                         ids=[f"r{c[0]}-{c[1]}-w{c[2]}-q{c[3]}-k{c[4]}-{c[5]}" for c in CASES])
def test_partials_against_float64(rows, chip, waves, qs, ks, mode):
    """index_scoring (h, qr inputs) on tiny, several splits, chips (wave64 / warp32), waves
    and interleavings: every partial within PART_TOL of float64; another interleaving gives
    the same bits for the partials and the published ix_qb / ix_nb."""
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    kw = {"waves": waves} if waves else {}
    L = index_scoring_launch(spec, chip=chip, capacity=4096, cache_pages=PAGES, q_splits=qs,
                             k_splits=ks, **kw)
    assert (L.plan.q_splits, L.plan.k_splits) == (qs, ks)
    inp = make_inputs(L.plan, np.random.default_rng(rows + 10 * qs), [(rows, 300)],
                      cache_pages=PAGES)
    res = L.run_interp({n: v.copy() for n, v in inp.items()}, step=0, mode=mode, seed=2)
    check_partials(L, inp, res, dec_bf16(inp["qr"]).reshape(rows, -1),
                   dec_bf16(inp["h"]).reshape(rows, -1))
    other = L.run_interp({n: v.copy() for n, v in inp.items()}, step=0, mode="random", seed=9)
    for name in ("ix_qpart", "ix_kpart", "ix_qb", "ix_nb"):
        a, b = (np.asarray(getattr(r.regions[name], "data", r.regions[name])) for r in (res, other))
        assert a.tobytes() == b.tobytes(), name


def test_partials_from_the_front():
    """Kind index: q partials of the front's qr (the kernel's own ix_qr region, bf16), key
    and head-weight partials of x * g (rs(x) applied later by ix_key)."""
    spec = BuildSpec.make("tiny", rows=4, target="interp")
    L = index_launch(spec, chip="gfx950", q_splits=2)
    inp = _index_inputs(L, spec, np.random.default_rng(4))
    res = L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()},
                       step=0, mode="relaxed", seed=5)
    p = L.plan
    qr = numerics.to_f64(np.asarray(getattr(res.regions["ix_qr"], "data", res.regions["ix_qr"])),
                         "bf16").reshape(p.rows, p.q_lora)
    xg = dec_bf16(inp["x"]).reshape(p.rows, -1) * dec_bf16(inp["attn_norm_w"])[None, :]
    check_partials(L, inp, res, qr, xg)


@pytest.mark.parametrize("rows,chip", [(4, "sm_90a"), (8, "gfx950")])
def test_q_jobs_one_poller_give_the_same_bits(rows, chip):
    """ix_proj.one_poller (kind index: wave 0's lanes alone poll the rows' qr pairs, then the
    CTA's agreement and every wave's acquire): the partials and the q heads bit-identical to
    every wave polling, in acquire_only mode (a wave that did not poll reads qr through the
    barrier and its own acquire), the partials within float64's tolerance."""
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    outs = []
    for on in (False, True):
        L = index_launch(spec, chip=chip, q_splits=2)
        next(st for st in L.stages if st.name == "ix_proj").one_poller = on
        inp = _index_inputs(L, spec, np.random.default_rng(rows))
        res = L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v
                            for n, v in inp.items()}, step=0, mode="acquire_only", seed=4)
        p = L.plan
        qr = numerics.to_f64(np.asarray(getattr(res.regions["ix_qr"], "data",
                                                res.regions["ix_qr"])), "bf16")
        xg = dec_bf16(inp["x"]).reshape(p.rows, -1) * dec_bf16(inp["attn_norm_w"])[None, :]
        check_partials(L, inp, res, qr.reshape(p.rows, p.q_lora), xg)
        outs.append([np.asarray(getattr(res.regions[n], "data", res.regions[n])).tobytes()
                     for n in ("ix_qpart", "ix_kpart", "ix_qb")])
    assert outs[0] == outs[1]


def _prefetch_run(L, spec, regions, rng_seed, seed):
    """One interpreted launch on seeded inputs: ({buffer: bytes' prefetch counts}, the
    `regions`' bytes)."""
    inp = _index_inputs(L, spec, np.random.default_rng(rng_seed))
    seen = {}
    res = L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()},
                       step=0, mode="random", seed=seed, prefetched=seen)
    return seen, [np.asarray(getattr(res.regions[n], "data", res.regions[n])).tobytes()
                  for n in regions]


@pytest.mark.parametrize("chip,qs", [("gfx950", 2),
                                     pytest.param("sm_90a", 1, marks=pytest.mark.slow)])
def test_q_jobs_prefetch_their_weights_once(chip, qs):
    """ix_proj.l2_prefetch (kind index: the q jobs wait for the front's qr): every byte of
    W_qb_idx is asked of the L2 exactly once over the q jobs, no other buffer, and every
    partial is bit-identical to the build without it."""
    spec = BuildSpec.make("tiny", rows=4, target="interp")
    outs = []
    for on in (False, True):
        L = index_launch(spec, chip=chip, q_splits=qs)
        next(st for st in L.stages if st.name == "ix_proj").l2_prefetch = on
        seen, out = _prefetch_run(L, spec, ("ix_qpart", "ix_kpart", "ix_qb"), rng_seed=6, seed=5)
        outs.append(out)
        if on:
            assert set(seen) == {"ix_wq"} and (seen["ix_wq"] == 1).all()
        else:
            assert seen == {}
    assert outs[0] == outs[1]


def test_prefetch_next_asks_every_job_s_weights_once():
    """Launch.prefetch_next (each job asks the L2 for the next job's constant inputs, the
    CTA's first job's at the start): over the fused index's jobs, every byte of the front's
    and the index projections' weights is asked exactly once, no other buffer (the
    interpreter faults on a prefetch outside its buffer or across an L2 line), and every
    output is bit-identical to the launch without it. With pdl the CTAs' first jobs ask for
    theirs before the grid_dep_wait (the interpreter allows only constant buffers there)."""
    spec = BuildSpec.make("tiny", rows=4, target="interp")
    outs = []
    for on, pdl in ((False, False), (True, False), (False, True)):
        L = index_launch(spec, chip="gfx950", q_splits=2)
        L.prefetch_next, L.pdl = on, pdl
        seen, out = _prefetch_run(L, spec, ("ix_qpart", "ix_kpart", "ix_qb", "ix_nb"),
                                  rng_seed=7, seed=2)
        outs.append(out)
        if on:
            assert set(seen) == {"qkv_a_w", "ix_wq", "ix_wk", "ix_ww"}, set(seen)
            for name, counts in seen.items():
                assert (counts == 1).all(), (name, np.unique(counts))
        else:
            assert (seen != {}) is pdl, set(seen)
    assert outs[0] == outs[1] == outs[2]


# ------------------------------------------------------------------------- the chips' code

@pytest.mark.parametrize("chip,mnemonic", [("gfx950", "v_mfma_f32_16x16x32_bf16"),
                                           ("gfx942", "v_mfma_f32_16x16x16_bf16")])
def test_projections_run_on_the_bf16_mfma(chip, mnemonic):
    """index_scoring's only bf16 MFMAs are ix_proj's: as many as the tiles imply (q: 128 rows;
    key: W_k's 128 rows and W_w's heads rows, K parts over the waves), and no spills."""
    pytest.importorskip("elftools", reason="pyelftools reads the code objects' notes")
    from monokernel.backend.toolchain import compile_amdgcn_asm
    from monokernel.build import build_many
    from stages import mma_tile as MT
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target=chip))
    p = L.plan
    a = build_many([L.kernel(chip)])[0]
    asm = compile_amdgcn_asm(a.llvm_ir, chip)
    T = p.q_tiling

    def mfmas(tile_m, blocks):
        sp = MT.WaveSplit.of(tile_m, 16, p.waves)
        return sp.per_wave * -(-blocks // sp.kparts) * T.chunks * T.passes
    want = mfmas(HD, p.qchunk // 128) + mfmas(HD, p.kchunk // 128) + \
        mfmas(p.w_tile, p.kchunk // 128)
    body = [s.split(";")[0].strip() for s in asm.splitlines()]
    assert sum(s.startswith(mnemonic + " ") for s in body) == want
    f = a.figures()
    assert f["vgpr_spill"] == 0 and f["sgpr_spill"] == 0 and f["scratch"] == 0, f
