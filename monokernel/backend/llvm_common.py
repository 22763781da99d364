"""IR -> LLVM IR text, shared by the AMDGCN and NVPTX backends.

Every IR value becomes one LLVM SSA value computed by every lane; uniformity is a property
LLVM's divergence analysis recovers on its own (AMD: SGPRs), so the emitter only has to keep
side effects single: a uniform read-modify-write runs on lane 0 and is broadcast. Mutable
variables and loop counters are allocas that SROA/mem2reg turn into registers. What differs
per vendor (thread ids, cross-lane ops, MMA, fp8 conversion, scopes, the kernel's calling
convention and attributes) is asked of a `Target` hooks object.
"""
from __future__ import annotations

from ..ir import Kernel, access_alignment, Ptr, Value
from ..types import DType, VType, bf16, f16, f32, f64, i1, u8

LLVM_SCALAR = {"i1": "i1", "i8": "i8", "u8": "i8", "i16": "i16", "u16": "i16", "i32": "i32",
               "u32": "i32", "i64": "i64", "u64": "i64", "f16": "half", "bf16": "bfloat",
               "f32": "float", "f64": "double", "fp8e4m3fn": "i8", "fp8e4m3fnuz": "i8"}


from .toolchain import BackendError  # noqa: E402  (one error type for every backend failure)


align_of = access_alignment


LOOP_MD_BASE = 1000  # metadata ids of loop hints (!999: unroll.disable); the targets use !0.. !9


class TargetHooks:
    """What every target shares: global memory in address space 1, LDS / shared memory in 3
    as one `@lds` array, scopes from the subclass's SCOPES table. A target overrides the rest
    (ids, cross-lane ops, MMA, fp8, barriers, the kernel's calling convention)."""
    SCOPES: dict = {}

    def prologue(self, e: "Emitter"):
        pass

    def ptr_type(self, dt: DType) -> str:
        return "ptr addrspace(3)" if dt.name == "ptr_lds" else "ptr addrspace(1)"

    def ptr_type_global(self) -> str:
        return "ptr addrspace(1)"

    def opaque_constraint(self, llvm_type: str, uniform: bool) -> str:
        """The inline-asm register constraint that holds a value of `llvm_type` (op opaque)."""
        raise BackendError(f"{self.name}: no register constraint for opaque {llvm_type}")

    def opaque(self, e: "Emitter", x: str, ty: str, uniform: bool) -> str:
        """x of LLVM type `ty` through the empty asm of op opaque."""
        y = e.fresh("op")
        e.emit(f'{y} = call {ty} asm sideeffect "", "={self.opaque_constraint(ty, uniform)},0"'
               f'({ty} {x})')
        return y

    def syncscope(self, scope: str) -> str:
        return self.SCOPES[scope]

    def _no_bulk(self, what):
        raise BackendError(f"{self.name}: {what}: bulk copies into LDS and mbarriers are lowered "
                           "for sm_90a only (gfx950's LDS DMA loads are not wired)")

    def match_any(self, e: "Emitter", x: str):
        raise BackendError(f"{self.name}: match_any is lowered for sm_90a only (AMD has no "
                           "match instruction: a waterfall over distinct values is not wired)")

    def mbar_init(self, e: "Emitter", bar: str, count: int):
        self._no_bulk("mbar_init")

    def mbar_arrive_tx(self, e: "Emitter", bar: str, nbytes: int):
        self._no_bulk("mbar_arrive_tx")

    def bulk_load_lds(self, e: "Emitter", dst: str, src: str, nbytes: int, bar: str):
        self._no_bulk("bulk_load_lds")

    def tma_load_rows(self, e: "Emitter", dst: str, tmap: str, row: str, bar: str, col: str):
        self._no_bulk("tma_load_rows")

    def mbar_try_wait(self, e: "Emitter", bar: str, parity: str) -> str:
        self._no_bulk("mbar_wait")

    def mbar_inval(self, e: "Emitter", bar: str):
        self._no_bulk("mbar_inval")

    def _no_async(self, what):
        raise BackendError(f"{self.name}: {what}: lane-private async copies into LDS are lowered "
                           "for sm_90a only (cp.async; gfx950's LDS DMA loads are not wired)")

    def async_copy(self, e: "Emitter", dst: str, src: str, nbytes: int):
        self._no_async("async_copy")

    def async_commit(self, e: "Emitter"):
        self._no_async("async_commit")

    def async_wait(self, e: "Emitter", pending: int):
        self._no_async("async_wait")

    def wave_sync(self, e: "Emitter"):
        """op wave_sync: nothing by default: a wave's lanes run in lockstep and its LDS
        accesses complete in order (AMD), so its lanes already see one another's."""

    def grid_dep_launch(self, e: "Emitter"):
        """op grid_dep_launch: nothing by default. AMD's queues start a launch only after the
        one before it (no programmatic dependent launch), so there is nothing to allow early."""

    def grid_dep_wait(self, e: "Emitter"):
        """op grid_dep_wait: nothing by default: where launches never overlap, stream order
        already is the wait (the AMD code objects do not change)."""

    def prefetch_l2(self, e: "Emitter", addr: str, nbytes: int, line: bool = False):
        """op prefetch_l2 (a hint): nothing by default. gfx942 / gfx950 have no instruction
        that fills the L2 without a register destination, so on AMD the hint is dropped
        (their code objects do not change); a target with one overrides this."""

    def predicates_masks(self) -> bool:
        """Whether masked stores / atomics the IR marks `predicated` are lowered as predicated
        instructions (`predicated_store`, `atomic_rmw(pred=...)`) instead of a branch each."""
        return False

    def relu_bf16x2(self, e: "Emitter", a: str, b: str, n: int) -> str:
        """op relu_bf16x2: llvm.maximum on the pair (NaN in, NaN out), one fptrunc of the
        pair to bf16 (round to nearest even; gfx950: one v_cvt_pk_bf16_f32), as one i32."""
        if n != 1:
            raise BackendError(f"{self.name}: relu_bf16x2 on vectors is not lowered")
        v = e.instr(f"insertelement <2 x float> poison, float {a}, i32 0", "rb")
        v = e.instr(f"insertelement <2 x float> {v}, float {b}, i32 1", "rb")
        m = e.call("<2 x float>", "llvm.maximum.v2f32", f"<2 x float> {v}, <2 x float> zeroinitializer")
        t = e.instr(f"fptrunc <2 x float> {m} to <2 x bfloat>", "rb")
        return e.instr(f"bitcast <2 x bfloat> {t} to i32", "rb")

    def lds_pointer(self, e: "Emitter", offset: int) -> str:
        return f"getelementptr (i8, ptr addrspace(3) @lds, i32 {offset})"

    def as_i32_words(self, e: "Emitter", x: str, dt: DType):
        """Split a 32/64-bit value into i32 words and give back a function that joins them."""
        t = e.ty(dt)
        if dt.bits == 32:
            if t == "i32":
                return [x], lambda ps: ps[0]
            b = e.fresh("b")
            e.emit(f"{b} = bitcast {t} {x} to i32")

            def join1(ps):
                o = e.fresh("b")
                e.emit(f"{o} = bitcast i32 {ps[0]} to {t}")
                return o
            return [b], join1
        if dt.bits != 64:
            raise BackendError(f"{self.name}: cross-lane ops move 32/64-bit values, not {dt}")
        v = e.fresh("b")
        e.emit(f"{v} = bitcast {t} {x} to <2 x i32>")
        parts = []
        for i in range(2):
            p = e.fresh("b")
            e.emit(f"{p} = extractelement <2 x i32> {v}, i32 {i}")
            parts.append(p)

        def join(ps):
            a = e.fresh("b")
            e.emit(f"{a} = insertelement <2 x i32> poison, i32 {ps[0]}, i32 0")
            b = e.fresh("b")
            e.emit(f"{b} = insertelement <2 x i32> {a}, i32 {ps[1]}, i32 1")
            o = e.fresh("b")
            e.emit(f"{o} = bitcast <2 x i32> {b} to {t}")
            return o
        return parts, join


class Emitter:
    """Builds one kernel's LLVM module text. `hooks` supplies the target-specific parts."""

    def __init__(self, kernel: Kernel, hooks):
        self.k = kernel
        self.h = hooks
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.decls: set[str] = set()
        self.names: dict[int, str] = {}
        self.vars: dict[int, str] = {}
        # IR ids are process-wide (ir._ids): names number them in this kernel's own order of
        # first use, so its IR text (and the manifest's llvm_ir_sha256, the compile cache's
        # key) does not depend on what else the process built before it
        self.local: dict[int, int] = {}
        self.tmp = 0
        self.block = "entry"

    # ------------------------------------------------------------------ helpers
    def fresh(self, hint="t") -> str:
        self.tmp += 1
        return f"%{hint}.{self.tmp}"

    def label(self, hint) -> str:
        self.tmp += 1
        return f"{hint}.{self.tmp}"

    def instr(self, expr: str, hint: str = "t") -> str:
        """A fresh name defined as `expr` (one instruction); returns the name."""
        name = self.fresh(hint)
        self.emit(f"{name} = {expr}")
        return name

    def emit(self, line: str):
        self.lines.append("  " + line)

    def start_block(self, label: str):
        self.lines.append(f"{label}:")
        self.block = label

    def declare(self, decl: str):
        self.decls.add(decl)

    def ty(self, t: VType | DType, n: int | None = None) -> str:
        if isinstance(t, VType):
            dt, n = t.dtype, t.n if n is None else n
        else:
            dt, n = t, n or 1
        if dt.is_ptr:
            return self.h.ptr_type(dt)
        s = LLVM_SCALAR[dt.name]
        return s if n == 1 else f"<{n} x {s}>"

    def val(self, v: Value, n: int | None = None) -> str:
        """The LLVM name of v, splatted to n lanes of a vector if asked."""
        name = self.names[v.id]
        if n is not None and n > 1 and v.n == 1:
            return self.splat(name, v.dtype, n)
        return name

    def splat(self, name, dt, n):
        s = self.ty(dt)
        ins = self.fresh("spl")
        self.emit(f"{ins} = insertelement <{n} x {s}> poison, {s} {name}, i64 0")
        out = self.fresh("spl")
        self.emit(f"{out} = shufflevector <{n} x {s}> {ins}, <{n} x {s}> poison, <{n} x i32> "
                  "zeroinitializer")
        return out

    def local_id(self, gid: int) -> int:
        """This kernel's number for IR id `gid` (Value, Var or loop variable)."""
        return self.local.setdefault(gid, len(self.local))

    def define(self, v: Value, expr: str):
        name = f"%v.{self.local_id(v.id)}"
        self.emit(f"{name} = {expr}")
        self.names[v.id] = name

    def alias(self, v: Value, name: str):
        self.names[v.id] = name

    def call(self, ret: str, fn: str, args: str, decl_args: str | None = None, attrs="") -> str:
        self.declare(f"declare {ret} @{fn}({decl_args if decl_args is not None else self._argtypes(args)}){(' ' + attrs) if attrs else ''}")
        if ret == "void":
            self.emit(f"call void @{fn}({args})")
            return ""
        out = self.fresh("c")
        self.emit(f"{out} = call {ret} @{fn}({args})")
        return out

    @staticmethod
    def _argtypes(args: str) -> str:
        parts, depth, cur = [], 0, ""
        for ch in args:
            if ch in "<([{":
                depth += 1
            elif ch in ">)]}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur.strip():
            parts.append(cur)
        out = []
        for p in parts:
            p = p.strip()
            if p.startswith("<"):
                out.append(p[:p.index(">") + 1])
            elif p.startswith("ptr addrspace("):
                out.append(p[:p.index(")") + 1])
            else:
                out.append(p.split(" ")[0])
        return ", ".join(out)

    def const_text(self, value, dt: DType) -> str:
        if dt == i1:
            return "true" if value else "false"
        if dt.is_float:
            import struct
            import numpy as np
            from .. import numerics
            if dt in (f32, f16, bf16) or dt.name.startswith("fp8"):
                if dt.name.startswith("fp8"):
                    bits = int(numerics.convert(np.array([float(value)]), f64, dt)[0])
                    return str(bits if bits < 128 else bits - 256)
                x = float(numerics.convert(numerics.convert(np.array([float(value)]), f64, dt), dt, f64)[0])
                if dt == bf16:
                    b = int(numerics.convert(np.array([float(value)]), f64, bf16)[0])
                    return f"0xR{b:04X}"
                if dt == f16:
                    b = int(np.array([x], np.float16).view(np.uint16)[0])
                    return f"0xH{b:04X}"
                return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]
            return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]
        v = int(value)
        if not dt.is_signed and v >= 1 << (dt.bits - 1):
            v -= 1 << dt.bits
        return str(v)

    # ------------------------------------------------------------------ kernel
    def build(self) -> str:
        k = self.k
        params = []
        for s in k.abi.slots:
            if isinstance(s.kind, Ptr):
                params.append(f"{self.h.ptr_type_global()} noundef %{s.name}")
            else:
                params.append(f"{self.ty(s.kind.dtype)} noundef %{s.name}")
        self.h.prologue(self)
        self.lower_block(k.body)
        self.emit("ret void")
        head = self.h.kernel_header(self, k, ", ".join(params))
        body = ["entry:"] + ["  " + a for a in self.allocas] + self.lines
        out = [self.h.module_header(self), *self.h.globals(self)]
        out.append(head + " {")
        out.extend(body)
        out.append("}")
        out.extend(sorted(self.decls))
        out.extend(self.h.module_footer(self))
        return "\n".join(out) + "\n"

    def lower_block(self, blk):
        for op in blk.ops:
            fn = getattr(self, "op_" + op.opcode, None)
            if fn is None:
                raise BackendError(f"{self.h.name}: no lowering for {op.opcode}")
            fn(op)

    # ------------------------------------------------------------------ values
    def op_const(self, op):
        v = op.result
        self.alias(v, self.const_text(op.attrs["value"], v.dtype))

    def op_arg(self, op):
        self.alias(op.result, f"%{op.attrs['name']}")

    def op_arg_reload(self, op):
        name = op.attrs["name"]
        hook = getattr(self.h, "arg_reload", None)
        if hook is None:
            return self.alias(op.result, f"%{name}")
        slot = next(s for s in self.k.abi.slots if s.name == name)
        self.alias(op.result, hook(self, slot, self.ty(op.result.type)))

    def op_opaque(self, op):
        """x through an empty `asm sideeffect` whose output is tied to its input (the same
        register, no instruction): LLVM can neither see the value nor move or merge the asm,
        so what is computed from it stays where the kernel computes it. The register class
        is the target's (`opaque_constraint`); pointers pass as integers of their width."""
        r = op.result
        x, t = self.val(op.args[0]), self.ty(r.type)
        it = f"i{r.dtype.bits}" if r.dtype.is_ptr else t
        if it != t:
            xi = self.fresh("op")
            self.emit(f"{xi} = ptrtoint {t} {x} to {it}")
            x = xi
        y = self.h.opaque(self, x, it, r.uniform)
        if it != t:
            yp = self.fresh("op")
            self.emit(f"{yp} = inttoptr {it} {y} to {t}")
            y = yp
        self.alias(r, y)

    def op_lane_id(self, op): self.alias(op.result, self.h.lane_id(self))
    def op_wave_id(self, op): self.alias(op.result, self.h.wave_id(self))
    def op_cta_id(self, op): self.alias(op.result, self.h.cta_id(self))
    def op_num_ctas(self, op): self.alias(op.result, self.h.num_ctas(self))
    def op_clock(self, op): self.alias(op.result, self.h.clock(self))
    def op_cycles(self, op): self.alias(op.result, self.h.cycles(self))

    _INT = {"add": "add", "sub": "sub", "mul": "mul", "and": "and", "or": "or", "xor": "xor",
            "shl": "shl"}
    _FLT = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv", "rem": "frem"}

    def _binop(self, op):
        r = op.result
        a, b = self.val(op.args[0], r.n), self.val(op.args[1], r.n)
        t = self.ty(r.type)
        dt = r.dtype
        oc = op.opcode
        if dt.is_float:
            if oc in ("min", "max"):
                fn = f"llvm.{'minnum' if oc == 'min' else 'maxnum'}.{self.suffix(r.type)}"
                self.alias(r, self.call(t, fn, f"{t} {a}, {t} {b}"))
                return
            self.define(r, f"{self._FLT[oc]} {t} {a}, {b}")
            return
        signed = dt.is_signed
        if oc in self._INT:
            self.define(r, f"{self._INT[oc]} {t} {a}, {b}")
        elif oc == "div":
            self.define(r, f"{'sdiv' if signed else 'udiv'} {t} {a}, {b}")
        elif oc == "rem":
            self.define(r, f"{'srem' if signed else 'urem'} {t} {a}, {b}")
        elif oc == "shr":
            self.define(r, f"{'ashr' if signed else 'lshr'} {t} {a}, {b}")
        elif oc in ("min", "max"):
            fn = f"llvm.{'s' if signed else 'u'}{oc}.{self.suffix(r.type)}"
            self.alias(r, self.call(t, fn, f"{t} {a}, {t} {b}"))
        else:
            raise BackendError(f"no lowering for {oc} on {dt}")

    op_add = op_sub = op_mul = op_div = op_rem = op_and = op_or = op_xor = _binop
    op_shl = op_shr = op_min = op_max = _binop

    def suffix(self, t: VType) -> str:
        s = LLVM_SCALAR[t.dtype.name]
        s = {"float": "f32", "double": "f64", "half": "f16", "bfloat": "bf16"}.get(s, s)
        return s if t.n == 1 else f"v{t.n}{s}"

    def _unary_intrinsic(self, op, name):
        r = op.result
        t = self.ty(r.type)
        a = self.val(op.args[0])
        self.alias(r, self.call(t, f"llvm.{name}.{self.suffix(r.type)}", f"{t} {a}"))

    def op_neg(self, op):
        r = op.result
        t = self.ty(r.type)
        a = self.val(op.args[0])
        if r.dtype.is_float:
            self.define(r, f"fneg {t} {a}")
        else:
            self.define(r, f"sub {t} zeroinitializer, {a}" if r.n > 1 else f"sub {t} 0, {a}")

    def op_not(self, op):
        r = op.result
        t = self.ty(r.type)
        ones = "true" if r.dtype == i1 else "-1"
        b = self.splat(ones, r.dtype, r.n) if r.n > 1 else ones
        self.define(r, f"xor {t} {self.val(op.args[0])}, {b}")

    def op_abs(self, op):
        r = op.result
        if r.dtype.is_float:
            return self._unary_intrinsic(op, "fabs")
        t = self.ty(r.type)
        self.alias(r, self.call(t, f"llvm.abs.{self.suffix(r.type)}", f"{t} {self.val(op.args[0])}, i1 false"))

    def op_popc(self, op): self._unary_intrinsic(op, "ctpop")

    def op_ctz(self, op):  # i1 true: a is never 0 (the interpreter checks; a cttz defined
        # at 0 is expanded around a branch on NVPTX)
        r = op.result
        t = self.ty(r.type)
        self.alias(r, self.call(t, f"llvm.cttz.{self.suffix(r.type)}",
                                f"{t} {self.val(op.args[0])}, i1 true"))

    def op_exp2(self, op): self._unary_intrinsic(op, "exp2")
    def op_log2(self, op): self._unary_intrinsic(op, "log2")
    def op_sqrt(self, op): self._unary_intrinsic(op, "sqrt")
    def op_sin(self, op): self._unary_intrinsic(op, "sin")
    def op_cos(self, op): self._unary_intrinsic(op, "cos")

    def op_rsqrt(self, op):
        r = op.result
        t = self.ty(r.type)
        s = self.call(t, f"llvm.sqrt.{self.suffix(r.type)}", f"{t} {self.val(op.args[0])}")
        one = self.const_text(1.0, r.dtype)
        one = self.splat(one, r.dtype, r.n) if r.n > 1 else one
        self.define(r, f"fdiv {t} {one}, {s}")

    def op_fma(self, op):
        r = op.result
        t = self.ty(r.type)
        a, b, c = (self.val(x, r.n) for x in op.args)
        self.alias(r, self.call(t, f"llvm.fma.{self.suffix(r.type)}", f"{t} {a}, {t} {b}, {t} {c}"))

    _ICMP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
    _FCMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}

    def op_cmp(self, op):
        r = op.result
        a, b = op.args
        n = r.n
        ta = self.ty(a.type, n)
        x, y = self.val(a, n), self.val(b, n)
        p = op.attrs["pred"]
        if a.dtype.is_float:
            self.define(r, f"fcmp {self._FCMP[p]} {ta} {x}, {y}")
        elif a.dtype.is_ptr:
            self.define(r, f"icmp {p if p in ('eq', 'ne') else 'u' + p} {ta} {x}, {y}")
        elif p in ("eq", "ne"):
            self.define(r, f"icmp {p} {ta} {x}, {y}")
        else:
            self.define(r, f"icmp {'s' if a.dtype.is_signed else 'u'}{p} {ta} {x}, {y}")

    def op_select(self, op):
        r = op.result
        c, a, b = op.args
        t = self.ty(r.type)
        # a vector condition selects per element (the DSL and the interpreter allow it)
        ct = self.ty(c.type, r.n) if c.n > 1 else "i1"
        self.define(r, f"select {ct} {self.val(c, r.n if c.n > 1 else None)}, "
                       f"{t} {self.val(a, r.n)}, {t} {self.val(b, r.n)}")

    def op_relu_bf16x2(self, op):
        r = op.result
        a, b = (self.val(x, r.n) for x in op.args)
        self.alias(r, self.h.relu_bf16x2(self, a, b, r.n))

    def op_cast(self, op):
        src, r = op.args[0], op.result
        self.alias(r, self.convert(self.val(src), src.dtype, r.dtype, r.n))

    def convert(self, x: str, s: DType, d: DType, n: int) -> str:
        ts, td = self.ty(s, n), self.ty(d, n)
        out = self.fresh("cv")
        if s.name.startswith("fp8") or d.name.startswith("fp8"):
            if s.name.startswith("fp8") and d.name.startswith("fp8"):
                return self.convert(self.convert(x, s, f32, n), f32, d, n)
            if s.name.startswith("fp8"):
                f = self.h.fp8_to_f32(self, x, s, n)
                return f if d == f32 else self.convert(f, f32, d, n)
            xf = x if s == f32 else self.convert(x, s, f32, n)
            return self.h.f32_to_fp8(self, xf, d, n)
        if s == i1:
            if d.is_float:
                self.emit(f"{out} = uitofp {ts} {x} to {td}")
            else:
                self.emit(f"{out} = zext {ts} {x} to {td}")
            return out
        if d == i1:
            zero = "zeroinitializer" if n > 1 else ("0.0" if s.is_float else "0")
            self.emit(f"{out} = {'fcmp one' if s.is_float else 'icmp ne'} {ts} {x}, {zero}")
            return out
        if s.is_float and d.is_float:
            if s.bits == d.bits:  # f16 <-> bf16: through f32 (f16 -> f32 is exact)
                return self.convert(self.convert(x, s, f32, n), f32, d, n)
            self.emit(f"{out} = {'fpext' if d.bits > s.bits else 'fptrunc'} {ts} {x} to {td}")
        elif s.is_float:
            fn = f"llvm.fpto{'s' if d.is_signed else 'u'}i.sat.{self.suffix(VType(d, n))}.{self.suffix(VType(s, n))}"
            return self.call(td, fn, f"{ts} {x}")
        elif d.is_float:
            self.emit(f"{out} = {'sitofp' if s.is_signed else 'uitofp'} {ts} {x} to {td}")
        elif d.bits < s.bits:
            self.emit(f"{out} = trunc {ts} {x} to {td}")
        elif d.bits > s.bits:
            self.emit(f"{out} = {'sext' if s.is_signed else 'zext'} {ts} {x} to {td}")
        else:
            return x
        return out

    def op_bitcast(self, op):
        src, r = op.args[0], op.result
        self.define(r, f"bitcast {self.ty(src.type)} {self.val(src)} to {self.ty(r.type)}")

    def pack(self, names: list[str], scalar: str) -> str:
        """An LLVM vector <n x scalar> built from n scalar values (one value: itself)."""
        if len(names) == 1:
            return names[0]
        cur = "poison"
        for i, o in enumerate(names):
            nxt = self.fresh("pk")
            self.emit(f"{nxt} = insertelement <{len(names)} x {scalar}> {cur}, {scalar} {o}, i32 {i}")
            cur = nxt
        return cur

    def op_vec_pack(self, op):
        r = op.result
        self.alias(r, self.pack([self.val(x) for x in op.args], self.ty(r.dtype)))

    def op_extract(self, op):
        v = op.args[0]
        if v.n == 1:
            return self.alias(op.result, self.val(v))
        self.define(op.result, f"extractelement {self.ty(v.type)} {self.val(v)}, i32 {op.attrs['index']}")

    def op_insert(self, op):
        v, x = op.args
        self.define(op.result, f"insertelement {self.ty(v.type)} {self.val(v)}, "
                               f"{self.ty(x.type)} {self.val(x)}, i32 {op.attrs['index']}")

    def op_ptr_add(self, op):
        p, off = op.args
        self.define(op.result, f"getelementptr i8, {self.ty(p.type)} {self.val(p)}, "
                               f"{self.ty(off.type)} {self.val(off)}")

    # ------------------------------------------------------------------ memory
    def op_lds_base(self, op):
        alloc = next(a for a in self.k.lds if a.name == op.attrs["name"])
        self.alias(op.result, self.h.lds_pointer(self, alloc.offset))

    def address(self, p: Value, idx: Value, dt: DType) -> str:
        g = self.fresh("gep")
        ety = self.ty(dt)
        self.emit(f"{g} = getelementptr inbounds {ety}, {self.ty(p.type)} {self.val(p)}, "
                  f"{self.ty(idx.type)} {self.val(idx)}")
        return g

    def sync(self, scope: str) -> str:
        s = self.h.syncscope(scope)
        return f' syncscope("{s}")' if s else ""

    _ORD = {"relaxed": "monotonic", "acquire": "acquire", "release": "release",
            "acq_rel": "acq_rel", "seq_cst": "seq_cst"}

    def guarded(self, cond: str | None, body, ret_ty: str | None, zero: str | None):
        """Run `body()` (emits code, returns its value name or None) only where `cond` holds."""
        if cond is None:
            return body()
        then, join = self.label("then"), self.label("join")
        start = self.block
        self.emit(f"br i1 {cond}, label %{then}, label %{join}")
        self.start_block(then)
        res = body()
        end = self.block
        self.emit(f"br label %{join}")
        self.start_block(join)
        if ret_ty is None:
            return None
        out = self.fresh("ph")
        self.emit(f"{out} = phi {ret_ty} [ {res}, %{end} ], [ {zero}, %{start} ]")
        return out

    def _mask(self, op, pos):
        return self.val(op.args[pos]) if op.attrs.get("masked") else None

    def op_load(self, op):
        p, idx = op.args[:2]
        dt, n = op.attrs["dtype"], op.attrs["n"]
        t = self.ty(dt, n)
        order = op.attrs.get("order")

        def body():
            g = self.address(p, idx, dt)
            out = self.fresh("ld")
            if order:
                self.emit(f"{out} = load atomic {t}, {self.ty(p.type)} {g}{self.sync(op.attrs['scope'])} "
                          f"{self._ORD[order]}, align {align_of(n * dt.bytes)}")
            else:
                nt = ", !nontemporal !0" if op.attrs.get("nontemporal") else ""
                self.emit(f"{out} = load {t}, {self.ty(p.type)} {g}, align {align_of(n * dt.bytes)}{nt}")
            return out
        res = self.guarded(self._mask(op, 2), body, t, "zeroinitializer" if n > 1 else self.zero(dt))
        self.alias(op.result, res)

    def zero(self, dt):
        if dt.is_float and not dt.name.startswith("fp8"):
            return {"bfloat": "0xR0000", "half": "0xH0000"}.get(LLVM_SCALAR[dt.name], "0.0")
        return "false" if dt == i1 else "0"

    def op_store(self, op):
        p, idx, v = op.args[:3]
        order = op.attrs.get("order")
        t = self.ty(v.type)
        mask = self._mask(op, 3)
        addr = None
        if (mask is not None and op.attrs.get("predicated") and not order
                and not op.attrs.get("nontemporal") and self.h.predicates_masks()):
            # a target that predicates the store itself (no branch around it), where it can
            addr = self.address(p, idx, v.dtype)
            if self.h.predicated_store(self, mask, v.type, self.val(v), self.ty(p.type), addr):
                return

        def body():
            g = addr or self.address(p, idx, v.dtype)
            if order:
                self.emit(f"store atomic {t} {self.val(v)}, {self.ty(p.type)} {g}"
                          f"{self.sync(op.attrs['scope'])} {self._ORD[order]}, align {align_of(v.type.bytes)}")
            else:
                nt = ", !nontemporal !0" if op.attrs.get("nontemporal") else ""
                self.emit(f"store {t} {self.val(v)}, {self.ty(p.type)} {g}, align {align_of(v.type.bytes)}{nt}")
        self.guarded(mask, body, None, None)

    _RMW = {"add": ("add", "add", "fadd"), "max": ("max", "umax", None), "min": ("min", "umin", None),
            "exch": ("xchg", "xchg", "xchg"), "or": ("or", "or", None), "and": ("and", "and", None)}

    def op_atomic(self, op):
        kind = op.attrs["op"]
        p, idx, v = op.args[:3]
        dt = v.dtype
        t = self.ty(dt)
        order = self._ORD[op.attrs["order"]]
        sync = self.sync(op.attrs["scope"])
        r = op.result

        def body():
            g = self.address(p, idx, dt)
            out = self.fresh("at")
            if kind == "cas":
                fail = {"release": "monotonic", "acq_rel": "acquire"}.get(order, order)
                pair = self.fresh("cx")
                self.emit(f"{pair} = cmpxchg {self.ty(p.type)} {g}, {t} {self.val(op.args[3])}, "
                          f"{t} {self.val(v)}{sync} {order} {fail}, align {dt.bytes}")
                self.emit(f"{out} = extractvalue {{ {t}, i1 }} {pair}, 0")
            else:
                signed_op, unsigned_op, float_op = self._RMW[kind]
                rmw = float_op if dt.is_float else (signed_op if dt.is_signed else unsigned_op)
                if hasattr(self.h, "atomic_rmw"):  # a target whose LLVM drops order/scope
                    return self.h.atomic_rmw(self, rmw, dt, g, self.ty(p.type), self.val(v),
                                             op.attrs["order"], op.attrs["scope"], pred=pred)
                self.emit(f"{out} = atomicrmw {rmw} {self.ty(p.type)} {g}, {t} {self.val(v)}{sync} "
                          f"{order}, align {dt.bytes}")
            return out
        mask = self._mask(op, 4 if kind == "cas" else 3)
        # a target's inline atomic takes the mask as its predicate (no branch around it)
        pred = None
        if (mask is not None and op.attrs.get("predicated") and kind != "cas" and not r.uniform
                and self.h.predicates_masks()):
            pred, mask = mask, None
        if r.uniform:
            # one read-modify-write per wave, however many lanes run this code
            lane0 = self.fresh("l0")
            self.emit(f"{lane0} = icmp eq i32 {self.h.lane_id(self)}, 0")
            res = self.guarded(lane0, body, t, self.zero(dt))
            self.alias(r, self.h.broadcast_first(self, res, dt))
        else:
            self.alias(r, self.guarded(mask, body, t, self.zero(dt)))

    # bulk copies into LDS: lane 0 issues (uniform operands), every lane waits
    def _lane0(self, body):
        lane0 = self.fresh("l0")
        self.emit(f"{lane0} = icmp eq i32 {self.h.lane_id(self)}, 0")
        self.guarded(lane0, body, None, None)

    def op_mbar_init(self, op):
        bar = self.val(op.args[0])
        self._lane0(lambda: self.h.mbar_init(self, bar, op.attrs["count"]))

    def op_mbar_arrive_tx(self, op):
        bar = self.val(op.args[0])
        self._lane0(lambda: self.h.mbar_arrive_tx(self, bar, op.attrs["nbytes"]))

    def op_bulk_load_lds(self, op):
        dst, src, idx, bar = op.args
        self._lane0(lambda: self.h.bulk_load_lds(self, self.val(dst), self.address(src, idx, u8),
                                                 op.attrs["nbytes"], self.val(bar)))

    def op_tma_load_rows(self, op):
        dst, tmap, _, row, bar, col = op.args  # (the buffer itself is the interpreter's)
        self._lane0(lambda: self.h.tma_load_rows(self, self.val(dst), self.val(tmap),
                                                 self.val(row), self.val(bar), self.val(col)))

    def op_async_copy(self, op):
        dst, di, src, si = op.args
        dt = op.attrs["dtype"]
        self.h.async_copy(self, self.address(dst, di, dt), self.address(src, si, dt),
                          op.attrs["n"] * dt.bytes)

    def op_async_commit(self, op): self.h.async_commit(self)
    def op_async_wait(self, op): self.h.async_wait(self, op.attrs["pending"])

    def op_mbar_inval(self, op):
        bar = self.val(op.args[0])
        self._lane0(lambda: self.h.mbar_inval(self, bar))

    def op_mbar_wait(self, op):
        bar, parity = (self.val(x) for x in op.args)
        head, done = self.label("mbw"), self.label("mbwd")
        self.emit(f"br label %{head}")
        self.start_block(head)
        ok = self.h.mbar_try_wait(self, bar, parity)
        self.emit(f"br i1 {ok}, label %{done}, label %{head}")
        self.start_block(done)

    def op_prefetch_l2(self, op):
        p, idx = op.args[:2]
        mask = self._mask(op, 2)
        self.guarded(mask, lambda: self.h.prefetch_l2(self, self.address(p, idx, u8),
                                                      op.attrs["nbytes"],
                                                      op.attrs.get("line", False)), None, None)

    def op_poll_pause(self, op):
        self.h.backoff(self)
        self.alias(op.results[0], "false")

    def op_grid_dep_launch(self, op):
        self.h.grid_dep_launch(self)

    def op_grid_dep_wait(self, op):
        self.h.grid_dep_wait(self)

    def op_fence(self, op):
        self.emit(f"fence{self.sync(op.attrs['scope'])} {self._ORD[op.attrs['order']]}")

    def op_barrier(self, op):
        self.h.barrier(self, async_proxy=bool(op.attrs.get("async_proxy")))

    def op_lds_poison(self, op):
        """The interpreter's LDS check: nothing on hardware."""

    def op_wave_sync(self, op):
        self.h.wave_sync(self)

    def op_named_barrier(self, op):
        self.h.named_barrier(self, self.val(op.args[0]), op.attrs["waves"], op.attrs["arrive"])

    def op_poll(self, op):
        p, idx, expected = op.args[:3]
        dt = op.attrs["dtype"]
        t = self.ty(dt)
        head, body_l, done = self.label("poll"), self.label("pollw"), self.label("polld")
        entry = self.block
        mask = self._mask(op, 3)
        self.emit(f"br label %{head}")
        self.start_block(head)
        count = self.fresh("pc")
        nxt = self.fresh("pn")
        self.emit(f"{count} = phi i32 [ 0, %{entry} ], [ {nxt}, %{body_l} ]")

        def load():
            g = self.address(p, idx, dt)
            x = self.fresh("px")
            self.emit(f"{x} = load atomic {t}, {self.ty(p.type)} {g}{self.sync(op.attrs['scope'])} "
                      f"monotonic, align {dt.bytes}")
            return x
        x = self.guarded(mask, load, t, "0")
        x64 = x if dt.bits == 64 else self._zext(x, t, "i64")
        f = self.fresh("pf")
        self.emit(f"{f} = lshr i64 {x64}, {op.attrs['shift']}")
        bits = op.attrs["bits"]
        if bits < 64:
            f2 = self.fresh("pf")
            self.emit(f"{f2} = and i64 {f}, {(1 << bits) - 1}")
            f = f2
        e = self.val(expected)
        e64 = e if expected.dtype.bits == 64 else self._zext(e, self.ty(expected.dtype), "i64")
        ok = self.fresh("pok")
        pr = op.attrs["pred"]
        self.emit(f"{ok} = icmp {pr if pr in ('eq', 'ne') else 'u' + pr} i64 {f}, {e64}")
        if mask is not None:
            nm = self.fresh("pnm")
            self.emit(f"{nm} = xor i1 {mask}, true")
            ok2 = self.fresh("pok")
            self.emit(f"{ok2} = or i1 {ok}, {nm}")
            ok = ok2
        allok = self.h.wave_all(self, ok)
        self.emit(f"{nxt} = add i32 {count}, 1")
        out_of = self.fresh("pto")
        self.emit(f"{out_of} = icmp uge i32 {nxt}, {op.attrs['bound']}")
        stop = self.fresh("pst")
        self.emit(f"{stop} = or i1 {allok}, {out_of}")
        self.emit(f"br i1 {stop}, label %{done}, label %{body_l}")
        self.start_block(body_l)
        self.h.backoff(self)
        self.emit(f"br label %{head}")
        self.start_block(done)
        self.alias(op.results[0], x)
        to = self.fresh("ptimed")
        self.emit(f"{to} = xor i1 {allok}, true")
        self.alias(op.results[1], to)

    def _zext(self, x, t, to):
        out = self.fresh("zx")
        self.emit(f"{out} = zext {t} {x} to {to}")
        return out

    # ------------------------------------------------------------------ cross-lane
    def op_lane_swap(self, op):
        v = op.args[0]
        if v.uniform:
            return self.alias(op.result, self.val(v))
        self.alias(op.result, self.h.lane_swap(self, self.val(v), v.dtype, op.attrs["mask"]))

    def op_shuffle(self, op):
        v, src = op.args
        if v.uniform:
            return self.alias(op.result, self.val(v))
        self.alias(op.result, self.h.shuffle(self, self.val(v), v.dtype, self.val(src)))

    def op_wave_reduce(self, op):
        v = op.args[0]
        dt = v.dtype
        kind = op.attrs["op"]
        cur = self.val(v)
        s = self.k.wave_size // 2
        while s >= 1:  # the interpreter's butterfly: same pairing order, same bits
            other = self.h.lane_swap(self, cur, dt, s)
            cur = self.combine(kind, dt, cur, other)
            s //= 2
        self.alias(op.result, self.h.broadcast_first(self, cur, dt))

    def combine(self, kind, dt, a, b):
        t = self.ty(dt)
        out = self.fresh("rd")
        if dt.is_float:
            if kind == "add":
                self.emit(f"{out} = fadd {t} {a}, {b}")
                return out
            return self.call(t, f"llvm.{'maxnum' if kind == 'max' else 'minnum'}.{self.suffix(VType(dt))}",
                             f"{t} {a}, {t} {b}")
        if kind in ("add", "or", "and"):
            self.emit(f"{out} = {kind} {t} {a}, {b}")
            return out
        fn = f"llvm.{'s' if dt.is_signed else 'u'}{kind}.{self.suffix(VType(dt))}"
        return self.call(t, fn, f"{t} {a}, {t} {b}")

    def op_ballot(self, op):
        self.alias(op.result, self.h.ballot(self, self.val(op.args[0])))

    def op_prefix_count(self, op):
        self.alias(op.result, self.h.prefix_count(self, self.val(op.args[0])))

    def op_match_any(self, op):
        n, lead = self.h.match_any(self, self.val(op.args[0]))
        self.alias(op.results[0], n)
        self.alias(op.results[1], lead)

    def op_readfirstlane(self, op):
        v = op.args[0]
        if v.uniform:
            return self.alias(op.result, self.val(v))
        self.alias(op.result, self.h.broadcast_first(self, self.val(v), v.dtype))

    # ------------------------------------------------------------------ matrix
    def op_mma(self, op):
        self.alias(op.result, self.h.mma(self, op))

    def op_wgmma_fence(self, op):
        self.h.wgmma_fence(self, async_proxy=bool(op.attrs.get("async_proxy")))
    def op_wgmma_commit(self, op): self.h.wgmma_commit(self)
    def op_wgmma_wait(self, op): self.h.wgmma_wait(self, op.attrs["pending"])

    def op_wgmma(self, op):
        self.alias(op.result, self.h.wgmma(self, op))

    # ------------------------------------------------------------------ state and control
    def _var_slot(self, var) -> str:
        if var.id not in self.vars:
            name = f"%var.{self.local_id(var.id)}"
            self.allocas.append(f"{name} = alloca {self.ty(var.type)}, align 16{self.h.alloca_suffix()}")
            self.vars[var.id] = name
        return self.vars[var.id]

    def op_var_new(self, op):
        v = op.args[0]
        var = op.attrs["var"]
        slot = self._var_slot(var)
        self.emit(f"store {self.ty(var.type)} {self.val(v, var.type.n)}, {self.h.alloca_ptr()} {slot}")

    def op_var_get(self, op):
        var = op.attrs["var"]
        self.define(op.result, f"load {self.ty(var.type)}, {self.h.alloca_ptr()} {self._var_slot(var)}")

    def op_var_set(self, op):
        var = op.attrs["var"]
        self.emit(f"store {self.ty(var.type)} {self.val(op.args[0], var.type.n)}, "
                  f"{self.h.alloca_ptr()} {self._var_slot(var)}")

    def op_if(self, op):
        then, other, join = self.label("if"), self.label("else"), self.label("endif")
        self.emit(f"br i1 {self.val(op.args[0])}, label %{then}, label %{other}")
        self.start_block(then)
        self.lower_block(op.regions[0])
        self.emit(f"br label %{join}")
        self.start_block(other)
        self.lower_block(op.regions[1])
        self.emit(f"br label %{join}")
        self.start_block(join)

    def op_for(self, op):
        start, stop, step = op.args
        iv = op.attrs["iv"]
        t = self.ty(iv.dtype)
        slot = f"%iv.{self.local_id(iv.id)}"
        self.allocas.append(f"{slot} = alloca {t}, align 8{self.h.alloca_suffix()}")
        self.emit(f"store {t} {self.val(start)}, {self.h.alloca_ptr()} {slot}")
        cond, body, exit_ = self.label("for"), self.label("body"), self.label("endfor")
        self.emit(f"br label %{cond}")
        self.start_block(cond)
        cur = self.fresh("i")
        self.emit(f"{cur} = load {t}, {self.h.alloca_ptr()} {slot}")
        c = self.fresh("lc")
        self.emit(f"{c} = icmp {'s' if iv.dtype.is_signed else 'u'}lt {t} {cur}, {self.val(stop)}")
        self.emit(f"br i1 {c}, label %{body}, label %{exit_}")
        self.start_block(body)
        self.alias(iv, cur)
        self.lower_block(op.regions[0])
        nxt = self.fresh("i")
        self.emit(f"{nxt} = add {t} {cur}, {self.val(step)}")
        self.emit(f"store {t} {nxt}, {self.h.alloca_ptr()} {slot}")
        if op.attrs.get("unroll") is False:  # k.range(..., unroll=False): loop metadata
            md = LOOP_MD_BASE + sum(1 for d in self.decls if d.startswith("!") and "distinct" in d)
            self.decls.add(f'!{LOOP_MD_BASE - 1} = !{{!"llvm.loop.unroll.disable"}}')
            self.decls.add(f"!{md} = distinct !{{!{md}, !{LOOP_MD_BASE - 1}}}")
            self.emit(f"br label %{cond}, !llvm.loop !{md}")
        else:
            self.emit(f"br label %{cond}")
        self.start_block(exit_)

    def op_while(self, op):
        cond, body, exit_ = self.label("while"), self.label("wbody"), self.label("endwhile")
        self.emit(f"br label %{cond}")
        self.start_block(cond)
        self._pending_while = (body, exit_)
        self.lower_block(op.regions[0])
        self.start_block(body)
        self.lower_block(op.regions[1])
        self.emit(f"br label %{cond}")
        self.start_block(exit_)

    def op_yield_cond(self, op):
        body, exit_ = self._pending_while
        self.emit(f"br i1 {self.val(op.args[0])}, label %{body}, label %{exit_}")


def lower(kernel: Kernel, hooks) -> str:
    return Emitter(kernel, hooks).build()
