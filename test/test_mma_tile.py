"""The tensor-core projection tile (stages/mma_tile.py).

* The tiling's lane formulas (LaneFn: shifts and masks of the lane number) reproduce every
  atom's own operand maps element by element: A (weight row, permuted k), B (activation
  column, permuted k), C (row, column), and the hi/lo join of the C columns.
* A standalone kernel on the interpreter, every bf16 atom (gfx950 16x16x32, gfx942 16x16x16,
  Hopper m16n8k16), rows 1/2/4/8, every work split the tile has (one m-tile a wave, K parts
  summed through LDS with an uneven block count, several m-tiles a wave, the runtime ring):
  partial sums against float64 within max-norm relative 1e-5 (f32 accumulation; every
  product exact), the same bits in every interpreter mode.
* bf16 weights (unscaled, fed as loaded) and bf16 activations (parts=1) on a tile with
  more rows than the weights (clamped loads, masked outputs), every atom and work split.
* Negative control: the same activations fed unsplit (bf16-truncated, `parts=1`) miss that
  tolerance by far, so the test sees a dropped lo half.
* The gfx950 / gfx942 code objects of the front run the chip's bf16 MFMA, as many as the
  tiling implies, with every weight load a nontemporal dwordx4 issued before the first MFMA.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from monokernel import interp, numerics
from monokernel.atoms import atom as get_atom
from monokernel.dsl import build_kernel
from monokernel.ir import ABI, Ptr
from monokernel.types import bf16, f32, fp8e4m3fn, u32
from stages import mma_tile as MT

REL_TOL = 1e-5
ATOMS = sorted(MT.PROJ_ATOMS.values())


# ------------------------------------------------------------------------- lane formulas

def test_lane_fn_reproduces_affine_tables_and_rejects_others():
    for table in ([0, 1, 2, 3] * 16, [x >> 2 for x in range(32)], [8 + (x >> 2) for x in range(32)],
                  [4 * (x >> 4) + (x & 3) for x in range(64)], [7] * 32):
        assert MT.LaneFn.of(table).table().tolist() == list(table)
    with pytest.raises(ValueError, match="not affine"):
        MT.LaneFn.of([0, 1, 1, 0] * 8)


@pytest.mark.parametrize("name", ATOMS)
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_tiling_formulas_reproduce_the_atom_maps(name, rows):
    T = MT.tiling(name, rows)
    at = get_atom(name)
    K, L = at.k, at.group
    assert sorted(T.perm) == list(range(MT.BLOCK)) and T.lane_k == 32
    rows_l = [f.table() for f in T.a_rows]
    win, bcol, bwin = T.a_window.table(), T.b_col.table(), T.b_window.table()
    ar, ac, br, bc = at.a_rows(), at.a_cols(), at.b_rows(), at.b_cols()
    for c in range(T.chunks):
        for ln in range(L):
            for s in range(at.a_slots):  # the slot's weight: row, and k of the block
                h, wd = T.a_words[c][s // 2]
                e = 2 * wd + s % 2
                assert rows_l[h][ln] == ar[ln, s]
                assert T.perm[c * K + ac[ln, s]] == win[ln] * T.lane_k + e
            for s in range(at.b_slots):  # the slot's activation: column, and k of the block
                e = 2 * T.b_words[c][s // 2] + s % 2
                assert bcol[ln] == bc[ln, s]
                assert T.perm[c * K + br[ln, s]] == bwin[ln] * T.lane_k + e
    crow, ccol = T.c_row.table(), T.c_col.table()
    lane_of, slot_of = at.owner("c")
    for ln in range(L):
        for s in range(at.c_slots):
            r, col = crow[ln] + T.c_row_off[s], ccol[ln] + T.c_col_off[s]
            assert (at.c_rows()[ln, s], at.c_cols()[ln, s]) == (r, col)
            if T.join and col < rows:  # the lo column of a hi column
                d, sigma = T.join
                assert (lane_of[r, col + rows], slot_of[r, col + rows]) == (ln ^ d, sigma[s])
    assert T.passes * at.n >= 2 * rows and (T.join is None) == (T.passes > 1)


def test_atoms_per_target():
    assert MT.proj_atom_name("gfx950", 64) == "gfx950_mfma_f32_16x16x32_bf16"
    assert MT.proj_atom_name("gfx942", 64) == "gfx942_mfma_f32_16x16x16_bf16"
    assert MT.proj_atom_name("sm_90a", 32) == "sm90_mma_m16n8k16_bf16"
    assert MT.proj_atom_name("interp", 32) == "sm90_mma_m16n8k16_bf16"
    assert MT.proj_atom_name("interp", 64, "gfx942") == "gfx942_mfma_f32_16x16x16_bf16"
    with pytest.raises(ValueError, match="runs on 64 lanes"):
        MT.proj_atom_name("interp", 32, "gfx950")


# ------------------------------------------------------------------------- the kernel

ABI_ = ABI(w=Ptr(fp8e4m3fn), ws=Ptr(f32), x=Ptr(bf16), g=Ptr(bf16), out=Ptr(f32, readonly=False))


def tile_body(k, *, N, K, R, S, tile_m, atom_name, parts):
    """CTA c: tile c // S, K split c % S; out[s, r, n] = sum_{k in split s} Wdq[n, k] x[r, k] g[k]."""
    a = k.args
    T = MT.tiling(atom_name, R, parts)
    chunk = K // S
    t, s = k.cta_id() / S, k.cta_id() % S
    k0 = s * chunk
    act = k.lds("act", u32, MT.act_lds_words(T, chunk))
    split = MT.WaveSplit.of(tile_m, T.atom.m, k.W)
    red = k.lds("red", f32, k.W * k.L * T.atom.c_slots) if split.kparts > 1 else None

    def load8(r, kk, m):
        return k.load(a.x, r * K + k0 + kk, bf16, 8, mask=m), k.load(a.g, k0 + kk, bf16, 8, mask=m)

    def stage():
        pending = MT.load_activations(k, T, chunk, load8)

        def finish():
            MT.store_activations(k, T, act, chunk, pending,
                                 lambda xg: k.cast(xg[0], f32) * k.cast(xg[1], f32))
            k.barrier()
        return finish

    def emit(m, r, v, mask):
        k.store(a.out, (s * R + r) * N + m, v, mask=mask)

    MT.project(k, T, w=a.w, w_stride=K, w_dtype=fp8e4m3fn, scale=a.ws, scale_stride=K // MT.BLOCK,
               row0=t * tile_m, k0=k0, kb0=s * (chunk // MT.BLOCK), blocks=chunk // MT.BLOCK,
               tile_m=tile_m, lds=act, chunk=chunk, stage=stage, emit=emit, red=red)


def make(rng, N, K, R, S):
    cv = numerics.convert
    return dict(
        w=cv(rng.standard_normal((N, K)) * 112.0, "f64", fp8e4m3fn),
        ws=(0.01 * np.exp(0.3 * rng.standard_normal((-(-N // 128), K // 128)))).astype(np.float32),
        x=cv(rng.standard_normal((R, K)) * 3.0, "f64", bf16),
        g=cv(1.0 + 0.1 * rng.standard_normal(K), "f64", bf16),
        out=np.full((S, R, N), np.nan, np.float32))


def reference(inp, N, K, R, S):
    ws = inp["ws"].astype(np.float64)
    W = numerics.to_f64(inp["w"], fp8e4m3fn) * np.repeat(np.repeat(ws, 128, 0), 128, 1)[:N]
    a = numerics.to_f64(inp["x"], bf16) * numerics.to_f64(inp["g"], bf16)[None]
    return np.einsum("rsk,nsk->srn", a.reshape(R, S, K // S), W.reshape(N, S, K // S))


def run_tile(name, R, *, waves, N=128, K=1024, S=2, tile_m=64, parts=2, mode="inorder", seed=0):
    L = get_atom(name).group
    kern = build_kernel("tile", tile_body, abi=ABI_, target="interp", waves=waves, wave_size=L,
                        N=N, K=K, R=R, S=S, tile_m=tile_m, atom_name=name, parts=parts)
    inp = make(np.random.default_rng(seed), N, K, R, S)
    interp.run(kern, inp, grid=N // tile_m * S, mode=mode, seed=5)
    ref = reference(inp, N, K, R, S)
    out = inp["out"]
    assert not np.isnan(out).any(), "unwritten partial sums"
    return out, np.abs(out - ref).max() / np.abs(ref).max()


# (atom, rows, waves, K, S, tile_m): one m-tile a wave (4 waves, 64 rows); K parts (8 waves,
# 2 parts, 3 blocks: uneven); several m-tiles a wave (2 waves); a single wave of a 32-row tile
CASES = [(n, r, w, K, S, tm) for n in ATOMS for (r, w, K, S, tm) in
         [(2, 4, 1024, 2, 64), (8, 8, 768, 2, 64), (4, 2, 512, 1, 64), (1, 1, 256, 1, 32)]]


@pytest.mark.parametrize("name,rows,waves,K,S,tile_m", CASES,
                         ids=[f"{c[0].split('_')[0]}-r{c[1]}-w{c[2]}-K{c[3]}" for c in CASES])
def test_tile_matches_float64(name, rows, waves, K, S, tile_m):
    _, err = run_tile(name, rows, waves=waves, K=K, S=S, tile_m=tile_m)
    assert err <= REL_TOL, err


@pytest.mark.parametrize("name", ATOMS)
def test_runtime_ring_and_identical_bits_in_every_mode(name, monkeypatch):
    """More blocks a wave than loads in flight: the runtime ring loop (depth 2 here)."""
    monkeypatch.setattr(MT, "LOADS_IN_FLIGHT", 2 * MT.tiling(name, 8).loads_per_block)
    outs = []
    for mode in ("inorder", "random", "relaxed"):
        out, err = run_tile(name, 8, waves=4, K=1024, S=1, mode=mode)
        assert err <= REL_TOL, (mode, err)
        outs.append(out)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


@pytest.mark.parametrize("name", ATOMS)
def test_unsplit_activations_miss_the_tolerance(name):
    """parts=1 keeps only the bf16 head of x * g (truncated): ~2^-9 relative per value."""
    _, err = run_tile(name, 4, waves=4, parts=1)
    assert err > 30 * REL_TOL, err


# ------------------------------------------------- bf16 weights, bf16 activations, short tiles

ABI_BF = ABI(w=Ptr(bf16), x=Ptr(bf16), out=Ptr(f32, readonly=False))


def bf16_body(k, *, N, K, R, tile_m, atom_name):
    """One CTA: out[r, n] = sum_k W[n, k] x[r, k], W bf16 [N, K] unscaled (N <= tile_m: the
    tile's rows past N read row N - 1, their outputs masked), x bf16 staged as it is."""
    a = k.args
    T = MT.tiling(atom_name, R, 1)
    act = k.lds("act", u32, MT.act_lds_words(T, K))
    split = MT.WaveSplit.of(tile_m, T.atom.m, k.W)
    red = k.lds("red", f32, k.W * k.L * T.atom.c_slots) if split.kparts > 1 else None

    def stage():
        pending = MT.load_activations(k, T, K, lambda r, kk, m: k.load(a.x, r * K + kk, bf16, 8,
                                                                          mask=m))

        def finish():
            MT.store_activations(k, T, act, K, pending, lambda v: v)
            k.barrier()
        return finish

    def emit(m, r, v, mask):
        for i in range(v.n):
            k.store(a.out, r * N + m + i, v[i] if v.n > 1 else v, mask=mask & (m + i < N))

    MT.project(k, T, w=a.w, w_stride=K, w_dtype=bf16, scale=None, scale_stride=0, row0=0,
               k0=0, kb0=0, blocks=K // MT.BLOCK, tile_m=tile_m, lds=act, chunk=K, stage=stage,
               emit=emit, red=red, w_rows=N)


@pytest.mark.parametrize("name", ATOMS)
@pytest.mark.parametrize("rows,waves,N,K,tile_m", [(8, 4, 4, 384, 16), (2, 2, 32, 512, 32),
                                                   (4, 8, 20, 256, 32)])
def test_bf16_weights_and_activations(name, rows, waves, N, K, tile_m):
    """bf16 W (no scale; loaded words fed as they are), bf16 x (parts=1, exact), a tile wider
    than the weights (rows clamped, outputs masked): within REL_TOL of float64, every output
    written, the same bits in every interpreter mode."""
    L = get_atom(name).group
    kern = build_kernel("tile_bf16", bf16_body, abi=ABI_BF, target="interp", waves=waves,
                        wave_size=L, N=N, K=K, R=rows, tile_m=tile_m, atom_name=name)
    rng = np.random.default_rng(N + K)
    cv = numerics.convert
    w = cv(rng.standard_normal((N, K)) * 0.05, "f64", bf16)
    x = cv(rng.standard_normal((rows, K)) * 3.0, "f64", bf16)
    ref = numerics.to_f64(x, bf16) @ numerics.to_f64(w, bf16).T
    outs = []
    for mode in ("inorder", "random", "relaxed"):
        inp = dict(w=w, x=x, out=np.full((rows, N), np.nan, np.float32))
        interp.run(kern, inp, grid=1, mode=mode, seed=3)
        out = inp["out"]
        assert not np.isnan(out).any(), "unwritten sums"
        err = np.abs(out - ref).max() / np.abs(ref).max()
        assert err <= REL_TOL, (mode, err)
        outs.append(out)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


# ------------------------------------------------------------------------- the chips' code

def _front_asm(chip, rows=8):
    from monokernel.backend.toolchain import compile_amdgcn_asm
    from monokernel.build import build_many
    from spec import BuildSpec
    from stages import front as F
    L = F.front_launch(BuildSpec.make("glm5", rows=rows, kv="fp8", target=chip))
    a = build_many([L.kernel(chip)])[0]
    return L, a, compile_amdgcn_asm(a.llvm_ir, chip)


@pytest.mark.parametrize("chip,mnemonic", [("gfx950", "v_mfma_f32_16x16x32_bf16"),
                                           ("gfx942", "v_mfma_f32_16x16x16_bf16")])
def test_front_projection_isa(chip, mnemonic):
    pytest.importorskip("elftools", reason="pyelftools reads the code objects' notes")
    L, a, asm = _front_asm(chip)
    p = L.plan
    T = MT.tiling(MT.PROJ_ATOMS[chip], p.rows)
    sp = MT.WaveSplit.of(64, 16, p.waves)
    blocks = -(-(p.chunk // MT.BLOCK) // sp.kparts)
    body = [s.split(";")[0].strip() for s in asm.splitlines()]
    mf = [i for i, s in enumerate(body) if s.startswith("v_mfma")]
    assert mf and all(body[i].startswith(mnemonic + " ") for i in mf)
    assert len(mf) == sp.per_wave * blocks * T.chunks * T.passes
    nt = [i for i, s in enumerate(body) if re.match(r"global_load_dwordx4\b.*\bnt\b", s)]
    assert len(nt) == sp.per_wave * blocks * T.loads_per_block
    assert max(nt) < min(mf), "every weight load is issued before the first MFMA"
    f = a.figures()
    assert f["vgpr_spill"] == 0 and f["sgpr_spill"] == 0 and f["scratch"] == 0, f
