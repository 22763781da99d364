"""The builder kernels are written with.

    def scale_rows(k, *, n):
        x, out = k.args.x, k.args.out
        i = k.cta_id() * k.L + k.lane_id()
        with k.if_(k.cta_id() < n // k.L):
            v = k.load(x, i, f32)
            k.store(out, i, v * 2.0)

    kern = build_kernel("scale_rows", scale_rows, abi=ABI(x=Ptr(f32), out=Ptr(f32)),
                        target="gfx950", waves=1, n=1024)

The same Python text builds for wave64 (AMD) and warp32 (NVIDIA): `k.L` is the wave size of
the target. Python numbers mix with values (they take the other operand's type). Type rules
are strict: both operands of an arithmetic op have one dtype; bf16/fp8 are storage types that
are cast to f32 for arithmetic. A mistake is a `DSLError` raised where the kernel says it.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from types import SimpleNamespace

from . import ir
from .ir import DEFAULT_POLL_BOUND, MAX_ACCESS_BYTES, ABI, Block, LDSAlloc, Op, Ptr, Scalar, Value, Var
from .targets import target as get_target
from .verify import VerifyError, verify
from .types import (STORAGE_ONLY, DType, VType, dtype as as_dtype, f32, i1, i32, i64, ptr_global,
                    ptr_lds, u8, u32, u64)

_builder: ContextVar["KernelBuilder | None"] = ContextVar("monokernel_builder", default=None)


class DSLError(Exception):
    """A kernel that cannot be built as written."""


def _cur() -> "KernelBuilder":
    b = _builder.get()
    if b is None:
        raise DSLError("no kernel is being built: use values inside build_kernel's function")
    return b


class KernelBuilder:
    """What a kernel function receives as `k`."""

    def __init__(self, name: str, abi: ABI, target: str, waves: int, wave_size: int | None):
        t = get_target(target)
        self.target = t
        self.name = name
        self.abi = abi
        self.L = wave_size or t.wave_size
        if self.L not in (32, 64):
            raise DSLError(f"wave size {self.L} is not 32 or 64")
        if t.vendor == "amd" and self.L != 64:
            raise DSLError(f"{t.name} runs wave64 kernels; wave size {self.L} requested")
        if t.vendor == "nvidia" and self.L != 32:
            raise DSLError(f"{t.name} runs 32-lane warps; wave size {self.L} requested")
        if waves < 1 or waves * self.L > t.max_threads_per_cta:
            raise DSLError(f"{waves} waves of {self.L} lanes exceed {t.max_threads_per_cta} threads")
        self.W = waves
        self._blocks: list[Block] = [Block()]
        self._lds: list[LDSAlloc] = []
        self._lds_top = 0
        self.uses: set[str] = set()
        self._stage: str | None = None  # set while a stage body is emitted (stage_scope)
        self._async_proxy = 0  # > 0 inside async_proxy_lds(): barriers carry async_proxy
        self._predicated = 0  # > 0 inside predicated_masks(): masked stores / atomics carry it
        self.args = SimpleNamespace(**{s.name: self._arg(s) for s in abi.slots})

    # ------------------------------------------------------------------ plumbing
    def _emit(self, opcode, args=(), result_types=(), attrs=None, regions=()) -> Op:
        results = tuple(Value(t) for t in result_types)
        op = Op(opcode, tuple(args), results, dict(attrs or {}), tuple(regions))
        self._blocks[-1].ops.append(op)
        return op

    def _v(self, opcode, args, rtype, **attrs) -> Value:
        return self._emit(opcode, args, (rtype,), attrs).result

    def _arg(self, slot) -> Value:
        if isinstance(slot.kind, Ptr):
            t = VType(ptr_global, 1, True)
        else:
            t = VType(slot.kind.dtype, 1, True)
        v = self._v("arg", (), t, name=slot.name)
        v.name = slot.name
        return v

    @contextlib.contextmanager
    def _region(self):
        blk = Block()
        self._blocks.append(blk)
        try:
            yield blk
        finally:
            self._blocks.pop()

    # ------------------------------------------------------------------ constants and ids
    def const(self, value, dt) -> Value:
        dt = as_dtype(dt)
        if dt.is_ptr:
            raise DSLError("pointer constants are not allowed; take pointers from arguments or LDS")
        return self._v("const", (), VType(dt, 1, True), value=value)

    def lane_id(self) -> Value:
        return self._v("lane_id", (), VType(i32))

    def wave_id(self) -> Value:
        return self._v("wave_id", (), VType(i32, 1, True))

    def cta_id(self) -> Value:
        self._placement_free("cta_id")
        return self._v("cta_id", (), VType(i32, 1, True))

    def num_ctas(self) -> Value:
        self._placement_free("num_ctas")
        return self._v("num_ctas", (), VType(i32, 1, True))

    def _placement_free(self, what):
        if self._stage is not None:
            raise DSLError(f"stage {self._stage!r} asks for {what}: a stage sees only its job "
                           "index; which CTA runs a job is the scheduler's choice")

    @contextlib.contextmanager
    def stage_scope(self, name: str):
        """While a stage body is emitted, placement (CTA ids, grid size) is off limits."""
        prev, self._stage = self._stage, name
        try:
            yield
        finally:
            self._stage = prev

    def thread_id(self) -> Value:
        return self.wave_id() * self.L + self.lane_id()

    def clock(self) -> Value:
        self.uses.add("clock")
        return self._v("clock", (), VType(u64, 1, True))

    def cycles(self) -> Value:
        """The processor's cycle counter (for cycle accounts inside a job: JobEnv.tally)."""
        self.uses.add("clock")
        return self._v("cycles", (), VType(u64, 1, True))

    # ------------------------------------------------------------------ arithmetic
    def _coerce_pair(self, a, b, what):
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise DSLError(f"{what}: at least one operand must be a kernel value")
        if not isinstance(a, Value):
            a = self.const(a, b.dtype)
        if not isinstance(b, Value):
            b = self.const(b, a.dtype)
        if a.dtype != b.dtype:
            raise DSLError(f"{what}: operand types differ ({a.type} vs {b.type}); cast one")
        if a.n != b.n and 1 not in (a.n, b.n):
            raise DSLError(f"{what}: vector widths differ ({a.type} vs {b.type})")
        return a, b

    @staticmethod
    def _joined(a: Value, b: Value, dt: DType | None = None) -> VType:
        return VType(dt or a.dtype, max(a.n, b.n), a.uniform and b.uniform)

    def binary(self, opcode, a, b) -> Value:
        a, b = self._coerce_pair(a, b, opcode)
        if a.dtype in STORAGE_ONLY:
            raise DSLError(f"{opcode} on {a.dtype}: cast to f32 first ({a.dtype} is a storage type)")
        if a.dtype.is_ptr:
            raise DSLError(f"{opcode} on a pointer: use ptr_add")
        if opcode in ("and", "or", "xor", "shl", "shr", "rem") and a.dtype.is_float:
            raise DSLError(f"{opcode} needs integers, got {a.dtype}")
        return self._v(opcode, (a, b), self._joined(a, b))

    def unary(self, opcode, a) -> Value:
        if a.dtype in STORAGE_ONLY:
            raise DSLError(f"{opcode} on {a.dtype}: cast to f32 first")
        if opcode in ("exp2", "log2", "sqrt", "rsqrt", "sin", "cos") and not a.dtype.is_float:
            raise DSLError(f"{opcode} needs a float, got {a.dtype}")
        if opcode in ("not", "popc", "ctz") and a.dtype.is_float:
            raise DSLError(f"{opcode} needs an integer, got {a.dtype}")
        return self._v(opcode, (a,), a.type)

    def fma(self, a, b, c) -> Value:
        a, b = self._coerce_pair(a, b, "fma")
        a, c = self._coerce_pair(a, c, "fma")
        if not a.dtype.is_float or a.dtype in STORAGE_ONLY:
            raise DSLError(f"fma needs f16/f32/f64, got {a.dtype}")
        t = VType(a.dtype, max(a.n, b.n, c.n), a.uniform and b.uniform and c.uniform)
        return self._v("fma", (a, b, c), t)

    def relu_bf16x2(self, a, b) -> Value:
        """bf16 pair of relu(a) (low half) and relu(b) (high half) as one u32: an MMA's bf16
        A operand built from f32 accumulators in one instruction a pair on sm_90a."""
        a, b = self._coerce_pair(a, b, "relu_bf16x2")
        if a.dtype != f32:
            raise DSLError(f"relu_bf16x2 packs f32 values, got {a.dtype}")
        return self._v("relu_bf16x2", (a, b), self._joined(a, b, u32))

    def cmp(self, pred, a, b) -> Value:
        if pred not in ir.CMP_PREDS:
            raise DSLError(f"unknown comparison {pred!r}; one of {ir.CMP_PREDS}")
        a, b = self._coerce_pair(a, b, f"cmp {pred}")
        if a.dtype in STORAGE_ONLY:
            raise DSLError(f"compare on {a.dtype}: cast to f32 first")
        return self._v("cmp", (a, b), self._joined(a, b, i1), pred=pred)

    def select(self, c, a, b) -> Value:
        if not isinstance(c, Value) or c.dtype != i1:
            raise DSLError(f"select needs an i1 condition, got {c!r}")
        a, b = self._coerce_pair(a, b, "select")
        t = VType(a.dtype, max(a.n, b.n), a.uniform and b.uniform and c.uniform)
        return self._v("select", (c, a, b), t)

    def min(self, a, b): return self.binary("min", a, b)
    def max(self, a, b): return self.binary("max", a, b)
    def exp2(self, a): return self.unary("exp2", a)
    def log2(self, a): return self.unary("log2", a)
    def sqrt(self, a): return self.unary("sqrt", a)
    def rsqrt(self, a): return self.unary("rsqrt", a)
    def sin(self, a): return self.unary("sin", a)
    def cos(self, a): return self.unary("cos", a)
    def abs(self, a): return self.unary("abs", a)
    def popc(self, a): return self.unary("popc", a)
    def ctz(self, a): return self.unary("ctz", a)

    def cast(self, v: Value, dt) -> Value:
        dt = as_dtype(dt)
        if dt.is_ptr or v.dtype.is_ptr:
            raise DSLError(f"cast between {v.dtype} and {dt}: pointers are not cast")
        if v.dtype == dt:
            return v
        return self._v("cast", (v,), v.type.with_(dtype=dt), to=dt)

    def opaque(self, x, dt=None) -> Value:
        """`x` itself (a value, or a Python number of dtype `dt`), which the optimizer may not
        see through here: it is not constant-folded, not hoisted out of a loop and not
        merged with another opaque. Why: a persistent kernel is one loop over its jobs, and
        LLVM hoists every loop-invariant value a stage builds (a 64-bit constant, an
        expected mailbox word, a region's address) out of it, to be held in registers
        across every stage; built from an opaque value inside the job, it is recomputed
        where it is used. (A constant's own move may still be hoisted, but as ONE register
        def LLVM rematerializes under pressure; a 64-bit value built from a constant half
        and a runtime half is a register pair it can only spill.) Scalars of 32 or 64 bits
        (ints, floats, global pointers)."""
        if not isinstance(x, Value):
            if dt is None:
                raise DSLError(f"opaque({x!r}): a Python number needs a dtype")
            x = self.const(x, dt)
        elif dt is not None and as_dtype(dt) != x.dtype:
            raise DSLError(f"opaque: value is {x.type}, dtype {as_dtype(dt)} asked")
        if x.n != 1 or x.dtype.bits not in (32, 64) or x.dtype == ptr_lds:
            raise DSLError(f"opaque takes a 32- or 64-bit scalar (int, float or global "
                           f"pointer), got {x.type}")
        return self._v("opaque", (x,), x.type)

    def bitcast(self, v: Value, dt, n: int | None = None) -> Value:
        dt = as_dtype(dt)
        n = n if n is not None else (v.type.bytes // dt.bytes)
        if n * dt.bytes != v.type.bytes or dt == i1 or v.dtype == i1:
            raise DSLError(f"bitcast {v.type} -> {dt}x{n}: sizes differ ({v.type.bytes} vs "
                           f"{n * dt.bytes} bytes)")
        return self._v("bitcast", (v,), VType(dt, n, v.uniform), to=dt)

    def vec(self, *values) -> Value:
        values = list(values)
        proto = next((x for x in values if isinstance(x, Value)), None)
        if proto is None:
            raise DSLError("vec needs at least one kernel value")
        values = [x if isinstance(x, Value) else self.const(x, proto.dtype) for x in values]
        for x in values:
            if x.dtype != proto.dtype or x.n != 1:
                raise DSLError(f"vec elements must be scalars of one type; got {x.type} and {proto.type}")
        uni = all(x.uniform for x in values)
        return self._v("vec_pack", tuple(values), VType(proto.dtype, len(values), uni))

    def extract(self, v: Value, index: int) -> Value:
        if not 0 <= index < v.n:
            raise DSLError(f"extract index {index} outside a vector of {v.n}")
        return self._v("extract", (v,), v.type.with_(n=1), index=index)

    def insert(self, v: Value, x, index: int) -> Value:
        if not isinstance(x, Value):
            x = self.const(x, v.dtype)
        if not 0 <= index < v.n or x.dtype != v.dtype or x.n != 1:
            raise DSLError(f"insert {x.type} at {index} into {v.type}")
        return self._v("insert", (v, x), v.type.with_(uniform=v.uniform and x.uniform), index=index)

    def split(self, v: Value) -> list[Value]:
        return [self.extract(v, i) for i in range(v.n)]

    # ------------------------------------------------------------------ variables
    def var(self, init, dt=None, name: str | None = None) -> "VarRef":
        if not isinstance(init, Value):
            if dt is None:
                raise DSLError("var(python_number) needs a dtype")
            init = self.const(init, dt)
        elif dt is not None and as_dtype(dt) != init.dtype:
            init = self.cast(init, dt)
        var = Var(init.type, name)
        self._emit("var_new", (init,), (), {"var": var})
        return VarRef(self, var)

    def uniform_var(self, init, dt=None, name=None) -> "VarRef":
        ref = self.var(init, dt, name)
        if not ref.var.type.uniform:
            raise DSLError(f"uniform_var initialised with a per-lane value {init!r}")
        return ref

    def lane_var(self, init, dt=None, name=None) -> "VarRef":
        """A per-lane variable, even if its first value is uniform."""
        if not isinstance(init, Value):
            init = self.const(init, dt)
        return self.var(self._broadcast(init), dt, name)

    def _broadcast(self, v: Value) -> Value:
        """A per-lane copy of a uniform value (select on a per-lane true)."""
        if not v.uniform:
            return v
        t = self.cmp("ge", self.lane_id(), 0)
        return self._v("select", (t, v, v), v.type.with_(uniform=False))

    # ------------------------------------------------------------------ control flow
    def _uniform_cond(self, c, what):
        if not isinstance(c, Value) or c.dtype != i1 or c.n != 1:
            raise DSLError(f"{what} needs an i1 condition, got {c!r}")
        if not c.uniform:
            raise DSLError(f"{what} condition {c!r} is per-lane: control flow is wave-uniform; "
                           "use a mask (load/store mask=) or select")
        return c

    @contextlib.contextmanager
    def if_(self, cond):
        cond = self._uniform_cond(cond, "if_")
        with self._region() as then:
            yield
        self._emit("if", (cond,), (), {}, (then, Block()))

    @contextlib.contextmanager
    def if_else(self, cond):
        """with k.if_else(c) as (then, otherwise): with then: ... ; with otherwise: ..."""
        cond = self._uniform_cond(cond, "if_else")
        blocks = [Block(), Block()]

        @contextlib.contextmanager
        def branch(i):
            self._blocks.append(blocks[i])
            try:
                yield
            finally:
                self._blocks.pop()
        yield branch(0), branch(1)
        self._emit("if", (cond,), (), {}, tuple(blocks))

    def range(self, start, stop=None, step=1, dt=i32, *, unroll: bool | None = None):
        """`for i in k.range(n):` builds one loop whose body is the Python loop body.
        `unroll=False` asks the LLVM backends not to unroll it (a loop whose iterations'
        loads, once unrolled, would all be hoisted and live at once); the interpreter ignores
        it."""
        if stop is None:
            start, stop = 0, start
        vals = []
        for x in (start, stop, step):
            if not isinstance(x, Value):
                x = self.const(x, dt)
            if not x.uniform:
                raise DSLError(f"loop bound {x!r} is per-lane: loops are wave-uniform")
            if x.dtype != as_dtype(dt):
                x = self.cast(x, dt)
            vals.append(x)
        if not isinstance(step, Value) and step <= 0:
            raise DSLError(f"loop step {step} must be positive")
        iv = Value(VType(as_dtype(dt), 1, True), "i")
        with self._region() as body:
            yield iv
        attrs = {"iv": iv}
        if unroll is not None:
            attrs["unroll"] = bool(unroll)
        op = Op("for", tuple(vals), (), attrs, (body,))
        self._blocks[-1].ops.append(op)

    @contextlib.contextmanager
    def while_(self, cond_fn):
        """`with k.while_(lambda: i.get() < n):` - cond_fn builds the (uniform) condition."""
        with self._region() as cond_blk:
            c = self._uniform_cond(cond_fn(), "while_")
            self._emit("yield_cond", (c,))
        with self._region() as body:
            yield
        self._emit("while", (), (), {}, (cond_blk, body))

    # ------------------------------------------------------------------ memory
    def lds_mark(self) -> int:
        """The byte offset where the next LDS allocation would start (before alignment): with
        `lds_rewind`, the linker's overlay of the stages' allocations."""
        return self._lds_top

    def lds_rewind(self, top: int):
        """Let later allocations start at byte `top` again (a mark taken earlier, or the
        highest of several): allocations declared after it may share bytes with ones declared
        before it, which is only sound when the two are never live together (the linker's
        stage overlay: one job at a time, a CTA barrier between jobs)."""
        if not 0 <= top <= self.target.lds_bytes:
            raise DSLError(f"lds_rewind: top {top} outside the {self.target.lds_bytes}-byte LDS")
        self._lds_top = top

    def lds_poison(self, offset: int, nbytes: int):
        """The interpreter's check that no job reads LDS it did not write (op lds_poison):
        LDS bytes [offset, offset + nbytes) are poisoned; nothing on hardware. Every wave may
        run it, between two CTA barriers."""
        if offset < 0 or nbytes < 0:
            raise DSLError(f"lds_poison: offset {offset} and size {nbytes} must be >= 0")
        if nbytes:
            self._emit("lds_poison", (), (), dict(offset=int(offset), nbytes=int(nbytes)))

    def lds_left(self, align: int = 16) -> int:
        """Bytes of LDS a next allocation at `align` could still take (the chip's per-CTA
        budget less what the kernel has declared so far): for a stage choosing between an
        LDS and a register form of the same work."""
        return self.target.lds_bytes - (self._lds_top + align - 1) // align * align

    def lds(self, name: str, dt, count: int, align: int = 16) -> Value:
        """`count` elements of dt in the CTA's LDS, at a multiple of `align` bytes (16, the
        widest LDS access, or more: 1024 for a 128B-swizzled TMA box or wgmma operand)."""
        dt = as_dtype(dt)
        if any(a.name == name for a in self._lds):
            raise DSLError(f"LDS allocation {name!r} declared twice")
        if count <= 0:
            raise DSLError(f"LDS allocation {name!r}: count {count} must be positive")
        if align < 16 or align & (align - 1):
            raise DSLError(f"LDS allocation {name!r}: align {align} must be a power of two >= 16")
        off = (self._lds_top + align - 1) // align * align
        self._lds.append(LDSAlloc(name, dt, count, off))
        self._lds_top = off + dt.bytes * count
        if self._lds_top > self.target.lds_bytes:
            raise DSLError(f"LDS allocations reach {self._lds_top} bytes; {self.target.name} "
                           f"gives a CTA {self.target.lds_bytes}")
        self.uses.add("lds")
        return self._v("lds_base", (), VType(ptr_lds, 1, True), name=name)

    def has_lds(self, name: str) -> bool:
        """Whether an LDS allocation `name` was made in this kernel."""
        return any(a.name == name for a in self._lds)

    def lds_ref(self, name: str) -> Value:
        """A pointer to the LDS allocation `name` made before, emitted here: for a use in a
        region that the allocation's does not enclose (allocated inside an if, used after)."""
        if not self.has_lds(name):
            raise DSLError(f"lds_ref: no LDS allocation named {name!r}")
        return self._v("lds_base", (), VType(ptr_lds, 1, True), name=name)

    def reload_arg(self, name: str) -> Value:
        """Kernel argument `name` read again at this point (the same value as `k.args.name`).
        On AMD it is a fresh load from the kernarg segment that LLVM may not hoist or merge
        with another reload, so a stage of a persistent kernel can hold only its own
        pointers in scalar registers."""
        slot = next((s for s in self.abi.slots if s.name == name), None)
        if slot is None:
            raise DSLError(f"reload_arg: no kernel argument {name!r}")
        proto = getattr(self.args, name)
        v = self._v("arg_reload", (), proto.type, name=name)
        v.name = name
        return v

    def lds_offset(self, name: str) -> int:
        """The byte offset of LDS allocation `name` (e.g. for a wgmma shared-memory
        descriptor, which addresses the CTA's LDS by byte offset)."""
        for a in self._lds:
            if a.name == name:
                return a.offset
        raise DSLError(f"no LDS allocation named {name!r}")

    def ptr_add(self, p: Value, byte_offset) -> Value:
        if not p.dtype.is_ptr:
            raise DSLError(f"ptr_add needs a pointer, got {p.type}")
        if not isinstance(byte_offset, Value):
            byte_offset = self.const(byte_offset, i64)
        if byte_offset.dtype not in (i32, i64):
            raise DSLError(f"ptr_add offset must be i32 or i64, got {byte_offset.type}")
        return self._v("ptr_add", (p, byte_offset), VType(p.dtype, 1, p.uniform and byte_offset.uniform))

    def _addr(self, p, idx, dt, n, what):
        if not isinstance(p, Value) or not p.dtype.is_ptr:
            raise DSLError(f"{what}: first operand must be a pointer, got {p!r}")
        if not isinstance(idx, Value):
            idx = self.const(idx, i32)
        if idx.dtype not in (i32, i64) or idx.n != 1:
            raise DSLError(f"{what}: index must be an i32/i64 scalar, got {idx.type}")
        if n * dt.bytes > MAX_ACCESS_BYTES:
            raise DSLError(f"{what}: {n} x {dt} = {n * dt.bytes} bytes per lane; at most "
                           f"{MAX_ACCESS_BYTES}")
        if dt == i1:
            raise DSLError(f"{what}: i1 has no memory form; use u8")
        return idx

    def _mask(self, mask, what):
        if mask is None:
            return ()
        if not isinstance(mask, Value) or mask.dtype != i1 or mask.n != 1:
            raise DSLError(f"{what}: mask must be an i1 scalar value, got {mask!r}")
        return (mask,)

    @staticmethod
    def _check_order(scope, order, allowed, what):
        if order is not None and order not in allowed:
            raise DSLError(f"{what}: order {order!r} not one of {allowed}")
        if scope not in ir.SCOPES:
            raise DSLError(f"{what}: scope {scope!r} not one of {ir.SCOPES}")

    def load(self, p, idx, dt, n: int = 1, *, mask=None, nontemporal=False, order=None,
             scope="device") -> Value:
        """n elements of dt at p + idx*sizeof(dt). With `order`, an atomic (single-copy) load."""
        dt = as_dtype(dt)
        idx = self._addr(p, idx, dt, n, "load")
        self._check_order(scope, order, ("relaxed", "acquire", "seq_cst"), "load")
        if order is not None and n != 1:
            raise DSLError("atomic loads are scalar (n=1): a vector is several accesses")
        margs = self._mask(mask, "load")
        uni = p.uniform and idx.uniform and not margs
        return self._v("load", (p, idx) + margs, VType(dt, n, uni), dtype=dt, n=n,
                       nontemporal=nontemporal, order=order, scope=scope, masked=bool(margs))

    def store(self, p, idx, value, *, mask=None, nontemporal=False, order=None, scope="device"):
        idx = self._addr(p, idx, value.dtype, value.n, "store")
        self._check_order(scope, order, ("relaxed", "release", "seq_cst"), "store")
        if order is not None and value.n != 1:
            raise DSLError("atomic stores are scalar (n=1): a vector is several accesses")
        margs = self._mask(mask, "store")
        attrs = dict(nontemporal=nontemporal, order=order, scope=scope, masked=bool(margs))
        if margs and self._predicated:
            attrs["predicated"] = True
        self._emit("store", (p, idx, value) + margs, (), attrs)

    @staticmethod
    def _bulk_size(nbytes, what, limit):
        """The size rule of the bulk operations (prefetch_l2, bulk_load_lds)."""
        if not isinstance(nbytes, int) or nbytes <= 0 or nbytes % ir.BULK_ALIGN or nbytes > limit:
            raise DSLError(f"{what}: nbytes {nbytes!r} must be a positive multiple of "
                           f"{ir.BULK_ALIGN} up to {limit}")

    def prefetch_l2(self, p, byte_offset, nbytes: int, *, mask=None, line: bool = False):
        """A hint that bytes [p + byte_offset, + nbytes) of a global buffer will be read soon:
        the L2 starts fetching them while this lane goes on (no register holds them, so a
        stream can have far more bytes in flight than its loads' registers allow). Values are
        never affected; a lane under `mask` = false issues nothing. Address and size
        16-byte multiples; the interpreter faults on a range outside one buffer.
        line=True: the range lies within one L2 line (ir.L2_LINE_BYTES), asked for by the
        load unit (sm_90a `prefetch.global.L2`, one instruction for a wave's lanes) rather
        than by a bulk prefetch (a TMA request each, v13: 512 of them took a CTA ~2.4 us to
        issue); the interpreter faults on a range that crosses a line."""
        self._bulk_size(nbytes, "prefetch_l2", ir.L2_LINE_BYTES if line else ir.MAX_PREFETCH_BYTES)
        if isinstance(p, Value) and p.dtype == ptr_lds:
            raise DSLError(f"prefetch_l2: {p!r} points to LDS; only global memory goes to the L2")
        idx = self._addr(p, byte_offset, u8, 1, "prefetch_l2")
        margs = self._mask(mask, "prefetch_l2")
        attrs = dict(nbytes=nbytes, masked=bool(margs))
        if line:
            attrs["line"] = True
        self._emit("prefetch_l2", (p, idx) + margs, (), attrs)

    def prefetch_rows_l2(self, p, base, rows: int, row_bytes: int, stride: int, piece: int,
                         *, line: bool = False):
        """prefetch_l2 of a 2-D block: `rows` ranges of `row_bytes` bytes, `stride` bytes
        apart, from byte `base` (uniform) of p, in `piece`-byte prefetches spread over the
        CTA's threads (thread t: pieces t, t + T, ...; piece i is row i // (row_bytes //
        piece), in-row offset i % that): each byte asked once. `line`: the pieces are L2
        lines (prefetch_l2's line form: one instruction a wave, not a bulk request a lane)."""
        if row_bytes % piece:
            raise DSLError(f"prefetch_rows_l2: piece {piece} does not divide the "
                           f"{row_bytes}-byte rows")
        per_row, T = row_bytes // piece, self.W * self.L
        total = rows * per_row
        for j in range(-(-total // T)):
            i = self.thread_id() + j * T
            off = i * piece if rows == 1 else (i / per_row) * stride + (i % per_row) * piece
            self.prefetch_l2(p, base + off, piece,
                             mask=(i < total) if (j + 1) * T > total else None, line=line)

    # asynchronous bulk copies into LDS (sm_90a's TMA unit) ---------------------------------
    def _bar(self, bar, what):
        if not isinstance(bar, Value) or bar.dtype != ptr_lds or not bar.uniform:
            raise DSLError(f"{what}: the mbarrier must be a uniform LDS pointer (k.mbarrier()), "
                           f"got {bar!r}")

    def mbarrier(self, name: str, count: int = 1) -> Value:
        """`count` LDS mbarriers of ir.MBARRIER_BYTES each, back to back (uninitialised:
        mbar_init each first, then a CTA barrier so every wave sees them set up)."""
        assert u64.bytes == ir.MBARRIER_BYTES
        return self.lds(name, u64, count)

    def mbar_init(self, bar, count: int = 1):
        """Lane 0 sets up `bar` for `count` arrivals a phase (run it in one wave only)."""
        self._bar(bar, "mbar_init")
        if not isinstance(count, int) or not 1 <= count < (1 << 20):
            raise DSLError(f"mbar_init: count {count!r} must be an int in 1 .. 2**20 - 1")
        self.uses.add("bulk")
        self._emit("mbar_init", (bar,), (), dict(count=count))

    def mbar_arrive_tx(self, bar, nbytes: int):
        """Lane 0 arrives at `bar`, its phase now also waiting for `nbytes` copied bytes."""
        self._bar(bar, "mbar_arrive_tx")
        if not isinstance(nbytes, int) or not 0 <= nbytes <= ir.MAX_BULK_BYTES:
            raise DSLError(f"mbar_arrive_tx: nbytes {nbytes!r} must be an int in 0 .. "
                           f"{ir.MAX_BULK_BYTES}")
        self._emit("mbar_arrive_tx", (bar,), (), dict(nbytes=nbytes))

    def bulk_load_lds(self, dst, src, byte_offset, nbytes: int, bar):
        """Lane 0 starts copying `nbytes` bytes of global `src` + `byte_offset` to LDS `dst`,
        completing them on `bar` (whose phase must expect them: mbar_arrive_tx). Addresses
        and size 16-byte multiples; every operand uniform."""
        self._bar(bar, "bulk_load_lds")
        self._bulk_size(nbytes, "bulk_load_lds", ir.MAX_BULK_BYTES)
        if not isinstance(dst, Value) or dst.dtype != ptr_lds:
            raise DSLError(f"bulk_load_lds: destination {dst!r} is not an LDS pointer")
        if isinstance(src, Value) and src.dtype == ptr_lds:
            raise DSLError(f"bulk_load_lds: source {src!r} must be global memory")
        idx = self._addr(src, byte_offset, u8, 1, "bulk_load_lds")
        if not (dst.uniform and src.uniform and idx.uniform):
            raise DSLError("bulk_load_lds: destination, source and offset must be uniform (one "
                           "copy a wave, issued by its lane 0)")
        self.uses.add("bulk")
        self._emit("bulk_load_lds", (dst, src, idx, bar), (), dict(nbytes=nbytes))

    def tma_load_rows(self, dst, tmap: str, row, bar, col=0):
        """Lane 0 starts a TMA tensor copy: the box of kernel argument `tmap` (an
        ir.TensorMap: box_rows rows of its box_width bytes of the 2-D view of buffer `of`)
        from row `row` and byte `col` of it on (col: a uniform i32, a multiple of 16; 0 with
        whole-row boxes), into LDS `dst`, completing on `bar` (whose phase must expect the
        box's bytes: mbar_arrive_tx). With swizzle 128 the rows land 128B-swizzled
        (atoms.base.swizzled), the layout a wgmma descriptor of swizzle mode 1 reads: `dst`
        then starts on a 1024-byte boundary (atoms.base.SW128_ATOM_BYTES). Why: fp8 wgmma reads
        K-major operands only, and a row-major tile is K-major only swizzled (a no-swizzle
        core matrix is 8 rows of 16 contiguous bytes), which the 1-D bulk copy cannot do."""
        self._bar(bar, "tma_load_rows")
        slot = next((s for s in self.abi.slots if s.name == tmap), None)
        if slot is None or not isinstance(slot.kind, ir.TensorMap):
            raise DSLError(f"tma_load_rows: {tmap!r} is not a TensorMap kernel argument")
        tm = slot.kind
        if not isinstance(dst, Value) or dst.dtype != ptr_lds or not dst.uniform:
            raise DSLError(f"tma_load_rows: destination {dst!r} must be a uniform LDS pointer")
        if not isinstance(row, Value):
            row = self.const(row, i32)
        if row.dtype != i32 or row.n != 1 or not row.uniform:
            raise DSLError(f"tma_load_rows: row must be a uniform i32, got {row!r}")
        if isinstance(col, int):
            if col % ir.BULK_ALIGN or not 0 <= col <= tm.row_bytes - tm.box_width:
                raise DSLError(f"tma_load_rows: col {col} of {tmap!r}; a multiple of "
                               f"{ir.BULK_ALIGN} in 0 .. {tm.row_bytes - tm.box_width}")
            col = self.const(col, i32)
        if not isinstance(col, Value) or col.dtype != i32 or col.n != 1 or not col.uniform:
            raise DSLError(f"tma_load_rows: col must be a uniform i32, got {col!r}")
        self.uses.add("bulk")
        self._emit("tma_load_rows", (dst, getattr(self.args, tmap), getattr(self.args, tm.of),
                                     row, bar, col), (),
                   dict(box_rows=tm.box_rows, row_bytes=tm.row_bytes, swizzle=tm.swizzle,
                        box_width=tm.box_width, nbytes=tm.box_bytes, tmap=tmap))

    # lane-private asynchronous copies into LDS, retired in counted groups
    ASYNC_COPY_BYTES = (4, 8, 16)  # a cp.async moves 4, 8 or 16 bytes a lane
    MAX_ASYNC_PENDING = 7  # groups an async_wait may leave in flight (a 3-bit count)

    def async_copy(self, dst, dst_idx, src, src_idx, dt, n: int = 1):
        """Each lane starts copying n elements of dt (4, 8 or 16 bytes) from global `src` +
        src_idx elements to LDS `dst` + dst_idx elements. The bytes land at some time before
        the async_wait that retires the copy's group (async_commit closes a group); only the
        lane that copied them may read them, after that wait. Why: loads into registers share
        a scoreboard, so a consumer of one step's loads waits for every later load too; a
        counted wait on copies retires exactly the steps it needs."""
        dt = as_dtype(dt)
        if n * dt.bytes not in self.ASYNC_COPY_BYTES:
            raise DSLError(f"async_copy: {n} x {dt} = {n * dt.bytes} bytes a lane; a copy moves "
                           f"{' / '.join(map(str, self.ASYNC_COPY_BYTES))}")
        if not isinstance(dst, Value) or dst.dtype != ptr_lds:
            raise DSLError(f"async_copy: destination {dst!r} is not an LDS pointer")
        if not isinstance(src, Value) or src.dtype == ptr_lds:
            raise DSLError(f"async_copy: source {src!r} must be global memory")
        di = self._addr(dst, dst_idx, dt, n, "async_copy")
        si = self._addr(src, src_idx, dt, n, "async_copy")
        self.uses.add("bulk")
        self._emit("async_copy", (dst, di, src, si), (), dict(dtype=dt, n=n))

    def async_commit(self):
        """Close this lane's open group of async copies."""
        self._emit("async_commit", (), (), {})

    def async_wait(self, pending: int = 0):
        """Wait until at most `pending` of this lane's committed copy groups (the newest) are
        in flight: the older groups' bytes may then be read by the lane that copied them."""
        if not isinstance(pending, int) or not 0 <= pending <= self.MAX_ASYNC_PENDING:
            raise DSLError(f"async_wait: pending {pending!r} must be an int in 0 .. "
                           f"{self.MAX_ASYNC_PENDING}")
        self._emit("async_wait", (), (), dict(pending=pending))

    def mbar_inval(self, bar):
        """Lane 0 invalidates `bar` (run it in one wave, after a CTA barrier: every wave has
        waited for its last phase and no copy is in flight), so a later mbar_init may set it
        up again; the bytes its copies wrote become plain LDS."""
        self._bar(bar, "mbar_inval")
        self._emit("mbar_inval", (bar,), (), {})

    def mbar_wait(self, bar, parity):
        """Wait until the phase of `bar` with this parity (0 or 1: phases alternate) has
        completed; after it this wave may read what the phase's copies wrote."""
        self._bar(bar, "mbar_wait")
        if not isinstance(parity, Value):
            if parity not in (0, 1):
                raise DSLError(f"mbar_wait: parity {parity!r} must be 0 or 1")
            parity = self.const(parity, i32)
        if parity.dtype != i32 or not parity.uniform:
            raise DSLError(f"mbar_wait: parity must be a uniform i32, got {parity.type}")
        self._emit("mbar_wait", (bar, parity), (), {})

    def atomic(self, op, p, idx, value, *, compare=None, mask=None, order="relaxed",
               scope="device") -> Value:
        if op not in ir.ATOMIC_OPS:
            raise DSLError(f"unknown atomic {op!r}; one of {ir.ATOMIC_OPS}")
        if not isinstance(value, Value):
            raise DSLError(f"atomic {op}: value must be a kernel value")
        idx = self._addr(p, idx, value.dtype, 1, f"atomic {op}")
        self._check_order(scope, order, ir.ORDERS, f"atomic {op}")
        if value.n != 1 or value.dtype.bits not in (32, 64):
            raise DSLError(f"atomic {op}: 32- or 64-bit scalars only, got {value.type}")
        if op in ("add", "max", "min") and value.dtype.is_float and op != "add":
            raise DSLError(f"atomic {op} on floats is not portable; use integer keys")
        args = (p, idx, value)
        if op == "cas":
            if compare is None:
                raise DSLError("atomic cas needs compare=")
            if not isinstance(compare, Value):
                compare = self.const(compare, value.dtype)
            args += (compare,)
        margs = self._mask(mask, f"atomic {op}")
        uni = p.uniform and idx.uniform and value.uniform and not margs and \
            (compare is None or compare.uniform)
        extra = {"predicated": True} if margs and self._predicated else {}
        return self._v("atomic", args + margs, VType(value.dtype, 1, uni), op=op, order=order,
                       scope=scope, masked=bool(margs), **extra)

    def count(self, p, idx, mask=None, *, grouped: bool = False):
        """u32 counters p[idx] += 1 on the lanes where `mask` holds (CTA scope: LDS
        histograms). grouped: lanes with the same idx add once, their number (match_any:
        one atomic a distinct idx a wave; sm_90a only). On the H200 grouping measured
        SLOWER wherever tried, even with a whole warp on one bin (bench/NOTES.md v18: the
        match costs more than the same-address lanes of the atomic it saves)."""
        if not grouped:
            self.atomic("add", p, idx, self.const(1, u32), mask=mask, scope="cta")
            return
        if not isinstance(idx, Value) or idx.dtype != i32:
            raise DSLError(f"count: grouped counts need an i32 index, got {idx!r}")
        # lanes outside the mask group under -1, an index no counter has, and do not add
        live = idx if mask is None else self.select(mask, idx, self.const(-1, i32))
        n, lead = self.match_any(live)
        self.atomic("add", p, idx, self.cast(n, u32), mask=lead if mask is None else mask & lead,
                    scope="cta")

    def fence(self, order="acq_rel", scope="device"):
        self._check_order(scope, order, ("acquire", "release", "acq_rel", "seq_cst"), "fence")
        self._emit("fence", (), (), dict(order=order, scope=scope))

    def grid_dep_launch(self):
        """Let the next launch in the stream start its CTAs now (programmatic dependent launch:
        its work before its grid_dep_wait overlaps this grid's rest). Where it stands changes
        timing only, never values."""
        self._emit("grid_dep_launch")

    def grid_dep_wait(self):
        """Wait for every earlier launch in the stream to complete, its memory visible. A
        kernel that has one may be launched with pdl; before it each wave reads only
        Ptr(constant=True) buffers (weights) and writes nothing: the interpreter checks that."""
        self.uses.add("grid_dep")
        self._emit("grid_dep_wait")

    def barrier(self):
        if len(self._blocks) > 1 and self.W > 1:
            # CTA-uniform control flow is the user's promise; the interpreter checks it (a
            # wave that skips a barrier the others wait at is reported as a stall).
            pass
        self._emit("barrier", attrs={"async_proxy": True} if self._async_proxy else None)

    def wave_sync(self):
        """The wave's lanes meet, their LDS (and global) accesses before it visible to one
        another after it: what a lane needs before it reads LDS words another lane of its
        wave wrote (or overwrites words another lane reads) on NVIDIA, whose lanes are
        scheduled independently."""
        self._emit("wave_sync")

    def named_barrier(self, bid, waves: int, *, arrive: bool = False):
        """Named barrier `bid` (uniform i32, 1 .. NAMED_BARRIERS-1) of `waves` waves: with
        arrive=False this wave waits until `waves` waves have reached it (by arriving or
        waiting), with arrive=True it counts itself and goes on. An ordering of warps (e.g.
        warpgroups taking turns at the tensor cores), no memory fence; every completion
        needs exactly `waves` arrivals (the interpreter reports a wave left waiting and a
        count left over at the kernel's end). NVIDIA only: AMD has one barrier a CTA."""
        if self.target.name != "interp" and self.target.vendor != "nvidia":
            raise DSLError(f"named barriers exist on NVIDIA targets, not {self.target.name}")
        if not 1 < waves <= self.W:
            raise DSLError(f"named barrier of {waves} waves: this CTA has {self.W}")
        if not isinstance(bid, Value):
            if not 0 < bid < ir.NAMED_BARRIERS:
                raise DSLError(f"named barrier id {bid}: ids are 1 .. {ir.NAMED_BARRIERS - 1} "
                               "(0 is the CTA barrier's)")
            bid = self.const(bid, i32)
        if not bid.uniform or bid.dtype != i32 or bid.n != 1:
            raise DSLError(f"named barrier id must be a uniform i32 scalar, got {bid!r}")
        self._emit("named_barrier", (bid,), attrs={"waves": waves, "arrive": arrive})

    @contextlib.contextmanager
    def predicated_masks(self):
        """Masked stores and atomics emitted inside are lowered as predicated instructions
        where the target can (NVPTX: `@p st` / `@p atom` inline PTX) instead of a branch
        around each. Where the branches were many and divergent it is faster (the selection's
        scan: an iteration had 48, each a BSSY / BSYNC reconvergence in ptxas's SASS: H200
        select_hist 512K x 8 40.8 -> 38.3 us); the scoring with it measured SLOWER (W2 512K x
        8 112 -> 168 us: each inline asm is a compiler barrier for memory), so it is a
        stage's choice, not a default (bench/NOTES.md v8)."""
        with self._scoped("_predicated"):
            yield

    @contextlib.contextmanager
    def async_proxy_lds(self):
        """Barriers (and wgmma fences) emitted inside also order the CTA's ordinary LDS stores
        before reads by the async proxy (wgmma's B operand from LDS): NVPTX puts `fence.proxy.async` before
        them; other targets ignore it. Only code that stages LDS for wgmma needs it: the
        fence waits for every memory access the thread has in flight (MEMBAR.ALL.CTA in
        the SASS), which in the fused `index` kernel, where every barrier had it, undid
        the selection's load prefetch (bench/NOTES.md v8)."""
        with self._scoped("_async_proxy"):
            yield

    @contextlib.contextmanager
    def _scoped(self, counter: str):
        """Raise an attribute counter for the ops emitted inside (nesting allowed)."""
        setattr(self, counter, getattr(self, counter) + 1)
        try:
            yield
        finally:
            setattr(self, counter, getattr(self, counter) - 1)

    def poll(self, p, idx, expected, *, pred="eq", shift=0, bits=32, dt=u64, scope="device",
             bound=DEFAULT_POLL_BOUND, mask=None):
        """Relaxed loads of p[idx] until ((x >> shift) & (2**bits-1)) <pred> expected holds on every
        active lane, at most `bound` loads. Returns (last value, timed_out: uniform i1)."""
        dt = as_dtype(dt)
        idx = self._addr(p, idx, dt, 1, "poll")
        if pred not in ir.CMP_PREDS:
            raise DSLError(f"poll: unknown predicate {pred!r}")
        if not isinstance(expected, Value):
            expected = self.const(expected, u32 if bits <= 32 else u64)
        if bound < 1:
            raise DSLError(f"poll bound {bound} must be at least 1")
        margs = self._mask(mask, "poll")
        op = self._emit("poll", (p, idx, expected) + margs,
                        (VType(dt, 1, p.uniform and idx.uniform and not margs), VType(i1, 1, True)),
                        dict(pred=pred, shift=shift, bits=bits, dtype=dt, scope=scope, bound=bound,
                             masked=bool(margs)))
        self.uses.add("poll")
        return op.results

    def poll_pause(self) -> Value:
        """The back-off of a polling loop written in the DSL (op poll_pause): call it once a
        round, after a round's loads found the memory not ready and before the next round
        (the interpreter counts the wave as polling what it has seen: a pause before the
        first look would be a stall); stop polling where it returns true (the interpreter
        giving the wait up)."""
        self.uses.add("poll")
        return self._emit("poll_pause", (), (VType(i1, 1, True),), {}).results[0]

    # ------------------------------------------------------------------ cross-lane
    def _lane_value(self, v, what):
        if not isinstance(v, Value) or v.dtype.bits not in (32, 64) or v.n != 1:
            raise DSLError(f"{what} works on 32/64-bit scalars, got {v!r}")
        return v

    def lane_swap(self, v, mask: int) -> Value:
        self._lane_value(v, "lane_swap")
        if mask <= 0 or mask >= self.L or mask & (mask - 1):
            raise DSLError(f"lane_swap mask {mask} must be a power of two below {self.L}")
        return self._v("lane_swap", (v,), v.type.with_(uniform=v.uniform), mask=mask)

    def shuffle(self, v, src_lane) -> Value:
        self._lane_value(v, "shuffle")
        if not isinstance(src_lane, Value):
            src_lane = self.const(src_lane, i32)
        if src_lane.dtype != i32:
            raise DSLError(f"shuffle source lane must be i32, got {src_lane.type}")
        return self._v("shuffle", (v, src_lane), v.type.with_(uniform=v.uniform and src_lane.uniform))

    def wave_reduce(self, v, op="add") -> Value:
        self._lane_value(v, "wave_reduce")
        if op not in ir.REDUCE_OPS:
            raise DSLError(f"wave_reduce op {op!r} not one of {ir.REDUCE_OPS}")
        return self._v("wave_reduce", (v,), v.type.with_(uniform=True), op=op)

    def wave_sum(self, v): return self.wave_reduce(v, "add")
    def wave_max(self, v): return self.wave_reduce(v, "max")

    def ballot(self, pred) -> Value:
        if not isinstance(pred, Value) or pred.dtype != i1:
            raise DSLError(f"ballot needs an i1, got {pred!r}")
        return self._v("ballot", (pred,), VType(u64 if self.L == 64 else u32, 1, True))

    def prefix_count(self, pred) -> Value:
        if not isinstance(pred, Value) or pred.dtype != i1:
            raise DSLError(f"prefix_count needs an i1, got {pred!r}")
        return self._v("prefix_count", (pred,), VType(i32))

    def match_any(self, v) -> tuple[Value, Value]:
        """(lanes holding v's value, this lane is the lowest of them): e.g. one LDS atomic a
        distinct value instead of one a lane, where many lanes of a wave hit one address."""
        if not isinstance(v, Value) or v.dtype.bits != 32 or v.n != 1:
            raise DSLError(f"match_any works on 32-bit scalars, got {v!r}")
        op = self._emit("match_any", (v,), (VType(i32), VType(i1)), {})
        return op.results

    def readfirstlane(self, v) -> Value:
        self._lane_value(v, "readfirstlane")
        return self._v("readfirstlane", (v,), v.type.with_(uniform=True))

    # ------------------------------------------------------------------ matrix
    def _check_atom(self, atom):
        if self.target.name != "interp" and self.target.name not in atom.targets:
            raise DSLError(f"atom {atom.name} does not exist on {self.target.name} "
                           f"(it runs on {sorted(atom.targets)})")
        group = atom.group
        if group == 128:
            if self.L != 32 or self.W % 4:
                raise DSLError(f"{atom.name} is a warpgroup op: needs 32-lane warps in groups of 4")
        elif group != self.L:
            raise DSLError(f"atom {atom.name} runs on {group} lanes; this kernel's wave has {self.L}")

    def _operand(self, v, slots, dt, what, atom):
        if not isinstance(v, Value) or v.n != slots or v.dtype != dt:
            raise DSLError(f"{atom.name} operand {what}: expected {dt}x{slots} per lane, got "
                           f"{v.type if isinstance(v, Value) else v!r}")

    def mma(self, atom, a, b, c) -> Value:
        self._check_atom(atom)
        if atom.group == 128:
            raise DSLError(f"{atom.name} is asynchronous: use wgmma()")
        self._operand(a, atom.a_slots, atom.a_dtype, "A", atom)
        self._operand(b, atom.b_slots, atom.b_dtype, "B", atom)
        self._operand(c, atom.c_slots, atom.acc_dtype, "C", atom)
        self.uses.add("mma")
        return self._v("mma", (a, b, c), VType(atom.acc_dtype, atom.c_slots), atom=atom)

    def wgmma_fence(self):
        """Orders this warp's register writes before the warpgroup MMAs that follow. Inside
        async_proxy_lds() it also fences the warp's own ordinary LDS stores for the async
        proxy (for a warp that writes its own B with no barrier between); elsewhere it does
        not: B staged before an async_proxy_lds() barrier is already fenced, and the proxy
        fence in a key loop waited each step for every load in flight (MEMBAR.ALL.CTA: it
        undid the scoring's key prefetch; bench/NOTES.md v9)."""
        self._emit("wgmma_fence", attrs={"async_proxy": True} if self._async_proxy else None)

    def wgmma(self, atom, a, b_desc, c) -> Value:
        """Issue an asynchronous warpgroup MMA: A from registers (or, for an SS atom,
        atom.a_smem, a uniform u64 descriptor from atom.a_smem_descriptor), B through a
        shared-memory descriptor (atom.smem_descriptor). The result may be read only after
        wgmma_wait."""
        self._check_atom(atom)
        if atom.group != 128:
            raise DSLError(f"{atom.name} is not a warpgroup MMA; use mma()")
        if atom.a_smem is not None:
            if not isinstance(a, Value) or a.dtype != u64 or not a.uniform:
                raise DSLError(f"{atom.name}: A is a uniform u64 shared-memory descriptor, got {a!r}")
        else:
            self._operand(a, atom.a_slots, atom.a_dtype, "A", atom)
        self._operand(c, atom.c_slots, atom.acc_dtype, "C", atom)
        if not isinstance(b_desc, Value) or b_desc.dtype != u64 or not b_desc.uniform:
            raise DSLError(f"{atom.name}: B is a uniform u64 shared-memory descriptor, got {b_desc!r}")
        self.uses.add("wgmma")
        return self._v("wgmma", (a, b_desc, c), VType(atom.acc_dtype, atom.c_slots), atom=atom)

    def wgmma_commit(self):
        self._emit("wgmma_commit")

    def wgmma_wait(self, pending: int = 0):
        self._emit("wgmma_wait", (), (), dict(pending=pending))

    # ------------------------------------------------------------------ result
    def finish(self) -> ir.Kernel:
        assert len(self._blocks) == 1
        return ir.Kernel(self.name, self.abi, self.target.name, self.L, self.W, self._blocks[0],
                         list(self._lds), frozenset(self.uses))


class VarRef:
    """A handle on a mutable variable: `.get()`, `.set(x)`, and `+=`-style helpers."""

    def __init__(self, b: KernelBuilder, var: Var):
        self.b, self.var = b, var

    def get(self) -> Value:
        return self.b._v("var_get", (), self.var.type, var=self.var)

    def set(self, value):
        b = self.b
        if not isinstance(value, Value):
            value = b.const(value, self.var.type.dtype)
        if value.dtype != self.var.type.dtype or value.n != self.var.type.n:
            raise DSLError(f"variable {self.var!r} holds {self.var.type}; cannot set {value.type}")
        if self.var.type.uniform and not value.uniform:
            raise DSLError(f"variable {self.var!r} is uniform; cannot set the per-lane {value!r}")
        b._emit("var_set", (value,), (), {"var": self.var})

    @property
    def v(self) -> Value:
        return self.get()


# The longest poll back-off, in the chip's shortest pauses: AMD's s_sleep takes 7 bits of
# 64-clock units (ISA: SIMM16[6:0]), so SLEEP_UNITS * MAX_POLL_BACKOFF stays within 127
MAX_POLL_BACKOFF = 127


def check_poll_backoff(value, what: str) -> int:
    """`value` if it is a poll back-off (an int in 1 .. MAX_POLL_BACKOFF), else a DSLError
    naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or \
            not 1 <= value <= MAX_POLL_BACKOFF:
        raise DSLError(f"{what}: poll_backoff {value!r} must be an int in 1 .. {MAX_POLL_BACKOFF}")
    return value


def build_kernel(name: str, fn, *, abi: ABI, target: str = "interp", waves: int = 1,
                 wave_size: int | None = None, ctas_per_sm: int = 1, poll_backoff: int = 1,
                 **params) -> ir.Kernel:
    """Run the kernel function `fn(k, **params)` and return the built IR kernel.
    `ctas_per_sm`: how many of its CTAs the kernel must fit per SM (a register bound on
    sm_90a; a grid of more CTAs than SMs that are not persistent). `poll_backoff`: the pause
    between a polling loop's rounds in the chip's shortest pauses (ir.Kernel.poll_backoff),
    1 .. MAX_POLL_BACKOFF."""
    if not isinstance(ctas_per_sm, int) or ctas_per_sm < 1:
        raise DSLError(f"kernel {name}: ctas_per_sm {ctas_per_sm!r} must be a positive int")
    check_poll_backoff(poll_backoff, f"kernel {name}")
    b = KernelBuilder(name, abi, target, waves, wave_size)
    token = _builder.set(b)
    try:
        fn(b, **params)
    finally:
        _builder.reset(token)
    kern = b.finish()
    kern.ctas_per_sm = ctas_per_sm
    kern.poll_backoff = poll_backoff
    try:
        verify(kern)
    except VerifyError as e:
        raise DSLError(f"kernel {name}: {e}") from None
    return kern


# ---------------------------------------------------------------------- Value operators
def _install_operators():
    def bin_(opcode, swap=False):
        def f(self, other):
            b = _cur()
            return b.binary(opcode, other, self) if swap else b.binary(opcode, self, other)
        return f

    def cmp_(pred, swap=False):
        def f(self, other):
            return _cur().cmp(pred, other, self) if swap else _cur().cmp(pred, self, other)
        return f

    for name, opc in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                      ("floordiv", "div"), ("mod", "rem"), ("and", "and"), ("or", "or"),
                      ("xor", "xor"), ("lshift", "shl"), ("rshift", "shr")):
        setattr(Value, f"__{name}__", bin_(opc))
        setattr(Value, f"__r{name}__", bin_(opc, swap=True))
    Value.__lt__ = cmp_("lt")
    Value.__le__ = cmp_("le")
    Value.__gt__ = cmp_("gt")
    Value.__ge__ = cmp_("ge")
    Value.eq = cmp_("eq")
    Value.ne = cmp_("ne")
    Value.__neg__ = lambda self: _cur().unary("neg", self)
    Value.__invert__ = lambda self: _cur().unary("not", self)
    Value.cast = lambda self, dt: _cur().cast(self, dt)
    Value.__bool__ = _no_bool
    Value.__getitem__ = lambda self, i: _cur().extract(self, i)


def _no_bool(self):
    raise DSLError(f"{self!r} is a kernel value, not a Python bool: use k.if_(...) or k.select(...)")


_install_operators()

__all__ = ["ABI", "Ptr", "Scalar", "KernelBuilder", "build_kernel", "DSLError", "VarRef"]
