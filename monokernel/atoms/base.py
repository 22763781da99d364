"""MMA atoms: one matrix instruction of one chip, stated as data.

An atom says which lanes execute the instruction together (`group`: a wave64, a warp, a
warpgroup), the element types, and for each operand where every matrix element lives:

    A is M x K, B is K x N, C/D is M x N (row-major *meaning*, no storage implied).
    Operand X held in registers: `X_layout` is a layout.Layout with two top-level modes
    (lane, slot) whose value is the flat index row + col * ROWS of the element held there
    (ROWS = M for A and C, K for B). `slot` counts elements inside a lane's registers:
    slot s sits in 32-bit register s // per_reg, bits [(s % per_reg) * bits, +bits),
    per_reg = 32 // element bits (fp8 4, bf16 2, f32 1), low bits first -- the order the
    vendors' tables use.

Why a layout rather than a lookup table: the vendor maps are affine in the bits of the
lane and slot numbers, so a layout is both the shortest faithful statement of them and
something tiling code can compose. The numpy tables (`rows`, `cols`, `owner`) are derived
from it. The interpreter runs MMAs through these same tables (and `read_b_smem` for wgmma;
`execute` is the plain reference), so a wrong map fails in CI instead of on a GPU.

B read from shared memory (Hopper wgmma) has no lane map: `b_source == "smem"` and
`b_smem` gives the byte offset of each (k, n) in the canonical layout the descriptor
describes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import SW128_ROW_BYTES
from ..layout import Layout, size, tabulate
from ..types import DType

OPERANDS = ("a", "b", "c")


# a descriptor's address fields hold a byte value >> DESC_SHIFT in DESC_FIELD_BITS bits
DESC_SHIFT, DESC_FIELD_BITS = 4, 14
DESC_FIELD_MASK = (1 << DESC_FIELD_BITS) - 1


def desc_units(nbytes: int) -> int:
    """A byte offset in a descriptor's address fields' units (16 bytes): added to a
    descriptor's start address it moves the matrix by `nbytes`."""
    if nbytes & ((1 << DESC_SHIFT) - 1):
        raise ValueError(f"descriptor offset {nbytes:#x} is not a multiple of 16 bytes")
    return nbytes >> DESC_SHIFT


def smem_descriptor(addr: int, lbo: int, sbo: int, swizzle: int = 0, base_offset: int = 0) -> int:
    """The wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"):
    bits 0-13 start address, 16-29 leading dimension byte offset, 32-45 stride dimension
    byte offset, each encoded as (x & 0x3FFFF) >> 4; bits 49-51 base offset (swizzled
    modes only); bits 62-63 swizzle (0 none, 1 128B, 2 64B, 3 32B). In kernels `addr` is
    the byte offset into the CTA's LDS; the NVPTX backend adds the shared window base."""
    for what, v in (("address", addr), ("LBO", lbo), ("SBO", sbo)):
        if v < 0 or v & 0xF:
            raise ValueError(f"descriptor {what} {v:#x} must be a non-negative multiple of 16")
        if v >= 1 << 18:
            raise ValueError(f"descriptor {what} {v:#x} does not fit 18 bits")
    if swizzle not in (0, 1, 2, 3) or not 0 <= base_offset < 8:
        raise ValueError("swizzle must be 0..3 and base_offset 0..7")
    return desc_units(addr) | desc_units(lbo) << 16 | desc_units(sbo) << 32 | \
        base_offset << 49 | swizzle << 62


def decode_smem_descriptor(desc: int) -> dict:
    """Inverse of smem_descriptor: byte values of its fields."""
    desc = int(desc) & (1 << 64) - 1
    field = lambda lo: ((desc >> lo) & DESC_FIELD_MASK) << DESC_SHIFT  # noqa: E731
    return dict(addr=field(0), lbo=field(16), sbo=field(32), base_offset=(desc >> 49) & 7,
                swizzle=desc >> 62)


SWIZZLE_128B = 1  # the descriptor's swizzle field for the 128-byte mode
SW128_ATOM_BYTES = 8 * SW128_ROW_BYTES  # 8 rows: the pattern repeats (SBO between row octets)
SW_CHUNK_SHIFT, SW_ROW_SHIFT = 4, 7  # 16-byte chunks; 128-byte rows


def swizzled(offset):
    """The 128B swizzle (CuTe's Swizzle<3,4,3>): a byte's 16-byte chunk index within its
    128-byte row is XORed with the row's index within its 8-row atom, i.e. address bits
    [4, 7) ^= bits [7, 10) of the byte's address, the atom aligned to 1024 bytes. It is how
    TMA's SWIZZLE_128B places a box and how wgmma reads a descriptor of swizzle mode 1.
    `offset`: an int, a numpy array, or a kernel's i32 value (the same operators)."""
    return offset ^ (((offset >> SW_ROW_SHIFT) & 7) << SW_CHUNK_SHIFT)


def kmajor_sw128(mn: int, k_bytes: int, elem_bytes: int) -> Layout:
    """The UNSWIZZLED placement of the 128B-swizzled K-major layout, (mn, k) -> byte offset:
    row r's bytes at (r % 8) * 128 + (r // 8) * 1024 (the descriptor's SBO), so one
    instruction's K (k_bytes <= 128) lies in one 128-byte row; `swizzled` gives the bytes'
    real places. A page of 64 keys x 128 bytes, copied by TMA with SWIZZLE_128B, is this
    layout with K = 128 bytes, an instruction's k32 chunk c at start address + 32 c."""
    if mn % 8 or k_bytes % elem_bytes or k_bytes > SW128_ROW_BYTES:
        raise ValueError(f"{mn} x {k_bytes} bytes: 128B swizzle takes rows in 8s and K within "
                         f"one {SW128_ROW_BYTES}-byte row")
    return Layout(((8, mn // 8), k_bytes // elem_bytes),
                  ((SW128_ROW_BYTES, SW128_ATOM_BYTES), elem_bytes))


def kmajor_interleave(mn: int, k: int, elem_bytes: int, lbo: int, sbo: int) -> Layout:
    """PTX ISA canonical K-major layout without swizzle, ((8,m),(T,2k)):((1T,SBO),(1,LBO))
    in elements with T = 16 bytes / element size, given here as (mn, k) -> byte offset:
    8 rows x 16 bytes form a contiguous "core matrix"; the next core matrix along K is LBO
    bytes on, the next 8 rows along M/N SBO bytes on."""
    t = 16 // elem_bytes
    if mn % 8 or k % t:
        raise ValueError(f"{mn}x{k} is not a whole number of 8 x {t} core matrices")
    return Layout(((8, mn // 8), (t, k // t)), ((16, sbo), (elem_bytes, lbo)))


@dataclass(frozen=True)
class SmemOperand:
    """An operand the instruction reads from shared memory through a matrix descriptor.

    `layout` maps (row, col) of the operand matrix (for B: (k, n)) to a byte offset from
    the descriptor's start address; `lbo`/`sbo` are the leading/stride dimension byte
    offsets the descriptor must carry for that layout (PTX ISA "Matrix Descriptor
    Format"), `swizzle` the descriptor's swizzle mode (0 = none), `major` which index is
    contiguous ("K" = K-major)."""
    layout: Layout
    lbo: int
    sbo: int
    elem_bytes: int
    swizzle: int = 0
    major: str = "K"

    def offset(self, row: int, col: int) -> int:
        return self.layout(row, col)

    def table(self) -> np.ndarray:
        """Byte offsets indexed [row, col] (a swizzled mode's placement from a base
        aligned to SW128_ATOM_BYTES: `layout` is the unswizzled one)."""
        off = tabulate(self.layout)
        return swizzled(off) if self.swizzle else off


@dataclass(frozen=True)
class MMAAtom:
    name: str
    targets: tuple            # chip names from targets.py that have the instruction
    m: int
    n: int
    k: int
    a_dtype: DType
    b_dtype: DType
    acc_dtype: DType
    group: int                # lanes that execute one instance together
    a_layout: Layout          # (lane, slot) -> row + col*M of A (M x K)
    b_layout: Layout | None   # (lane, slot) -> row + col*K of B (K x N); None if smem
    c_layout: Layout          # (lane, slot) -> row + col*M of C and D (M x N)
    intrinsic: str            # LLVM intrinsic name, or the PTX instruction when kind == "ptx"
    kind: str                 # "llvm" (call the intrinsic) or "ptx" (inline asm, see `asm`)
    signature: tuple          # ((operand name, type), ...) in call order
    result_type: str
    fixed_args: tuple = ()    # ((operand name, value), ...): constant operands of the call
    asm: str = ""             # inline PTX template (kind == "ptx")
    b_source: str = "regs"    # "regs" or "smem"
    b_smem: SmemOperand | None = None
    # A from shared memory too (Hopper wgmma's SS form): a_layout None, A a descriptor
    a_smem: SmemOperand | None = None
    is_async: bool = False    # completes at a later wait (wgmma), not at issue
    notes: str = field(default="", compare=False)

    def __post_init__(self):
        if self.kind not in ("llvm", "ptx"):
            raise ValueError(f"{self.name}: kind must be 'llvm' or 'ptx'")
        if self.b_source not in ("regs", "smem"):
            raise ValueError(f"{self.name}: b_source must be 'regs' or 'smem'")
        if (self.b_source == "smem") != (self.b_layout is None) or \
                (self.b_source == "smem") != (self.b_smem is not None):
            raise ValueError(f"{self.name}: B needs a lane layout (regs) or an smem layout (smem)")
        if (self.a_smem is None) == (self.a_layout is None):
            raise ValueError(f"{self.name}: A needs a lane layout or an smem layout, not both")
        for op in self._reg_operands():
            lay, (r, c) = self.layout(op), self.shape(op)
            if lay.rank != 2 or size(lay[0].shape) != self.group:
                raise ValueError(f"{self.name}: {op} layout {lay} is not (lane[{self.group}], slot)")
            if lay.size() != r * c:
                raise ValueError(f"{self.name}: {op} layout {lay} covers {lay.size()} != {r}x{c}")

    def _reg_operands(self):
        return tuple(op for op in OPERANDS if not self.from_smem(op))

    def from_smem(self, op: str) -> bool:
        """Whether operand `op` is read from shared memory through a descriptor."""
        return (op == "a" and self.a_smem is not None) or (op == "b" and self.b_source == "smem")

    # -- static facts per operand
    def shape(self, op: str) -> tuple:
        """(rows, cols) of operand `op`: A (M, K), B (K, N), C (M, N)."""
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[op]

    def layout(self, op: str) -> Layout:
        lay = {"a": self.a_layout, "b": self.b_layout, "c": self.c_layout}[op]
        if lay is None:
            raise ValueError(f"{self.name}: operand {op} is read from shared memory, not lanes")
        return lay

    def dtype(self, op: str) -> DType:
        return {"a": self.a_dtype, "b": self.b_dtype, "c": self.acc_dtype}[op]

    def slots(self, op: str) -> int:
        """Elements of `op` each lane holds (0 for an operand read from shared memory)."""
        if self.from_smem(op):
            return 0
        return size(self.layout(op)[1].shape)

    def slots_per_reg(self, op: str) -> int:
        return max(1, 32 // self.dtype(op).bits)

    def regs(self, op: str) -> int:
        """32-bit registers per lane for `op` (0 for shared memory)."""
        return -(-self.slots(op) // self.slots_per_reg(op))

    def reg_bits(self, op: str, slot: int) -> tuple:
        """(register index, low bit) of `slot` inside the lane's registers."""
        per = self.slots_per_reg(op)
        return slot // per, (slot % per) * self.dtype(op).bits

    M = property(lambda self: self.m)
    N = property(lambda self: self.n)
    K = property(lambda self: self.k)
    a_slots = property(lambda self: self.slots("a"))
    b_slots = property(lambda self: self.slots("b"))
    c_slots = property(lambda self: self.slots("c"))

    # -- numpy tables [lane, slot]
    def flat_index(self, op: str) -> np.ndarray:
        return tabulate(self.layout(op))

    def rows(self, op: str) -> np.ndarray:
        return self.flat_index(op) % self.shape(op)[0]

    def cols(self, op: str) -> np.ndarray:
        return self.flat_index(op) // self.shape(op)[0]

    def a_rows(self): return self.rows("a")
    def a_cols(self): return self.cols("a")
    def b_rows(self): return self.rows("b")
    def b_cols(self): return self.cols("b")
    def c_rows(self): return self.rows("c")
    def c_cols(self): return self.cols("c")

    def owner(self, op: str) -> tuple:
        """Inverse map: (lane[row, col], slot[row, col]) holding each matrix element."""
        r, c = self.shape(op)
        idx = self.flat_index(op)
        lane = np.full(r * c, -1, dtype=np.int64)
        slot = np.full(r * c, -1, dtype=np.int64)
        ln, sl = np.indices(idx.shape)
        lane[idx.ravel()] = ln.ravel()
        slot[idx.ravel()] = sl.ravel()
        return lane.reshape((r, c), order="F"), slot.reshape((r, c), order="F")

    # -- moving data (the interpreter's view)
    def to_lanes(self, op: str, mat: np.ndarray) -> np.ndarray:
        """Matrix [rows, cols] -> per-lane values [lane, slot]."""
        if mat.shape != self.shape(op):
            raise ValueError(f"{self.name}: {op} must be {self.shape(op)}, got {mat.shape}")
        return mat[self.rows(op), self.cols(op)]

    def from_lanes(self, op: str, vals: np.ndarray) -> np.ndarray:
        """Per-lane values [lane, slot] -> matrix [rows, cols]."""
        lane, slot = self.owner(op)
        return vals[lane, slot]

    def b_to_smem(self, mat: np.ndarray) -> np.ndarray:
        """B [K, N] -> 1-D shared-memory image indexed by element (byte offset // elem_bytes)."""
        off = self.b_smem.table() // self.b_smem.elem_bytes
        buf = np.zeros(int(off.max()) + 1, dtype=mat.dtype)
        buf[off] = mat
        return buf

    def b_from_smem(self, buf: np.ndarray) -> np.ndarray:
        return buf[self.b_smem.table() // self.b_smem.elem_bytes]

    def smem_descriptor(self, addr: int) -> int:
        """Descriptor for B stored at LDS byte offset `addr` in this atom's smem layout."""
        sm = self._smem()
        return smem_descriptor(addr, sm.lbo, sm.sbo, sm.swizzle)

    def read_b_smem(self, lds: np.ndarray, desc: int) -> np.ndarray:
        """B [K, N] in storage form (b_dtype.np), read from a CTA's LDS bytes the way the
        hardware does: at the descriptor's start address, with the descriptor's LBO/SBO
        (not this atom's defaults). Only the no-swizzle K-major layout is modelled."""
        self._smem()
        return self._read_kmajor(lds, desc, self.n, self.b_dtype, "B").T

    def read_a_smem(self, lds: np.ndarray, desc: int) -> np.ndarray:
        """A [M, K] in storage form (a_dtype.np), read as read_b_smem reads B (K-major)."""
        if self.a_smem is None:
            raise ValueError(f"{self.name}: A is not read from shared memory")
        return self._read_kmajor(lds, desc, self.m, self.a_dtype, "A")

    def _read_kmajor(self, lds, desc, mn, dtype, what) -> np.ndarray:
        """[mn, K] elements at the descriptor's K-major placement: no swizzle (core matrices
        LBO / SBO apart), or 128B swizzle (rows of 128 bytes, row octets SBO apart, the
        XOR on the LDS byte address: `swizzled`; the backends align LDS to 1024 bytes)."""
        f = decode_smem_descriptor(desc)
        eb = dtype.bits // 8
        if f["swizzle"] == SWIZZLE_128B:
            if f["base_offset"] or f["sbo"] != SW128_ATOM_BYTES:
                raise ValueError(f"{self.name}: a 128B-swizzled descriptor with base offset "
                                 f"{f['base_offset']} and SBO {f['sbo']}; modelled: 0 and "
                                 f"{SW128_ATOM_BYTES}")
            off = swizzled(f["addr"] + tabulate(kmajor_sw128(mn, self.k * eb, eb)))
        elif f["swizzle"] != 0:
            raise ValueError(f"{self.name}: swizzle mode {f['swizzle']} is not modelled "
                             "(none, and 128B)")
        else:
            off = f["addr"] + tabulate(kmajor_interleave(mn, self.k, eb, f["lbo"], f["sbo"]))
        if off.min() < 0 or off.max() + eb > lds.size:
            raise ValueError(f"{self.name}: {what} at descriptor {desc:#x} reads LDS bytes "
                             f"[{off.min()}, {off.max() + eb}) past its {lds.size} bytes")
        raw = lds[off[..., None] + np.arange(eb)]
        return np.ascontiguousarray(raw).view(dtype.np).reshape(mn, self.k)

    def a_smem_descriptor(self, addr: int) -> int:
        """Descriptor for A stored at LDS byte offset `addr` in this atom's A smem layout."""
        if self.a_smem is None:
            raise ValueError(f"{self.name}: A is not read from shared memory")
        return smem_descriptor(addr, self.a_smem.lbo, self.a_smem.sbo, self.a_smem.swizzle)

    def _smem(self) -> SmemOperand:
        if self.b_smem is None:
            raise ValueError(f"{self.name}: B is not read from shared memory")
        return self.b_smem

    # -- backend spellings used by the LLVM emitters
    @property
    def llvm_intrinsic(self) -> str:
        if self.kind != "llvm":
            raise ValueError(f"{self.name} is spelled as inline PTX, not an LLVM intrinsic")
        return self.intrinsic

    @property
    def llvm_operands(self) -> tuple:
        """(A type, B type, C type, trailing constant operands) of an intrinsic called as
        f(a, b, c, consts...) -- the AMD MFMA form."""
        names = tuple(n for n, _ in self.signature[:3])
        if self.kind != "llvm" or names != ("a", "b", "c"):
            raise ValueError(f"{self.name} is not called as f(a, b, c, consts...)")
        return (*(t for _, t in self.signature[:3]), tuple(v for _, v in self.fixed_args))

    def execute(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Reference semantics on already-decoded numbers: D = A @ B + C, with A and C given
        per lane [lane, slot], B per lane or (smem) as the 1-D image of `b_to_smem`.
        Returns D per lane [lane, slot]. Accumulates in float64; the caller rounds."""
        A = self.from_lanes("a", np.asarray(a, dtype=np.float64))
        b = np.asarray(b, dtype=np.float64)
        B = self.b_from_smem(b) if self.b_source == "smem" else self.from_lanes("b", b)
        C = self.from_lanes("c", np.asarray(c, dtype=np.float64))
        return self.to_lanes("c", A @ B + C)

    def __repr__(self) -> str:
        return f"MMAAtom({self.name}: {self.m}x{self.n}x{self.k} {self.a_dtype}x{self.b_dtype}->{self.acc_dtype}, group {self.group})"


def lane_slot_layout(lane_shape, lane_stride, slot_shape, slot_stride) -> Layout:
    """Build the (lane, slot) -> flat index layout of an operand from its two modes."""
    return Layout((lane_shape, slot_shape), (lane_stride, slot_stride))


def is_bijection(layout: Layout, n: int) -> bool:
    """True if the layout's values are exactly 0..n-1, each once."""
    vals = np.sort(tabulate(layout).ravel())
    return vals.size == n and bool(np.array_equal(vals, np.arange(n)))


__all__ = ["DESC_FIELD_MASK", "DESC_SHIFT", "MMAAtom", "SmemOperand", "OPERANDS",
           "decode_smem_descriptor", "desc_units", "is_bijection",
           "kmajor_interleave", "lane_slot_layout", "smem_descriptor"]
