"""gfx950 code objects run in tinygrad's CDNA4 emulator, checked against the interpreter.

Each proof kernel is built for gfx950 at its small (CI) shapes, run in the emulator
(monokernel/launch/emulator.py) and, on copies of the same inputs, in the interpreter
(in-order mode), which defines what every op means. Integer and moved data must agree bit
for bit; float sums too where the order of the sum is fixed by the kernel (butterflies,
per-lane fma chains: both run the same f32 operations in the same order). Only MFMA results
may differ: the emulator accumulates the K products in f32 one after another, the
interpreter rounds the float64 product once, so they agree within the f32 error bound of a
K-term sum, |d| <= (K + 1) * 2^-24 * (sum_k |a_ik b_kj| + |c_ij|). Each kernel is also
checked against its float64 reference with the proof's own tolerance.

Kernels that cannot run in the emulator, and why:
- handoff on more than one CTA as built: CTA c polls CTA c-1's mailbox, and the emulator
  runs workgroups one after another (CTA 0 would spin on CTA ctas-1, which runs last). One
  CTA (handing to itself) runs; so do several CTAs when CTA ctas-1's mailbox is seeded
  beforehand with exactly what it will publish (an order-safe launch: every consumer then
  finds its producer's data already there).
- handoff's no-release / no-acquire mutations: the emulator is sequentially consistent, so
  it cannot tell them from the fenced kernel (that is the interpreter's relaxed mode's job).
- any kernel reading `num_ctas`: it lowers to the code object v5 hidden argument
  hidden_block_count_x, which the emulator's dispatch does not fill (reads as zero). The
  proof kernels take the CTA count as an explicit argument instead.
- wave32 builds and the NVIDIA atoms (gemv_mma's mma.sync, wgmma): gfx950 is wave64 only,
  and those atoms do not exist there.
- gfx942 code objects: the emulator models CDNA4 only (CDNA3 reads fnuz fp8 and has no
  permlane swaps), so the gfx942 builds are checked by test_amdgcn_build.py alone.

What the runner adjusts at run time (monokernel/launch/emulator.py says why; never in
tinygrad's files): v_permlane16/32_swap routed through the emulator's cross-lane pseudocode
path; ds_swizzle_b32 emulated from the ISA's definition (the CDNA pseudocode is prose); DPP
source lanes read before the destination is written; buffer_wbl2 / buffer_inv as no-ops;
FLAT/GLOBAL atomics return their old value (CDNA's `sc0` read where the emulator reads
`glc`); the 64-bit compare-and-swap reads its 4-VGPR operand; LDS instructions leave
inactive lanes' addresses alone.
"""
from __future__ import annotations

import numpy as np
import pytest

from monokernel import interp, numerics
from monokernel.atoms import amd as amd_atoms
from monokernel.atoms import atom as atom_of
from monokernel.dsl import build_kernel
from monokernel.ir import ABI, Ptr
from monokernel.launch import emulator
from monokernel.proofs import PROOFS, crosslane, gemv, handoff, rmsnorm
from monokernel.types import f32, i32

pytestmark = pytest.mark.emulator


@pytest.fixture(scope="module")
def emu():
    ok, why = emulator.available()
    if not ok:
        pytest.skip(why)
    try:
        emulator.load_tinygrad()
    except emulator.EmulatorUnavailable as e:
        pytest.skip(str(e))
    return emulator


def _copy(args):
    return {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}


def _run_both(emu, kernel, args, grid):
    """(emulator's arrays, interpreter's arrays) after running `kernel` on copies of `args`."""
    got, exp = _copy(args), _copy(args)
    emu.run(kernel, got, grid=grid)
    interp.run(kernel, exp, grid=grid, mode="inorder")
    return got, exp


def _assert_same_bits(got, exp, names):
    for n in names:
        a, b = got[n], exp[n]
        assert a.dtype == b.dtype
        if not np.array_equal(a.view(np.uint8), b.view(np.uint8)):
            bad = np.flatnonzero(a.reshape(-1) != b.reshape(-1))
            first = bad[:8]
            raise AssertionError(f"{n}: {bad.size} of {a.size} elements differ; first at {first}: "
                                 f"emulator {a.reshape(-1)[first]} "
                                 f"interpreter {b.reshape(-1)[first]}")


# ----------------------------------------------------------------------- proof kernels

def test_crosslane_bit_exact(emu, rng):
    kern = PROOFS["crosslane"].build("gfx950", **PROOFS["crosslane"].small)
    inp = crosslane.make_inputs(rng, L=64)
    got, exp = _run_both(emu, kern, inp, grid=1)
    # every row, the f32 butterfly sum included: same operations in the same order
    _assert_same_bits(got, exp, ["ints", "floats"])
    ints_ok, floats_ok, sum_err = crosslane.check(got, crosslane.reference(got, L=64), L=64)
    assert ints_ok and floats_ok and sum_err <= crosslane.SUM_REL_TOL


def test_rmsnorm_bit_exact(emu, rng):
    p = PROOFS["rmsnorm"]
    R = 3
    kern = p.build("gfx950", **p.small)
    inp = rmsnorm.make_inputs(rng, R=R, D=p.small["D"])
    got, exp = _run_both(emu, kern, inp, grid=R)
    _assert_same_bits(got, exp, ["out", "x", "w"])
    assert rmsnorm.check(got, rmsnorm.reference(got)) <= rmsnorm.REL_TOL


def test_gemv_fp8_bit_exact(emu, rng):
    p = PROOFS["gemv_fp8"]
    ctas = 3  # rows are strided over the grid's waves: 3 CTAs x 2 waves over N = 256
    kern = p.build("gfx950", **p.small)
    inp = gemv.make_inputs(rng, **p.small, fp8="fp8e4m3fn", ctas=ctas)
    got, exp = _run_both(emu, kern, inp, grid=ctas)
    assert not np.isnan(got["y"]).any(), "unwritten outputs"
    _assert_same_bits(got, exp, ["y"])
    ref = gemv.reference(got, **p.small, fp8="fp8e4m3fn")
    assert gemv.check(got, ref) <= gemv.REL_TOL


def test_handoff_one_cta_hands_to_itself(emu):
    p = PROOFS["handoff"]
    kern = p.build("gfx950", **p.small)
    inp = handoff.make_inputs(None, ctas=1, **p.small, tag=5)
    got, exp = _run_both(emu, kern, inp, grid=1)
    _assert_same_bits(got, exp, ["mbox", "bulk", "counters", "out_pairs", "out_bulk", "err"])
    assert all(handoff.check(got, handoff.reference(got, ctas=1, **p.small)).values())


def test_handoff_order_safe_multi_cta(emu):
    """Several CTAs, run one after another: CTA ctas-1's mailbox (read by CTA 0, which runs
    first) is seeded with what CTA ctas-1 will publish; every later consumer's producer has
    already run. Checks the cross-CTA indexing, the 64-bit tagged stores and the polls."""
    p = PROOFS["handoff"]
    ctas, pairs, bulk, tag = 4, p.small["pairs"], p.small["bulk"], 5
    kern = p.build("gfx950", **p.small)
    inp = handoff.make_inputs(None, ctas=ctas, pairs=pairs, bulk=bulk, tag=tag)
    last = ctas - 1
    j = np.arange(pairs)
    values = np.array([handoff.pair_value(last, x, tag) for x in j], np.uint64)
    inp["mbox"][last * pairs:(last + 1) * pairs] = values | (np.uint64(tag) << np.uint64(32))
    inp["bulk"][last * bulk:(last + 1) * bulk] = [handoff.bulk_value(last, x, tag)
                                                  for x in range(bulk)]
    inp["counters"][last] = tag
    got, exp = _run_both(emu, kern, inp, grid=ctas)
    _assert_same_bits(got, exp, ["mbox", "bulk", "counters", "out_pairs", "out_bulk", "err"])
    ref = handoff.reference(got, ctas=ctas, pairs=pairs, bulk=bulk)
    assert all(handoff.check(got, ref).values())


# ----------------------------------------------------------------------- MFMA atoms

GFX950_ATOMS = [a for a in amd_atoms.ATOMS if "gfx950" in a.targets]


def _atom_body(k, *, atom):
    """Each lane loads its A, B and C fragments (lane-major, in the atom's slot order), runs
    the atom once and stores its D fragment: the emulator reads the fragments through the
    hardware's lane maps, the interpreter through the atom's."""
    a, lane = k.args, k.lane_id()

    def frag(p, n, dt):
        per = 16 // dt.bytes  # at most 16 bytes per lane per load
        if n <= per:
            return k.load(p, lane * n, dt, n)
        parts = [k.load(p, lane * n + i, dt, per) for i in range(0, n, per)]
        return k.vec(*[e for q in parts for e in k.split(q)])

    A = frag(a.a, atom.a_slots, atom.a_dtype)
    B = frag(a.b, atom.b_slots, atom.b_dtype)
    C = k.load(a.c, lane * atom.c_slots, f32, atom.c_slots)
    k.store(a.d, lane * atom.c_slots, k.mma(atom, A, B, C))


def _atom_bound(atom, inp):
    """Per-element f32 error bound of a K-term sum: (K + 1) * 2^-24 * (sum |a b| + |c|)."""
    A = np.zeros((atom.M, atom.K))
    B = np.zeros((atom.K, atom.N))
    C = np.zeros((atom.M, atom.N))
    A[atom.a_rows(), atom.a_cols()] = numerics.to_f64(inp["a"].reshape(64, -1), atom.a_dtype)
    B[atom.b_rows(), atom.b_cols()] = numerics.to_f64(inp["b"].reshape(64, -1), atom.b_dtype)
    C[atom.c_rows(), atom.c_cols()] = inp["c"].reshape(64, -1)
    mag = np.abs(A) @ np.abs(B) + np.abs(C)
    return ((atom.K + 1) * 2.0 ** -24 * mag)[atom.c_rows(), atom.c_cols()].reshape(-1)


@pytest.mark.parametrize("atom", GFX950_ATOMS, ids=lambda a: a.name)
def test_mfma_atom_matches_interpreter(emu, atom, rng):
    abi = ABI(a=Ptr(atom.a_dtype), b=Ptr(atom.b_dtype), c=Ptr(f32), d=Ptr(f32))
    kern = build_kernel("mma_atom", _atom_body, abi=abi, target="gfx950", waves=1, atom=atom)
    inp = dict(a=numerics.convert(rng.standard_normal(64 * atom.a_slots) * 4, "f64", atom.a_dtype),
               b=numerics.convert(rng.standard_normal(64 * atom.b_slots) * 4, "f64", atom.b_dtype),
               c=rng.standard_normal(64 * atom.c_slots).astype(np.float32),
               d=np.full(64 * atom.c_slots, np.nan, np.float32))
    got, exp = _run_both(emu, kern, inp, grid=1)
    assert not np.isnan(got["d"]).any(), "unwritten outputs"
    err = np.abs(got["d"].astype(np.float64) - exp["d"])
    bound = _atom_bound(atom, inp)
    worst = int(np.argmax(err / bound))
    assert (err <= bound).all(), (f"{atom.name}: element {worst} (lane {worst // atom.c_slots}, "
                                  f"slot {worst % atom.c_slots}) emulator {got['d'][worst]} "
                                  f"interpreter {exp['d'][worst]} bound {bound[worst]:.3g}")


def _mma_proofs():
    return [name for name, p in PROOFS.items() if name.startswith("mma_") and "gfx950" in p.targets]


@pytest.mark.parametrize("name", _mma_proofs() or ["(none)"])
def test_mma_proof_kernels(emu, name, rng):
    """The registry's gfx950 MMA proof kernels (monokernel/proofs/mma.py: row-major A, B, C
    gathered and D scattered through the atom's maps on the host's index tables): index
    tables and inputs unchanged, D within the f32 bound of the interpreter's and within the
    proof's tolerance of the float64 reference."""
    if name == "(none)":
        pytest.skip("monokernel/proofs/mma.py registers no gfx950 MMA proof kernels")
    from monokernel.proofs import mma
    atom_name = name[len("mma_"):]
    at = atom_of(atom_name)
    p = PROOFS[name]
    kern = p.build("gfx950", **p.small)
    inp = mma.make_inputs(rng, atom_name)
    got, exp = _run_both(emu, kern, inp, grid=1)
    _assert_same_bits(got, exp, ["a", "b", "c", "a_idx", "b_idx", "c_idx"])
    assert not np.isnan(got["d"]).any(), "unwritten outputs"
    A = numerics.to_f64(inp["a"], at.a_dtype).reshape(at.M, at.K)
    B = numerics.to_f64(inp["b"], at.b_dtype).reshape(at.K, at.N)
    mag = np.abs(A) @ np.abs(B) + np.abs(inp["c"].reshape(at.M, at.N))
    bound = ((at.K + 1) * 2.0 ** -24 * mag).reshape(-1)
    err = np.abs(got["d"].astype(np.float64) - exp["d"])
    worst = int(np.argmax(err / bound))
    assert (err <= bound).all(), (f"{name}: D[{worst // at.N}][{worst % at.N}] emulator "
                                  f"{got['d'][worst]} interpreter {exp['d'][worst]} "
                                  f"bound {bound[worst]:.3g}")
    assert mma.check(got, mma.reference(got, atom_name), atom_name) <= mma.tolerance(atom_name)


# ----------------------------------------------------------------------- the runner itself

def _raw_kernel(emu, name, ir_body):
    """A 64-lane kernel x -> y written directly in LLVM IR (for instructions our backend
    does not emit), with a DSL kernel of the same ABI standing in for the launch data."""
    from monokernel.backend.amdgcn import AMDGCNHooks
    from monokernel.backend.toolchain import Job, compile_many
    def copy(k):
        k.store(k.args.y, k.lane_id(), k.load(k.args.x, k.lane_id(), i32))
    stub = build_kernel(name, copy, abi=ABI(x=Ptr(i32), y=Ptr(i32)), target="gfx950", waves=1)
    attrs = AMDGCNHooks("gfx950").kernel_attrs(stub)
    ir = f"""target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.mbcnt.lo(i32, i32)
declare i32 @llvm.amdgcn.mbcnt.hi(i32, i32)
declare {{ i32, i32 }} @llvm.amdgcn.permlane16.swap(i32, i32, i1, i1)
declare {{ i32, i32 }} @llvm.amdgcn.permlane32.swap(i32, i32, i1, i1)
define amdgpu_kernel void @{name}(ptr addrspace(1) %x, ptr addrspace(1) %y) #0 {{
  %lo = call i32 @llvm.amdgcn.mbcnt.lo(i32 -1, i32 0)
  %lane = call i32 @llvm.amdgcn.mbcnt.hi(i32 -1, i32 %lo)
  %px = getelementptr i32, ptr addrspace(1) %x, i32 %lane
  %v = load i32, ptr addrspace(1) %px
  %w = add i32 %v, 1000
{ir_body}
  ret void
}}
!llvm.module.flags = !{{!0}}
!0 = !{{i32 1, !"amdhsa_code_object_version", i32 500}}
attributes #0 = {{ {attrs} }}
"""
    code = compile_many([Job(ir, "gfx950")])[0]
    return emu.EmuKernel(stub, code)


@pytest.mark.parametrize("width", [16, 32])
def test_permlane_swap_adjustment_follows_the_isa(emu, width):
    """v_permlaneN_swap_b32 vdst, vsrc (CDNA4 ISA): for each pair of N-lane rows (2r, 2r+1),
    vsrc's row 2r trades places with vdst's row 2r+1. Both results are stored, so the
    adjustment is checked on both registers, not only on what lane_swap(32) reads."""
    swap = f"@llvm.amdgcn.permlane{width}.swap"
    body = f"""  %pair = call {{ i32, i32 }} {swap}(i32 %v, i32 %w, i1 false, i1 false)
  %d = extractvalue {{ i32, i32 }} %pair, 0
  %s = extractvalue {{ i32, i32 }} %pair, 1
  %mix = shl i32 %s, 16
  %out = or i32 %mix, %d
  %py = getelementptr i32, ptr addrspace(1) %y, i32 %lane
  store i32 %out, ptr addrspace(1) %py"""
    ek = _raw_kernel(emu, f"swap{width}", body)
    x = np.arange(64, dtype=np.int32)
    y = np.zeros(64, np.int32)
    ek(dict(x=x, y=y))
    lane = np.arange(64)
    upper = (lane // width) % 2 == 1
    # vdst (old: x) takes vsrc's (old: x + 1000) lower row into its upper rows; vsrc's lower
    # rows take vdst's upper row
    d = np.where(upper, x[lane - width] + 1000, x)
    s = np.where(upper, x + 1000, x[np.minimum(lane + width, 63)])
    np.testing.assert_array_equal(y, (s << 16) | d)


@pytest.mark.parametrize("mask", [1, 2, 4, 8, 16, 32])
def test_lane_swap_each_mask_in_place(emu, mask):
    """lane_swap alone (its source dead afterwards, so DPP may write in place)."""
    def body(k):
        lane = k.lane_id()
        k.store(k.args.y, lane, k.lane_swap(k.load(k.args.x, lane, i32), mask))
    kern = build_kernel("swap", body, abi=ABI(x=Ptr(i32), y=Ptr(i32)), target="gfx950", waves=1)
    x = (np.arange(64, dtype=np.int32) * 7919) ^ 0x55
    y = np.zeros(64, np.int32)
    emu.run(kern, dict(x=x, y=y))
    np.testing.assert_array_equal(y, x[np.arange(64) ^ mask])


def test_swizzle_source_lane_modes():
    sw = emulator.swizzle_source_lane
    assert [sw(0x1F | (4 << 10), i) for i in range(8)] == [4, 5, 6, 7, 0, 1, 2, 3]
    assert sw(0x1F | (16 << 10), 33) == 49  # bit-mask mode stays in its 32-lane half
    assert [sw(0x8000 | 0b00011011, i) for i in range(4)] == [3, 2, 1, 0]  # quad-permute
    assert sw(0x00 | (1 << 5), 40) == 33  # and 0, or 1: every lane of a half reads its lane 1


@pytest.mark.emulator
def test_emulator_64bit_compare_and_swap_matches_the_interpreter():
    """global_atomic_cmpswap_x2 compares memory with DATA[127:64] and swaps in DATA[63:0],
    returning the old value (the runner's adjustments 5 and 6: as shipped, the emulator read
    one VGPR of the 4-VGPR operand and never wrote the return, reading `glc` where CDNA has
    `sc0`; the indexer's multi-publisher bulk counter, a 64-bit CAS loop, spun forever)."""
    from monokernel import interp
    from monokernel.dsl import ABI, Ptr, build_kernel
    from monokernel.launch import emulator
    from monokernel.types import u64
    ok, why = emulator.available()
    if not ok:
        pytest.skip(why)

    def body(k):
        a = k.args
        for i, (new, cmp) in enumerate(((5, 0), (9, 5), (11, 3))):
            k.store(a.out, i, k.atomic("cas", a.c, 0, k.const(new, u64), compare=k.const(cmp, u64)))
    got = {}
    for target in ("interp", "gfx950"):
        kern = build_kernel("cas64", body, abi=ABI(c=Ptr(u64), out=Ptr(u64)), target=target)
        args = dict(c=np.zeros(1, np.uint64), out=np.zeros(3, np.uint64))
        if target == "interp":
            interp.run(kern, args)
        else:
            emulator.run(kern, args, grid=1)
        got[target] = (args["c"].tolist(), args["out"].tolist())
    assert got["interp"] == ([9], [0, 5, 9])
    assert got["gfx950"] == got["interp"]


@pytest.mark.emulator
@pytest.mark.parametrize("dt", ["u64", "i64", "u32", "i32"])
def test_returning_atomics_match_the_interpreter(emu, dt):
    """Every DSL atomic (add, max, min, cas, exch, or, and) at 32 and 64 bits, 64 lanes on 4
    slots with per-lane values (a third of the CAS compares hit): the memory and every lane's
    returned old value agree with the interpreter (both visit lanes in order). As shipped, no
    CDNA FLAT/GLOBAL atomic returned its old value (adjustment 5)."""
    from monokernel import types as mt
    T = getattr(mt, dt)
    rng = np.random.default_rng(7)
    big = 1 << (62 if T.bits == 64 else 30)
    vals = rng.integers(-big, big, 64).astype(np.dtype(f"i{T.bits // 8}")).view(T.np)
    c0 = vals[:4][::-1].copy()
    cmps = np.where(np.arange(64) % 3 == 0, np.resize(c0, 64), vals[::-1]).astype(T.np)
    slot = (np.arange(64) % 4).astype(np.int32)
    for op in ("add", "max", "min", "cas", "exch", "or", "and"):
        def body(k, op=op):
            a = k.args
            t = k.thread_id()
            kw = {"compare": k.load(a.cmps, t, T)} if op == "cas" else {}
            k.store(a.out, t, k.atomic(op, a.c, k.load(a.slot, t, i32), k.load(a.vals, t, T),
                                       **kw))
        abi = ABI(c=Ptr(T), vals=Ptr(T), cmps=Ptr(T), slot=Ptr(i32), out=Ptr(T))
        got = {}
        for target in ("interp", "gfx950"):
            kern = build_kernel(f"atomic_{op}_{dt}", body, abi=abi, target=target)
            args = dict(c=c0.copy(), vals=vals.copy(), cmps=cmps.copy(), slot=slot.copy(),
                        out=np.zeros(64, T.np))
            if target == "interp":
                interp.run(kern, args)
            else:
                emu.run(kern, args, grid=1)
            got[target] = (args["c"].tolist(), args["out"].tolist())
        assert got["gfx950"] == got["interp"], op


@pytest.mark.emulator
@pytest.mark.parametrize("rows,keys", [(2, 300), (4, 190)])
def test_index_scoring_one_cta_matches_the_interpreter(emu, rows, keys):
    """The gfx950 code object of the `index_scoring` launch (projections, cache append,
    scoring, score histogram) on ONE CTA, so no CTA waits on another (the emulator runs
    workgroups one after another); the table's grid word is 0, as the emulator reads
    num_ctas (an unfilled code object v5 hidden argument). Against the interpreter: the
    appended cache, the error word and every arena byte agree exactly (mailboxes, tags, the
    FP8 queries, the new key, the histogram), except the f32 values the MFMAs sum in another
    order than the interpreter: the projections' partial sums, the head weights built from
    them and the `scores`, each within 2^-20 of its region's largest value (seen: 2^-22 or
    less), with non-finite values identical. It also needs adjustment 7 (the histogram's ds_add_u32 runs
    with lanes masked off whose address register holds a score)."""
    from spec import BuildSpec
    from stages import index as ix
    from stages.index import index_scoring_launch
    from stages.index_ref import make_inputs
    spec = BuildSpec.make("tiny", rows=rows, target="interp")
    L = index_scoring_launch(spec, chip="gfx950", grid=1, capacity=512, cache_pages=16)
    inp = make_inputs(L.plan, np.random.default_rng(rows), [(rows, keys - rows)])
    emu_inp = {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()}
    arena_int, arena_emu = L.new_arena(), L.new_arena()
    ref = L.run_interp(inp, arena=arena_int, step=0)
    lk = L.linked("gfx950")
    table = L.table.data.copy()
    table[1] = 0
    err = lk.error_word()
    args = lk.args(arena=arena_emu, table=table, err=err, tag=L.tag(0), **L._buffers(emu_inp))
    emu.run(lk.kernel, args, grid=1)
    assert int(err[0]) == 0
    assert ref.outputs, "the launch has outputs"
    for name, v in ref.outputs.items():
        assert np.array_equal(args[name].view(np.uint8), v.view(np.uint8)), name
    # the projections' f32 partial sums (bf16 MFMA, another summation order than the
    # interpreter's) and the head weights built from them: within 2^-20 of the region's
    # largest value (seen: 1.4e-7 = 2^-22.8); everything else byte for byte -- including the
    # FP8 queries and the new key (words and scale), which those sums round into
    from layouts.decode import decode
    mma_sums = {"ix_qpart", "ix_kpart"}
    for p in L.arena:
        if p.name == "scores":
            continue
        a, b = (arena[p.offset:p.offset + p.nbytes] for arena in (arena_emu, arena_int))
        if p.name in mma_sums:
            fe, fi = (decode(L.arena, x, p.name).astype(np.float64) for x in (arena_emu, arena_int))
            assert np.abs(fe - fi).max() <= 2.0 ** -20 * np.abs(fi).max(), p.name
        elif p.name == "ix_nb":
            de, di = decode(L.arena, arena_emu, p.name), decode(L.arena, arena_int, p.name)
            assert de.counter_word == di.counter_word
            w0 = ix.NW0  # a row's key words and scale bits, then its f32 head weights
            assert np.array_equal(de.data[:, :w0], di.data[:, :w0])
            we, wi = (d.data[:, w0:].view(np.float32).astype(np.float64) for d in (de, di))
            assert np.abs(we - wi).max() <= 2.0 ** -20 * np.abs(wi).max()
        else:
            assert np.array_equal(a, b), p.name
    sc = next(p for p in L.arena if p.name == "scores")
    lo, hi = sc.offset, sc.offset + sc.nbytes
    se, si = arena_emu[lo:hi].view(np.float32), arena_int[lo:hi].view(np.float32)
    assert np.array_equal(np.isnan(se), np.isnan(si))
    ok = np.isfinite(si)
    assert np.array_equal(se[~ok].view(np.uint32), si[~ok].view(np.uint32))
    d = np.abs(se[ok].astype(np.float64) - si[ok])
    # normwise: the head weights (f32, from the MFMA partial sums above) enter every score,
    # so a small score can move by the weights' error times the row's relu sum (seen: 7.6e-6
    # on scores up to ~42, i.e. 2^-22.4 of the largest)
    tol = 2.0 ** -20 * max(1.0, float(np.abs(si[ok]).max()))
    assert np.all(d <= tol), f"scores differ by up to {d.max():.3g} (tol {tol:.3g})"


def test_relu_bf16x2_generic_lowering_matches_the_interpreter(emu):
    """The IR op relu_bf16x2 through the generic LLVM lowering (llvm.maximum + fptrunc, what
    AMD targets get; sm_90a has its own cvt): gfx950 machine code on signed zeros, NaN,
    infinities and bf16 ties equals the interpreter's bits, up to the op's contract (any bf16
    NaN for a NaN, either zero for a zero). It found the emulator's v_maximum3_f32 returning
    the other operand for a NaN (runtime adjustment 8 of monokernel.launch.emulator)."""
    from monokernel.dsl import build_kernel
    from monokernel.ir import ABI, Ptr
    from monokernel.types import f32, u32
    from test_nvptx import _relu_pack_args, _relu_pack_same

    def body(k):
        a = k.args
        i = k.cta_id() * k.L + k.lane_id()
        v = k.load(a.x, 2 * i, f32, 2)
        k.store(a.out, i, k.relu_bf16x2(k.extract(v, 0), k.extract(v, 1)))
    kern = build_kernel("relu_pack64", body, abi=ABI(x=Ptr(f32), out=Ptr(u32)),
                        target="gfx950", waves=1)
    args = _relu_pack_args(np.random.default_rng(3), 2)  # 2 x 32-lane sizes: one 64-lane CTA
    # the emulator runs with the host's FTZ/DAZ (monokernel.launch.emulator): no subnormals
    x = args["x"]
    x[(x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)] = 0.5
    got, exp = _run_both(emu, kern, args, grid=1)
    assert np.isnan(x).any() and (x == 0).any() and np.isinf(x).any()
    _relu_pack_same(got["out"], exp["out"])
