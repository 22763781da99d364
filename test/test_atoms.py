"""MMA atoms against ground truth.

Every expected table here is written independently of monokernel/atoms (loops over the
vendors' own wording), so a wrong layout in an atom cannot agree with it by construction.

* AMD CDNA3 maps: tables printed by AMD's matrix instruction calculator, committed in
  test/data/amd_calculator_tables.json (commands recorded there).
* AMD CDNA4-only instructions (the calculator, v1.3.2, has no CDNA4): rules from AMD's
  documentation, cited at each function.
* NVIDIA: fragment formulas of the PTX ISA (section 9.7.14.5 "Matrix Fragments for mma",
  section 9.7.15.5.1 for wgmma), transcribed as written there.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from monokernel import types as T
from monokernel.atoms import ATOMS, atom, atoms_for, smem_descriptor, wgmma_e4m3
from monokernel.atoms.base import is_bijection
from monokernel.atoms.nvidia import WGMMA_B_LBO, WGMMA_B_SBO, kmajor_interleave
from monokernel.layout import Layout, tabulate

CALC = json.loads((Path(__file__).parent / "data" / "amd_calculator_tables.json").read_text())["tables"]
ALL = list(ATOMS.values())


def reg_ops(a):
    return tuple(op for op in ("a", "b", "c") if not a.from_smem(op))


def expected(group, slots, fn):
    """rows[lane, slot], cols[lane, slot] from fn(lane, slot) -> (row, col)."""
    rows = np.zeros((group, slots), dtype=np.int64)
    cols = np.zeros((group, slots), dtype=np.int64)
    for lane in range(group):
        for s in range(slots):
            rows[lane, s], cols[lane, s] = fn(lane, s)
    return rows, cols


def check(a, op, rows, cols):
    assert a.slots(op) == rows.shape[1], (a.name, op)
    np.testing.assert_array_equal(a.rows(op), rows, err_msg=f"{a.name} {op} rows")
    np.testing.assert_array_equal(a.cols(op), cols, err_msg=f"{a.name} {op} cols")


# ---------------------------------------------------------------- structure, for every atom

@pytest.mark.parametrize("a", ALL, ids=lambda a: a.name)
def test_maps_are_bijections(a):
    for op in reg_ops(a):
        r, c = a.shape(op)
        assert a.layout(op)[0].size() == a.group
        assert a.slots(op) * a.group == r * c
        assert is_bijection(a.layout(op), r * c), (a.name, op)
        seen = np.zeros((r, c), dtype=int)
        np.add.at(seen, (a.rows(op), a.cols(op)), 1)
        assert (seen == 1).all(), (a.name, op)  # every (row, col) exactly once
        lane, slot = a.owner(op)
        assert (a.rows(op)[lane, slot] == np.arange(r)[:, None]).all()
        assert (a.cols(op)[lane, slot] == np.arange(c)[None, :]).all()


@pytest.mark.parametrize("a", ALL, ids=lambda a: a.name)
def test_numpy_reconstruction(a):
    """Scatter random A, B into lanes through the maps, compute every D slot from what the
    lanes hold, and compare with the float64 matmul. (An SS wgmma's A has no lane map: its
    LDS placement is test_wgmma_ss_reads_a_from_lds_through_the_descriptor's.)"""
    if a.a_smem is not None:
        pytest.skip(f"{a.name} reads A from shared memory")
    rng = np.random.default_rng(0)
    A = rng.integers(-8, 8, size=(a.m, a.k)).astype(np.float64)
    B = rng.integers(-8, 8, size=(a.k, a.n)).astype(np.float64)
    C = rng.integers(-8, 8, size=(a.m, a.n)).astype(np.float64)
    a_regs, c_regs = a.to_lanes("a", A), a.to_lanes("c", C)
    assert a_regs.shape == (a.group, a.a_slots)
    if a.b_source == "smem":
        b_src = a.b_to_smem(B)
        np.testing.assert_array_equal(a.b_from_smem(b_src), B)
        b_at = a.b_from_smem(b_src)
    else:
        b_src = a.to_lanes("b", B)
        np.testing.assert_array_equal(a.from_lanes("b", b_src), B)
        bl, bs = a.owner("b")
        b_at = b_src[bl, bs]
    np.testing.assert_array_equal(a.from_lanes("a", a_regs), A)
    # lane-by-lane, as an interpreter would: D[l, s] = sum_k A(i, k) B(k, j) + C[l, s]
    al, as_ = a.owner("a")
    i, j = a.c_rows(), a.c_cols()
    d = np.einsum("lsk,lsk->ls", a_regs[al, as_][i], b_at.T[j]) + c_regs
    np.testing.assert_array_equal(a.from_lanes("c", d), A @ B + C)
    np.testing.assert_array_equal(a.execute(a_regs, b_src, c_regs), d)


@pytest.mark.parametrize("a", ALL, ids=lambda a: a.name)
def test_register_packing(a):
    for op in reg_ops(a):
        per = 32 // a.dtype(op).bits if a.dtype(op).bits < 32 else 1
        assert a.slots_per_reg(op) == per
        assert a.regs(op) * per == a.slots(op)
        assert a.reg_bits(op, a.slots(op) - 1) == (a.regs(op) - 1, (per - 1) * a.dtype(op).bits)


# ---------------------------------------------------------------- AMD: calculator tables (CDNA3)

@pytest.mark.parametrize("name,instr", [
    ("gfx942_mfma_f32_16x16x32_fp8", "v_mfma_f32_16x16x32_fp8_fp8"),
    # same opcode on CDNA4; docs/amd-emulator.md: the CDNA4 emulator matches this table
    ("gfx950_mfma_f32_16x16x32_fp8", "v_mfma_f32_16x16x32_fp8_fp8"),
    ("gfx942_mfma_f32_16x16x16_bf16", "v_mfma_f32_16x16x16_bf16"),
])
def test_amd_maps_match_calculator(name, instr):
    a, tab = atom(name), CALC[instr]
    for op, key in (("a", "A"), ("b", "B"), ("c", "C"), ("c", "D")):
        check(a, op, np.array(tab[key]["rows"]), np.array(tab[key]["cols"]))


def test_amd_emulator_doc_rule_matches_calculator():
    # docs/amd-emulator.md: "A[i][k] in lane 16*(k//8)+i byte k%8; B[k][j] in lane
    # 16*(k//8)+j byte k%8; D[i][j] in lane 16*(i//4)+j register i%4."
    tab = CALC["v_mfma_f32_16x16x32_fp8_fp8"]
    for i in range(16):
        for k in range(32):
            lane, byte = 16 * (k // 8) + i, k % 8
            assert (tab["A"]["rows"][lane][byte], tab["A"]["cols"][lane][byte]) == (i, k)
            assert (tab["B"]["rows"][lane][byte], tab["B"]["cols"][lane][byte]) == (k, i)
    for i in range(16):
        for j in range(16):
            lane, reg = 16 * (i // 4) + j, i % 4
            assert (tab["D"]["rows"][lane][reg], tab["D"]["cols"][lane][reg]) == (i, j)


# ---------------------------------------------------------------- AMD: CDNA4-only instructions

def _cdna4_bf16_16x16x32(op):
    """v_mfma_f32_16x16x32_bf16: lane l holds row (A) / column (B) l % 16 and the 8
    consecutive K values [8*(l//16), +8), two per VGPR. Source: the CDNA4 16x16x32 rule
    shared with v_mfma_f32_16x16x32_fp8_fp8 (calculator table above) -- LLVM's
    IntrinsicsAMDGPU.td gives the bf16 form <8 x bfloat> per lane, Triton's gfx950 MFMA
    tests use kWidth = 8 for the 16x16x32 16-bit forms, and tinygrad's CDNA4 emulator
    (docs/amd-emulator.md) splits K into 4 contiguous lane-group quarters."""
    if op == "a":
        return lambda l, s: (l % 16, 8 * (l // 16) + s)
    if op == "b":
        return lambda l, s: (8 * (l // 16) + s, l % 16)
    return lambda l, s: (4 * (l // 16) + s, l % 16)


def _cdna4_f8f6f4_16x16x128(op):
    """v_mfma_scale_f32_16x16x128_f8f6f4 with fp8 A/B: 32 bytes per lane in 8 VGPRs; lane l
    holds row/column l % 16, bytes 0-15 are K [16*(l//16), +16) and bytes 16-31 the same
    +64. Source: AMD ROCm blog "Matrix Core Programming on AMD CDNA3 and CDNA4 architecture"
    (2025), section 5.4: for the 32x32x64 sibling lane l loads
    a_reg[i*16 + j] = A[l % 32][(l // 32)*16 + i*32 + j], i.e. 16-byte K chunks interleaved
    across the lane groups and repeated half a K later; with 16x16 tiles there are four
    lane groups, so the repeat is 64 on. An AMD-copyright mxfp8 GEMV (FlyDSL, run with
    non-unit block scales) loads "K [32*(g//2) + 16*(g%2), +16) and the same 64 on" =
    [16g, +16). The calculator (v1.3.2) does not know this instruction."""
    def k_of(l, s):
        return 64 * (s // 16) + 16 * (l // 16) + s % 16
    if op == "a":
        return lambda l, s: (l % 16, k_of(l, s))
    if op == "b":
        return lambda l, s: (k_of(l, s), l % 16)
    return lambda l, s: (4 * (l // 16) + s, l % 16)  # D: as every 16x16 MFMA


@pytest.mark.parametrize("name,rule,slots", [
    ("gfx950_mfma_f32_16x16x32_bf16", _cdna4_bf16_16x16x32, {"a": 8, "b": 8, "c": 4}),
    ("gfx950_mfma_f32_16x16x128_f8f6f4", _cdna4_f8f6f4_16x16x128, {"a": 32, "b": 32, "c": 4}),
])
def test_cdna4_maps_match_documentation(name, rule, slots):
    a = atom(name)
    for op in "abc":
        check(a, op, *expected(64, slots[op], rule(op)))


def test_amd_c_map_is_shared_by_all_16x16_mfma():
    c = CALC["v_mfma_f32_16x16x32_fp8_fp8"]["D"]
    for a in atoms_for("gfx950") + atoms_for("gfx942"):
        check(a, "c", np.array(c["rows"]), np.array(c["cols"]))


# ---------------------------------------------------------------- NVIDIA: PTX ISA formulas

def _ptx_m16n8k16_bf16(op):
    """PTX ISA 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point type"
    (.bf16 A: four .f16x2 registers a0..a7, B: two, C/D: four .f32)."""
    def f(lane, i):
        groupID, threadID_in_group = lane >> 2, lane % 4
        if op == "a":
            row = groupID if (0 <= i < 2 or 4 <= i < 6) else groupID + 8
            col = threadID_in_group * 2 + (i & 0x1) + (8 if i >= 4 else 0)
        elif op == "b":
            row = threadID_in_group * 2 + (i & 0x1) + (8 if i >= 2 else 0)
            col = groupID
        else:
            row = groupID if i < 2 else groupID + 8
            col = threadID_in_group * 2 + (i & 0x1)
        return row, col
    return f


def _ptx_m16n8k32_e4m3(op):
    """PTX ISA 9.7.14.5 "Matrix Fragments for mma.m16n8k32" (.e4m3 A: four .b32 with four
    elements each, a0..a15; B: two .b32, b0..b7; C/D: four .f32)."""
    def f(lane, i):
        groupID, threadID_in_group = lane >> 2, lane % 4
        if op == "a":
            row = groupID if (0 <= i < 4 or 8 <= i < 12) else groupID + 8
            col = threadID_in_group * 4 + (i & 0x3) + (16 if i >= 8 else 0)
        elif op == "b":
            row = threadID_in_group * 4 + (i & 0x3) + (16 if i >= 4 else 0)
            col = groupID
        else:
            row = groupID if i < 2 else groupID + 8
            col = threadID_in_group * 2 + (i & 0x1)
        return row, col
    return f


def _ptx_wgmma_m64nNk32(op):
    """PTX ISA 9.7.15.5.1.1.3 "Matrix Fragments for wgmma.mma_async.m64nNk32", Figures
    "WGMMA .m64nNk32 register fragment layout for matrix A" and "... for accumulator matrix
    D" (given as figures; transcribed: warp w = tid / 32 of the warpgroup owns rows
    16w..16w+15, inside which A is the mma.m16n8k32 A fragment and D repeats the m16n8 D
    fragment every 8 columns). Cross-checked with CUTLASS cute/atom/mma_traits_sm90_gmma.hpp
    ALayout_64x32 / CLayout_64xN."""
    def f(tid, i):
        warp, lane = tid // 32, tid % 32
        groupID, threadID_in_group = lane >> 2, lane % 4
        if op == "a":
            row = 16 * warp + groupID + (8 if (i >> 2) & 1 else 0)
            col = threadID_in_group * 4 + (i & 0x3) + (16 if i >= 8 else 0)
        else:
            row = 16 * warp + groupID + (8 if (i >> 1) & 1 else 0)
            col = (i >> 2) * 8 + threadID_in_group * 2 + (i & 0x1)
        return row, col
    return f


@pytest.mark.parametrize("name,rule", [
    ("sm90_mma_m16n8k16_bf16", _ptx_m16n8k16_bf16),
    ("sm90_mma_m16n8k32_e4m3", _ptx_m16n8k32_e4m3),
])
def test_mma_sync_maps_match_ptx(name, rule):
    a = atom(name)
    for op in "abc":
        check(a, op, *expected(32, a.slots(op), rule(op)))


@pytest.mark.parametrize("n", [8, 16, 32, 64, 128, 256])
def test_wgmma_maps_match_ptx(n):
    a = wgmma_e4m3(n)
    assert a.b_source == "smem" and a.b_slots == 0 and a.group == 128 and a.is_async
    check(a, "a", *expected(128, 16, _ptx_wgmma_m64nNk32("a")))
    check(a, "c", *expected(128, n // 2, _ptx_wgmma_m64nNk32("c")))
    with pytest.raises(ValueError):
        a.layout("b")


# ---------------------------------------------------------------- wgmma shared memory

def test_kmajor_layout_matches_ptx_example():
    # PTX ISA 9.7.15.5.1.2.1.3 "Canonical Layouts", example "K-Major, no-swizzling and tf32
    # type": exact layout ((8,2),(4,4)):((4,32),(1,64)) in elements, LBO = 64*sizeof(tf32),
    # SBO = 32*sizeof(tf32).
    lay = kmajor_interleave(16, 16, 4, lbo=64 * 4, sbo=32 * 4)
    doc = Layout(((8, 2), (4, 4)), ((4, 32), (1, 64)))
    np.testing.assert_array_equal(tabulate(lay), 4 * tabulate(doc))


@pytest.mark.parametrize("n", [8, 64, 256])
def test_wgmma_b_smem_offsets(n):
    b = wgmma_e4m3(n).b_smem
    assert (b.lbo, b.sbo, b.swizzle, b.major) == (WGMMA_B_LBO, WGMMA_B_SBO, 0, "K")
    tab = b.table()
    assert tab.shape == (32, n)
    for k in range(32):
        for col in range(n):
            # core matrix = 8 N-rows x 16 bytes; next core matrix along K: +LBO, along N: +SBO
            want = (col % 8) * 16 + (k % 16) + (k // 16) * b.lbo + (col // 8) * b.sbo
            assert tab[k, col] == want == b.offset(k, col)
    assert sorted(tab.ravel()) == list(range(32 * n))  # default LBO/SBO pack the tile densely


def test_wgmma_custom_strides():
    b = wgmma_e4m3(16, lbo=256, sbo=128).b_smem  # K core matrices far apart
    assert b.offset(16, 0) == 256 and b.offset(0, 8) == 128 and b.offset(3, 9) == 128 + 16 + 3


@pytest.mark.parametrize("n,lbo,sbo,start", [(64, 128, 256, 0), (16, 256, 128, 512), (8, 512, 1024, 48)])
def test_wgmma_reads_b_from_lds_through_the_descriptor(n, lbo, sbo, start):
    """What the interpreter does at wgmma completion: place B bytes where the PTX canonical
    layout says (core matrix = 8 rows x 16 bytes, +LBO along K, +SBO along N), then read B
    back through a descriptor carrying that start/LBO/SBO."""
    a = wgmma_e4m3(n)
    rng = np.random.default_rng(n)
    B = rng.integers(0, 256, size=(32, n), dtype=np.uint8)
    lds = np.zeros(start + 32 * n * 8, dtype=np.uint8)
    for k in range(32):
        for col in range(n):
            lds[start + (col % 8) * 16 + (col // 8) * sbo + (k % 16) + (k // 16) * lbo] = B[k, col]
    got = a.read_b_smem(lds, smem_descriptor(start, lbo, sbo))
    assert got.dtype == np.uint8 and got.shape == (32, n)
    np.testing.assert_array_equal(got, B)
    if (lbo, sbo) == (WGMMA_B_LBO, WGMMA_B_SBO):
        assert a.smem_descriptor(start) == smem_descriptor(start, lbo, sbo)
    with pytest.raises(ValueError):
        a.read_b_smem(lds[:start + 16], smem_descriptor(start, lbo, sbo))
    with pytest.raises(ValueError, match="swizzle mode 2 is not modelled"):
        a.read_b_smem(lds, smem_descriptor(start, lbo, sbo, swizzle=2))


@pytest.mark.parametrize("lbo,sbo,start", [(128, 256, 0), (1024, 128, 4096), (512, 1024, 48)])
def test_wgmma_ss_reads_a_from_lds_through_the_descriptor(lbo, sbo, start):
    """The SS form's A [64, 32]: its bytes placed where the PTX canonical K-major layout says
    (core matrix = 8 rows x 16 bytes, +LBO along K, +SBO along M), read back through a
    descriptor; the atom's own A placement is that layout at its LBO / SBO; the RS atom has
    no A in shared memory."""
    a = wgmma_e4m3(64, a_smem=True)
    assert a.a_slots == 0 and a.a_layout is None and a.name.endswith("_ss")
    rng = np.random.default_rng(lbo)
    A = rng.integers(0, 256, size=(64, 32), dtype=np.uint8)
    lds = np.zeros(start + 64 * 32 * 16, dtype=np.uint8)
    for m in range(64):
        for k in range(32):
            lds[start + (m % 8) * 16 + (m // 8) * sbo + (k % 16) + (k // 16) * lbo] = A[m, k]
    got = a.read_a_smem(lds, smem_descriptor(start, lbo, sbo))
    assert got.dtype == np.uint8 and got.shape == (64, 32)
    np.testing.assert_array_equal(got, A)
    t = a.a_smem.table()
    assert t.shape == (64, 32) and np.unique(t).size == 64 * 32
    assert a.a_smem_descriptor(start) == smem_descriptor(start, a.a_smem.lbo, a.a_smem.sbo)
    with pytest.raises(ValueError, match="A is not read from shared memory"):
        wgmma_e4m3(64).read_a_smem(lds, smem_descriptor(start, lbo, sbo))


def test_smem_descriptor_bits():
    d = smem_descriptor(0x1230, lbo=128, sbo=256)
    assert d & 0x3FFF == 0x1230 >> 4
    assert (d >> 16) & 0x3FFF == 128 >> 4
    assert (d >> 32) & 0x3FFF == 256 >> 4
    assert d >> 62 == 0 and (d >> 49) & 7 == 0
    assert (d >> 14) & 3 == 0 and (d >> 30) & 3 == 0 and (d >> 46) & 7 == 0
    # PTX ISA example "K-Major, no-swizzling and tf32": encoded LBO 16, SBO 8
    e = smem_descriptor(0, lbo=64 * 4, sbo=32 * 4)
    assert (e >> 16) & 0x3FFF == 16 and (e >> 32) & 0x3FFF == 8
    assert smem_descriptor(0, 0, 1024, swizzle=1) >> 62 == 1
    assert smem_descriptor((1 << 18) - 16, 16, 16) & 0x3FFF == 0x3FFF
    with pytest.raises(ValueError):  # a shared-window address is < 2**18 (228 KiB on H200)
        smem_descriptor(1 << 18, 128, 256)
    with pytest.raises(ValueError):
        smem_descriptor(0x1238, 128, 256)
    with pytest.raises(ValueError):
        smem_descriptor(0, 128, 256, swizzle=4)


# ---------------------------------------------------------------- registry and backend facts

def test_registry():
    assert set(a.name for a in atoms_for("gfx950")) == {
        "gfx950_mfma_f32_16x16x32_fp8", "gfx950_mfma_f32_16x16x128_f8f6f4", "gfx950_mfma_f32_16x16x32_bf16"}
    assert set(a.name for a in atoms_for("gfx942")) == {
        "gfx942_mfma_f32_16x16x32_fp8", "gfx942_mfma_f32_16x16x16_bf16"}
    # mma.sync x 3 (bf16, f16, e4m3), wgmma e4m3 RS x 6, wgmma e4m3 SS n64 (A no-swizzle /
    # 128B-swizzled), wgmma bf16 RS n8 / n16
    assert len(atoms_for("sm_90a")) == 3 + 6 + 2 + 2
    assert atom("sm90_wgmma_m64n64k32_e4m3_ss") == wgmma_e4m3(64, a_smem=True)
    assert atom("sm90_wgmma_m64n64k32_e4m3_ss_sw128") == wgmma_e4m3(64, a_smem=True,
                                                                     a_sw128=True)
    assert len(atoms_for("interp")) == len(ATOMS)
    assert atom("sm90_wgmma_m64n128k32_e4m3") == wgmma_e4m3(128)
    with pytest.raises(ValueError):
        atom("nope")
    with pytest.raises(ValueError):
        atoms_for("gfx1100")
    assert wgmma_e4m3(24).c_slots == 12  # any N = 8*i is a valid wgmma; six are registered
    for bad in (12, 0, 264):
        with pytest.raises(ValueError):
            wgmma_e4m3(bad)


def test_dtypes_and_groups():
    assert atom("gfx942_mfma_f32_16x16x32_fp8").a_dtype is T.fp8e4m3fnuz
    for name in ("gfx950_mfma_f32_16x16x32_fp8", "gfx950_mfma_f32_16x16x128_f8f6f4",
                 "sm90_mma_m16n8k32_e4m3", "sm90_wgmma_m64n64k32_e4m3"):
        a = atom(name)
        assert a.a_dtype is a.b_dtype is T.fp8e4m3fn
    for a in ALL:
        assert a.acc_dtype is T.f32
        assert a.group == {"gfx950": 64, "gfx942": 64}.get(a.targets[0], a.group)
        assert a.group in (64, 32, 128)
        assert a.c_slots * a.group == a.m * a.n


def test_backend_spellings():
    f8 = atom("gfx950_mfma_f32_16x16x128_f8f6f4")
    assert f8.intrinsic.startswith("llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4")
    assert f8.signature[0] == ("a", "<8 x i32>") and f8.regs("a") == 8
    args = dict(f8.fixed_args)
    assert args["cbsz"] == 0 and args["blgp"] == 0  # format code 0 = fp8 e4m3
    assert args["scale_a"] & 0xFF == 127 and args["scale_b"] & 0xFF == 127  # E8M0 1.0
    assert atom("gfx950_mfma_f32_16x16x32_fp8").intrinsic == "llvm.amdgcn.mfma.f32.16x16x32.fp8.fp8"
    assert atom("gfx942_mfma_f32_16x16x32_fp8").signature[0] == ("a", "i64")
    assert atom("gfx950_mfma_f32_16x16x32_bf16").intrinsic == "llvm.amdgcn.mfma.f32.16x16x32.bf16"
    assert atom("gfx942_mfma_f32_16x16x16_bf16").intrinsic == "llvm.amdgcn.mfma.f32.16x16x16bf16.1k"
    assert atom("sm90_mma_m16n8k16_bf16").intrinsic == "llvm.nvvm.mma.m16n8k16.row.col.bf16"
    # what the AMDGCN emitter consumes: (A type, B type, C type, trailing constants)
    assert atom("gfx942_mfma_f32_16x16x32_fp8").llvm_operands == ("i64", "i64", "<4 x float>", (0, 0, 0))
    assert f8.llvm_operands[:3] == ("<8 x i32>", "<8 x i32>", "<4 x float>")
    assert f8.llvm_operands[3] == (0, 0, 0, 0x7F7F7F7F, 0, 0x7F7F7F7F)
    assert f8.llvm_intrinsic == f8.intrinsic
    with pytest.raises(ValueError):
        atom("sm90_mma_m16n8k32_e4m3").llvm_intrinsic
    a = atom("sm90_mma_m16n8k16_bf16")
    assert (a.M, a.N, a.K) == (a.m, a.n, a.k) == (16, 8, 16)
    e4 = atom("sm90_mma_m16n8k32_e4m3")
    assert e4.kind == "ptx" and e4.asm.startswith("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 ")
    assert e4.asm.count("%") == 4 + 4 + 2 + 4
    w = wgmma_e4m3(64)
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3" in w.asm
    assert "%31}" in w.asm and "{%32, %33, %34, %35}, %36, p, 1, 1;" in w.asm


def test_sw128_operand_reads_back_what_its_table_placed():
    """The 128B-swizzled K-major A (wgmma_e4m3(64, a_smem=True, a_sw128=True)): A staged
    at its table's places (the XOR applied) from a 1024-byte boundary reads back through the
    descriptor; the k32 chunks of a 128-byte row (start address + 32 c) read that row's
    bytes [32 c, 32 c + 32) at their swizzled places, as TMA's SWIZZLE_128B leaves a page of
    keys; a row's 16-byte chunks land on 8 different chunk columns (no LDS bank conflict
    between the rows of an octet); base offsets and other SBOs are refused by name."""
    from monokernel.atoms.base import SW128_ATOM_BYTES, swizzled
    a = wgmma_e4m3(64, a_smem=True, a_sw128=True)
    assert a.name == "sm90_wgmma_m64n64k32_e4m3_ss_sw128"
    rng = np.random.default_rng(5)
    A = rng.integers(0, 256, (64, 32), dtype=np.uint8)
    base = 2 * SW128_ATOM_BYTES
    lds = np.zeros(base + 8 * SW128_ATOM_BYTES, np.uint8)
    lds[base + a.a_smem.table()] = A
    np.testing.assert_array_equal(a.read_a_smem(lds, a.a_smem_descriptor(base)), A)
    page = rng.integers(0, 256, (64, 128), dtype=np.uint8)  # 64 keys x 128 bytes
    rows = np.arange(64)[:, None]
    phys = swizzled(base + (rows % 8) * 128 + (rows // 8) * SW128_ATOM_BYTES + np.arange(128))
    lds[phys] = page
    for c in range(4):
        got = a.read_a_smem(lds, a.a_smem_descriptor(base + 32 * c))
        np.testing.assert_array_equal(got, page[:, 32 * c:32 * c + 32])
    chunk_cols = (swizzled(np.arange(8) * 128) % 128) // 16  # chunk 0 of rows 0..7
    assert sorted(chunk_cols.tolist()) == list(range(8))
    with pytest.raises(ValueError, match="base offset 3"):
        a.read_a_smem(lds, smem_descriptor(base, 16, SW128_ATOM_BYTES, swizzle=1, base_offset=3))
    with pytest.raises(ValueError, match="SBO 2048"):
        a.read_a_smem(lds, smem_descriptor(base, 16, 2048, swizzle=1))
    with pytest.raises(ValueError, match="a_sw128 places A in shared memory"):
        wgmma_e4m3(64, a_sw128=True)
