"""The IR: values, ops, structured regions, kernels and their ABI.

A kernel is a tree of ops: straight-line ops plus three structured control-flow ops (`if`,
`for`, `while`) whose conditions are wave-uniform. Every op is listed in `OPCODES` with a one
line meaning; `interp.py` is the executable definition of each, and the backends lower each.
Loop-carried state lives in mutable variables (`var_new`/`var_get`/`var_set`): the
interpreter keeps them in a dict, LLVM turns them into registers (SROA / mem2reg), so the IR
needs no phi nodes and the DSL reads like ordinary code.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .types import DType, VType, u8

SCOPES = ("wave", "cta", "device", "system")
MAX_ACCESS_BYTES = 16  # widest per-lane global access (dwordx4 / v4.b32)
BULK_ALIGN = 16  # address and size granularity of the bulk operations (cp.async.bulk: L2
# prefetches and copies into LDS)
MBARRIER_BYTES = 8  # one mbarrier object in LDS (8-byte aligned)
TENSOR_MAP_BYTES = 128  # a CUtensorMap (TMA descriptor), 64-byte aligned in global memory
TMA_MAX_BOX_ROWS = 256  # a box dimension's elements at most (cuTensorMapEncodeTiled)
SW128_ROW_BYTES = 128  # the 128-byte swizzle's span: a swizzled row (box row at most)
TMA_SWIZZLE_128B = SW128_ROW_BYTES  # a tensor map's swizzle field for that mode
TMA_SWIZZLES = (0, TMA_SWIZZLE_128B)  # the swizzle modes the tensor copies take
MAX_BULK_BYTES = 1 << 20  # one bulk copy's bytes at most (PTX takes a u32; LDS is far smaller)
MAX_PREFETCH_BYTES = 1 << 20  # one prefetch op's bytes at most (PTX takes a u32; a bound
# that keeps a typo from becoming a gigabyte of traffic, and the interpreter's check cheap)
L2_LINE_BYTES = 128  # an L2 cache line (sm_90a): the unit of a line prefetch (prefetch_l2 line=True)
DEFAULT_POLL_BOUND = 1 << 20  # polls (each with a short back-off) before a wait gives up


def access_alignment(nbytes: int) -> int:
    """The alignment an access of nbytes per lane must have: its largest power-of-two
    factor, at most MAX_ACCESS_BYTES (NVIDIA vector accesses need it; AMD tolerates less,
    the interpreter enforces the stricter rule so a kernel is portable)."""
    return min(nbytes & -nbytes, MAX_ACCESS_BYTES)
ORDERS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
ATOMIC_OPS = ("add", "max", "min", "cas", "exch", "or", "and")
CMP_PREDS = ("lt", "le", "gt", "ge", "eq", "ne")
REDUCE_OPS = ("add", "max", "min", "or", "and")
NAMED_BARRIERS = 16  # PTX bar ids 0..15 a CTA; 0 is the CTA barrier's (bar.sync 0)

OPCODES: dict[str, str] = {
    # values
    "const": "attrs.value as a uniform constant of the result type",
    "arg": "the kernel argument attrs.name (uniform)",
    "arg_reload": "the kernel argument attrs.name read again here (uniform): the same value, "
                  "loaded where it is used (AMD: from the kernarg segment behind an opaque "
                  "asm), so a long kernel need not keep every argument in registers",
    "lane_id": "this lane's index in its wave, 0..L-1 (per-lane i32)",
    "wave_id": "this wave's index in its CTA (uniform i32)",
    "cta_id": "this CTA's index in the grid (uniform i32)",
    "num_ctas": "number of CTAs in the grid (uniform i32)",
    "clock": "a monotone time counter in nanoseconds-like ticks (uniform u64)",
    "cycles": "this wave's processor cycle counter (uniform u64): differences between two reads "
              "of one wave count its clocks; not comparable across CTAs",
    # arithmetic (same dtype on both sides; storage-only bf16/fp8 must be cast first)
    "add": "a + b", "sub": "a - b", "mul": "a * b",
    "div": "a / b (ints: toward zero, b != 0)", "rem": "a % b (ints: sign of a)",
    "min": "min(a, b) (floats: the non-NaN one)", "max": "max(a, b) (floats: the non-NaN one)",
    "and": "a & b", "or": "a | b", "xor": "a ^ b",
    "shl": "a << b (b < bits)", "shr": "a >> b (arithmetic for signed, logical for unsigned)",
    "popc": "number of set bits of integer a", "ctz": "trailing zero bits of integer a, which "
    "must not be 0 on any lane (an error in the interpreter)",
    "neg": "-a", "abs": "|a|", "not": "~a", "exp2": "2**a", "log2": "log2 a", "sqrt": "sqrt a",
    "rsqrt": "1/sqrt a", "sin": "sin a", "cos": "cos a", "fma": "a*b + c, rounded once",
    "cmp": "a <pred> b -> i1", "select": "c ? a : b",
    "cast": "value conversion (numerics.convert)", "bitcast": "same bits, other type/width",
    "relu_bf16x2": "f32 a, b -> u32 packing bf16(max(a, 0)) in bits 0-15 and bf16(max(b, 0)) in "
                   "bits 16-31, each rounded to nearest even; a NaN gives a bf16 NaN, -0.0 a zero "
                   "of either sign (sm_90a: one cvt.rn.relu.bf16x2.f32)",
    "vec_pack": "n scalars -> one n-vector", "extract": "element attrs.index of a vector",
    "insert": "vector with element attrs.index replaced",
    "ptr_add": "pointer + byte offset",
    "opaque": "a itself (same type and bits), hidden from the optimizer at this point (an "
              "empty asm): never constant-folded, hoisted out of a loop or merged with another "
              "opaque, so values a job rebuilds from it are computed per job instead of held "
              "in registers across the persistent kernel",
    # memory
    "lds_base": "uniform pointer to the LDS allocation attrs.name",
    "lds_poison": "the interpreter only: LDS bytes [attrs.offset, attrs.offset + attrs.nbytes) of the "
                  "CTA hold no value from here on (set to LDS_POISON, as at a kernel's start), "
                  "and no copy into them or mbarrier in them may still be live; the linker "
                  "emits it where a CTA's waves have all finished a job, so a job that reads "
                  "LDS it did not write in that job reads poison. Hardware: nothing",
    "load": "n elements at ptr + idx*size; attrs: nontemporal, order/scope (atomic load)",
    "store": "n elements to ptr + idx*size; attrs: nontemporal, order/scope (atomic store)",
    "atomic": "read-modify-write attrs.op at ptr + idx*size, returns the old value",
    "prefetch_l2": "a hint, no effect on any value: start bringing the attrs.nbytes global bytes "
                   "at ptr + byte offset (16-byte aligned, a multiple of 16) into the L2 cache, so "
                   "later loads of them are L2 hits (sm_90a: cp.async.bulk.prefetch.L2; with attrs.line, "
                   "the range within one L2 line: prefetch.global.L2, a load-unit instruction "
                   "with no TMA round trip; AMD: dropped); the interpreter checks the range lies "
                   "in one buffer (and, with line, in one line)",
    "mbar_init": "lane 0 sets up the 8-byte LDS mbarrier at args[0]: phase 0, attrs.count "
                 "arrivals a phase (sm_90a: mbarrier.init + fence.mbarrier_init)",
    "mbar_arrive_tx": "lane 0 arrives once at mbarrier args[0] and adds attrs.nbytes to the bytes "
                      "its phase waits for (mbarrier.arrive.expect_tx); the phase completes when "
                      "every arrival is in and those bytes have landed",
    "bulk_load_lds": "lane 0 starts an asynchronous copy of attrs.nbytes global bytes at args[1] + "
                     "args[2] (byte offset) to LDS args[0], completing bytes on mbarrier args[3] "
                     "(sm_90a: cp.async.bulk, the TMA unit; no registers hold them); a wave may "
                     "read them only after its mbar_wait saw that phase complete",
    "tma_load_rows": "lane 0 starts a TMA tensor copy of attrs.box_rows rows of attrs.row_bytes "
                     "bytes from row args[3] of the 2-D view of global args[2] that tensor map "
                     "args[1] describes (rows attrs.row_bytes apart) to LDS args[0], placed "
                     "with attrs.swizzle (0, or 128: atoms.base.swizzled), completing bytes on "
                     "mbarrier args[4] (sm_90a: cp.async.bulk.tensor.2d); read as bulk_load_lds's",
    "mbar_inval": "lane 0 invalidates mbarrier args[0] (no phase in flight), so its 8 bytes may "
                  "be set up again by mbar_init: a barrier used by each job of a persistent "
                  "CTA (sm_90a: mbarrier.inval; initialising a valid mbarrier is undefined)",
    "mbar_wait": "wait until the phase of mbarrier args[0] with parity args[1] has completed "
                 "(mbarrier.try_wait.parity in a loop)",
    "async_copy": "each lane starts an asynchronous copy of attrs.n attrs.dtype elements (4, 8 or "
                  "16 bytes) from global args[2] + args[3] elements to LDS args[0] + args[1] "
                  "elements; no register holds them. The copy joins the lane's open group "
                  "(async_commit closes it); only that lane may read the bytes, after an "
                  "async_wait has retired the group (sm_90a: cp.async)",
    "async_commit": "closes the lane's open group of async_copy operations (sm_90a: "
                    "cp.async.commit_group)",
    "async_wait": "waits until at most attrs.pending of the lane's committed async_copy groups "
                  "are still in flight, the newest ones: counted, so a pipeline waits only for "
                  "the copies it is about to read (sm_90a: cp.async.wait_group)",
    "fence": "memory fence with attrs.scope and attrs.order",
    "grid_dep_launch": "the next launch in the stream may start its CTAs now (they run up to their "
                       "grid_dep_wait beside this grid). sm_90a: griddepcontrol.launch_dependents "
                       "(programmatic dependent launch); AMD and the interpreter: no effect",
    "grid_dep_wait": "wait until every earlier launch in the stream has completed and its memory "
                     "is visible. Before it a wave may read only Ptr(constant=True) buffers and "
                     "write nothing (the earlier launch may still be running when this one is "
                     "launched with pdl). sm_90a: griddepcontrol.wait; AMD: nothing (its "
                     "launches never overlap: stream order already is the wait)",
    "barrier": "CTA barrier, with a CTA-scope acq_rel fence (LDS and global)",
    "wave_sync": "the wave's lanes meet: each lane's LDS and global accesses before it are "
                 "visible to the wave's other lanes after it (a lane reading LDS words another "
                 "lane of its wave wrote). sm_90a: bar.warp.sync (lanes are scheduled "
                 "independently); AMD: nothing (a wave's lanes run in lockstep and its LDS "
                 "accesses in order); the interpreter runs a wave's lanes in lockstep",
    "named_barrier": "named barrier args[0] (uniform i32, 1..NAMED_BARRIERS-1; 0 is the CTA "
                     "barrier's) completing when attrs.waves waves of the CTA have reached it; "
                     "attrs.arrive: this wave counts itself and goes on, else it waits for the "
                     "completion (an ordering of warps, no memory fence: sm_90a)",
    "poll_pause": "the back-off between the rounds of a polling loop the kernel writes itself "
                  "(poll has its own), after a round found the memory not ready and before "
                  "the next: the wave gives up its issue slots for a moment "
                  "(sm_90a: nanosleep, AMD: s_sleep); -> uniform i1, true where the interpreter "
                  "gives the wait up (run with on_stall 'timeout' when every wave only polls "
                  "memory nothing will change), false on hardware. The interpreter lets other "
                  "waves run there and counts the wave as polling (its stall report)",
    "poll": "load (relaxed, attrs.scope) until the field (x >> shift) & mask <pred> expected holds "
            "on every active lane, at most attrs.bound times; -> (value, timed_out)",
    # cross-lane
    "lane_swap": "value of lane ^ attrs.mask", "shuffle": "value of lane src (per-lane index)",
    "wave_reduce": "butterfly reduction attrs.op over all lanes (uniform)",
    "ballot": "bit i set iff predicate on lane i (uniform, L bits)",
    "prefix_count": "number of lanes below this one with the predicate set",
    "match_any": "(i32 number of lanes whose 32-bit value equals this lane's, i1 set on the "
                 "lowest of them): a wave's lanes grouped by value, so one lane a group can act "
                 "for it (sm_90a: match.any.sync.b32; AMD: not lowered, a BackendError)",
    "readfirstlane": "the value of lane 0 (uniform)",
    # matrix
    "mma": "D = A @ B + C through attrs.atom's lane maps",
    "wgmma_fence": "orders register writes before warpgroup MMAs",
    "wgmma": "asynchronous warpgroup D = A @ B(smem descriptor) + C; result usable after wgmma_wait",
    "wgmma_commit": "closes a group of issued wgmmas",
    "wgmma_wait": "waits until at most attrs.pending groups remain in flight",
    # state and control flow
    "var_new": "a mutable variable, initialised", "var_get": "read a variable",
    "var_set": "write a variable",
    "if": "regions[0] if cond else regions[1] (cond uniform)",
    "for": "for iv in range(start, stop, step): regions[0] (bounds uniform); attrs.unroll "
           "False: a hint to the LLVM backends not to unroll it",
    "while": "while regions[0] yields true: regions[1]",
    "yield_cond": "the condition computed by a while's first region",
}

_ids = itertools.count()


class Value:
    """An SSA value. Python operators build ops through the active builder (dsl.py)."""
    __slots__ = ("type", "id", "name", "__weakref__")

    def __init__(self, type: VType, name: str | None = None):
        self.type = type
        self.id = next(_ids)
        self.name = name

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def uniform(self) -> bool:
        return self.type.uniform

    @property
    def n(self) -> int:
        return self.type.n

    def __repr__(self) -> str:
        return f"%{self.name or ''}{self.id}:{self.type}"

    # The operator methods are installed by dsl.py (it owns the builder state).


class Var:
    """A mutable variable (loop-carried state)."""
    __slots__ = ("type", "id", "name")

    def __init__(self, type: VType, name: str | None = None):
        self.type = type
        self.id = next(_ids)
        self.name = name

    def __repr__(self) -> str:
        return f"${self.name or 'v'}{self.id}:{self.type}"


@dataclass(eq=False)
class Block:
    ops: list["Op"] = field(default_factory=list)


@dataclass(eq=False)
class Op:
    opcode: str
    args: tuple = ()
    results: tuple = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: tuple = ()

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, self
        return self.results[0]

    def __repr__(self) -> str:
        res = ", ".join(map(repr, self.results))
        a = ", ".join(map(repr, self.args))
        at = " ".join(f"{k}={v}" for k, v in self.attrs.items() if k != "atom" and not k.startswith("_"))
        if "atom" in self.attrs:
            at += f" atom={self.attrs['atom'].name}"
        return f"{res + ' = ' if res else ''}{self.opcode}({a}) {at}".rstrip()


# ----------------------------------------------------------------------------- ABI

@dataclass(frozen=True)
class Ptr:
    """A global buffer argument; `dtype` documents its elements (loads may reinterpret).
    `constant`: the same bytes for every launch of a step (weights, tables): the one kind of
    buffer a wave may read before its grid_dep_wait, and no launch may write it."""
    dtype: DType
    readonly: bool = False
    constant: bool = False
    size = 8
    align = 8


@dataclass(frozen=True)
class TensorMap(Ptr):
    """A global buffer of TENSOR_MAP_BYTES holding the TMA descriptor (CUtensorMap) of the
    2-D view of buffer argument `of` as rows of `row_bytes` bytes (its bytes / row_bytes rows),
    boxes of `box_rows` rows of `box_row_bytes` bytes (0: whole rows; a narrower box is a
    column window of a row-major matrix, e.g. a 128-k block of a weight tile), `swizzle` 0 or
    128. Launchers derive it from `of` (the CUDA launcher encodes it with
    cuTensorMapEncodeTiled at the buffer's address; the interpreter reads `of` itself), so a
    caller never passes it."""
    dtype: DType = u8
    readonly: bool = True
    constant: bool = False
    of: str = ""
    row_bytes: int = 0
    box_rows: int = 0
    swizzle: int = 0
    box_row_bytes: int = 0

    def __post_init__(self):
        if not self.of.isidentifier():
            raise ValueError(f"TensorMap: of={self.of!r} must name a buffer argument")
        if self.row_bytes <= 0 or self.row_bytes % BULK_ALIGN:
            raise ValueError(f"TensorMap of {self.of}: row_bytes {self.row_bytes!r}; a positive "
                             f"multiple of {BULK_ALIGN}")
        if not 0 < self.box_rows <= TMA_MAX_BOX_ROWS:
            raise ValueError(f"TensorMap of {self.of}: box_rows {self.box_rows!r}; 1 .. "
                             f"{TMA_MAX_BOX_ROWS}")
        if self.swizzle not in TMA_SWIZZLES:
            raise ValueError(f"TensorMap of {self.of}: swizzle {self.swizzle!r}; one of "
                             f"{TMA_SWIZZLES}")
        if self.box_row_bytes < 0 or self.box_row_bytes % BULK_ALIGN or \
                self.box_row_bytes > self.row_bytes:
            raise ValueError(f"TensorMap of {self.of}: box_row_bytes {self.box_row_bytes!r}; 0 "
                             f"(whole rows) or a multiple of {BULK_ALIGN} up to row_bytes "
                             f"{self.row_bytes}")
        if self.swizzle and self.box_width > SW128_ROW_BYTES:
            raise ValueError(f"TensorMap of {self.of}: {self.box_width}-byte box rows exceed "
                             f"the {SW128_ROW_BYTES}-byte swizzle span")

    @property
    def box_width(self) -> int:
        """Bytes of a box row (the whole row unless box_row_bytes narrows it)."""
        return self.box_row_bytes or self.row_bytes

    @property
    def box_bytes(self) -> int:
        return self.box_rows * self.box_width


def derived_args(abi: "ABI") -> list:
    """The ABI's slots a launcher fills itself (TensorMap: from the buffer it describes)."""
    return [s for s in abi.slots if isinstance(s.kind, TensorMap)]


@dataclass(frozen=True)
class Scalar:
    dtype: DType

    @property
    def size(self) -> int:
        return self.dtype.bytes

    @property
    def align(self) -> int:
        return self.dtype.bytes


@dataclass(frozen=True)
class ArgSlot:
    name: str
    kind: Ptr | Scalar
    offset: int


class ABI:
    """The one declared kernel-argument table: names, kinds and kernarg byte offsets.

    Backends emit the kernel signature from it, launchers pack arguments from it, `lint`
    compares a code object's kernarg metadata with it. Arguments are laid out in declaration
    order with natural alignment, the C struct rule both HSA and CUDA use.
    """

    def __init__(self, **args: Ptr | Scalar):
        if not args:
            raise ValueError("an ABI needs at least one argument")
        self.slots: list[ArgSlot] = []
        off = 0
        for name, kind in args.items():
            if not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"argument name {name!r} must be an identifier without a leading _")
            if not isinstance(kind, (Ptr, Scalar)):
                raise TypeError(f"argument {name!r}: expected Ptr(...) or Scalar(...), got {kind!r}")
            off = (off + kind.align - 1) // kind.align * kind.align
            self.slots.append(ArgSlot(name, kind, off))
            off += kind.size
        self.size = off

    def __getitem__(self, name: str) -> ArgSlot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(f"no kernel argument {name!r}; the ABI has {[s.name for s in self.slots]}")

    def names(self) -> list[str]:
        return [s.name for s in self.slots]

    def to_json(self) -> list[dict]:
        out = []
        for s in self.slots:
            kind = "ptr" if isinstance(s.kind, Ptr) else "scalar"
            out.append(dict(name=s.name, kind=kind, dtype=s.kind.dtype.name, offset=s.offset,
                            size=s.kind.size))
        return out

    def __repr__(self) -> str:
        return "ABI(" + ", ".join(f"{s.name}@{s.offset}:{s.kind}" for s in self.slots) + ")"


@dataclass(frozen=True)
class LDSAlloc:
    name: str
    dtype: DType
    count: int
    offset: int

    @property
    def bytes(self) -> int:
        return self.dtype.bytes * self.count


@dataclass(eq=False)
class Kernel:
    """A built kernel for one target: what the interpreter runs and the backends lower."""
    name: str
    abi: ABI
    target: str
    wave_size: int
    waves: int  # waves per CTA
    body: Block
    lds: list[LDSAlloc]
    uses: frozenset = frozenset()  # hardware features used (for amdgpu-no-* attributes)
    # CTAs the kernel is built to keep resident per SM (sm_90a: nvvm.minctasm, so ptxas keeps
    # the registers within 65536 / (ctas_per_sm * threads)); persistent kernels: 1
    ctas_per_sm: int = 1
    # the pause between a polling loop's rounds, in the chip's shortest pauses (sm_90a:
    # nanosleep of nvptx.BACKOFF_NS, AMD: s_sleep amdgcn.SLEEP_UNITS): 1, the default; more
    # where many waves poll the same lines (--tune launch.poll_backoff=N; the interpreter
    # has no clock and ignores it)
    poll_backoff: int = 1

    @property
    def threads(self) -> int:
        return self.wave_size * self.waves

    @property
    def lds_bytes(self) -> int:
        return max((a.offset + a.bytes for a in self.lds), default=0)

    def walk(self):
        """All ops, depth first."""
        def rec(block):
            for op in block.ops:
                yield op
                for r in op.regions:
                    yield from rec(r)
        yield from rec(self.body)

    def dump(self) -> str:
        lines = [f"kernel {self.name} target={self.target} L={self.wave_size} W={self.waves} "
                 f"{self.abi}"]
        for a in self.lds:
            lines.append(f"  lds {a.name}: {a.dtype}[{a.count}] @ {a.offset}")

        def rec(block, ind):
            for op in block.ops:
                lines.append("  " * ind + repr(op))
                for r in op.regions:
                    lines.append("  " * ind + "  {")
                    rec(r, ind + 2)
                    lines.append("  " * ind + "  }")
        rec(self.body, 1)
        return "\n".join(lines)
