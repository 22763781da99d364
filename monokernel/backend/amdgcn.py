"""AMDGCN backend: the target hooks of llvm_common for gfx950 (CDNA4) and gfx942 (CDNA3), and
`build_amdgcn(kernel, chip)` -> code object bytes.

Choices, with the hardware fact behind each:
- lane swaps: xor 1/2 by DPP quad_perm (no LDS traffic), xor 4/8/16 by `ds_swizzle`
  bitmask mode (within 32 lanes), xor 32 by `v_permlane32_swap` on gfx950 and `ds_bpermute`
  on gfx942, which lacks the permlane swaps.
- fp8: `v_cvt_pk_fp8_f32` / `v_cvt_f32_fp8` read the chip's own format (OCP e4m3fn on
  gfx950, e4m3fnuz on gfx942); the IR's saturating rule is kept by clamping first.
- scopes: wave -> "wavefront", cta -> "workgroup", device -> "agent" (gfx942 sets sc1 for it),
  system -> "" (LLVM's system scope).
- kernels carry `amdgpu-no-*` attributes for every implicit input they do not read, so the
  dispatch needs only the kernarg pointer (tinygrad's emulator supplies nothing else).
"""
from __future__ import annotations

from ..ir import Kernel
from ..types import DType, fp8e4m3fn, fp8e4m3fnuz
from .llvm_common import TargetHooks, BackendError, Emitter, lower

CODE_OBJECT_VERSION = 500
SCOPES = {"wave": "wavefront", "cta": "workgroup", "device": "agent", "system": ""}
DPP_QUAD_PERM = {1: 0xB1, 2: 0x4E}  # quad_perm [1,0,3,2] and [2,3,0,1]
SWIZZLE_AND_ALL = 0x1F  # ds_swizzle bitmask mode: and_mask keeps all 5 lane bits
FP8_NATIVE = {"gfx950": fp8e4m3fn, "gfx942": fp8e4m3fnuz}
FP8_MAX = {"fp8e4m3fn": 448.0, "fp8e4m3fnuz": 240.0}
SLEEP_UNITS = 1  # s_sleep 1 = 64 clocks between polls: off the memory path, still prompt


class AMDGCNHooks(TargetHooks):
    SCOPES = SCOPES
    name = "amdgcn"

    def __init__(self, chip: str):
        if chip not in FP8_NATIVE:
            raise ValueError(f"unknown AMD chip {chip!r}; known: {sorted(FP8_NATIVE)}")
        self.chip = chip

    # module ---------------------------------------------------------------------------
    def module_header(self, e: Emitter) -> str:
        return 'target triple = "amdgcn-amd-amdhsa"\n'

    def globals(self, e: Emitter):
        if e.k.lds_bytes:
            yield (f"@lds = internal addrspace(3) global [{e.k.lds_bytes} x i8] poison, align 16")

    def module_footer(self, e: Emitter):
        yield "!llvm.module.flags = !{!1}"
        yield "!0 = !{i32 1}"
        yield f'!1 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION}}}'
        yield f"attributes #0 = {{ {self.kernel_attrs(e.k)} }}"

    def kernel_attrs(self, k: Kernel) -> str:
        attrs = {"amdgpu-flat-work-group-size": f"{k.threads},{k.threads}",
                 "target-cpu": self.chip, "uniform-work-group-size": "true"}
        unused = ["dispatch-ptr", "queue-ptr", "dispatch-id", "workgroup-id-y", "workgroup-id-z",
                  "workitem-id-y", "workitem-id-z", "lds-kernel-id", "hostcall-ptr", "heap-ptr",
                  "multigrid-sync-arg", "completion-action", "default-queue", "flat-scratch-init"]
        if "num_ctas" not in {op.opcode for op in k.walk()}:
            unused.append("implicitarg-ptr")
        parts = [f'"{a}"="{v}"' for a, v in attrs.items()]
        parts += [f'"amdgpu-no-{u}"' for u in unused]
        if "mma" not in k.uses:
            parts.append('"amdgpu-agpr-alloc"="0"')
        return " ".join(parts)

    def kernel_header(self, e: Emitter, k: Kernel, params: str) -> str:
        return f"define amdgpu_kernel void @{k.name}({params}) #0"

    def alloca_suffix(self) -> str:
        return ", addrspace(5)"

    def alloca_ptr(self) -> str:
        return "ptr addrspace(5)"


    def arg_reload(self, e: Emitter, slot, ty: str) -> str:
        """Kernel argument `slot` loaded again from the kernarg segment: the segment pointer
        passes through an empty asm (sideeffect), so the load is neither hoisted out of the
        persistent job loop nor merged with another stage's."""
        seg = e.call("ptr addrspace(4)", "llvm.amdgcn.kernarg.segment.ptr", "")
        si = e.fresh("ka")
        e.emit(f"{si} = ptrtoint ptr addrspace(4) {seg} to i64")
        so = e.fresh("ka")
        e.emit(f'{so} = call i64 asm sideeffect "", "=s,0"(i64 {si})')
        sp = e.fresh("ka")
        e.emit(f"{sp} = inttoptr i64 {so} to ptr addrspace(4)")
        g = e.fresh("ka")
        e.emit(f"{g} = getelementptr inbounds i8, ptr addrspace(4) {sp}, i64 {slot.offset}")
        v = e.fresh("ka")
        size = slot.kind.size if hasattr(slot.kind, "size") else 8
        e.emit(f"{v} = load {ty}, ptr addrspace(4) {g}, align {min(size, 8)}, !invariant.load !{{}}")
        return v

    def opaque_constraint(self, llvm_type: str, uniform: bool) -> str:
        """Uniform values stay in SGPRs ("s"), per-lane values in VGPRs ("v"): the tie to the
        input register makes the asm free, and a uniform value never moves to VGPRs."""
        return "s" if uniform else "v"

    def opaque(self, e: Emitter, x: str, ty: str, uniform: bool) -> str:
        """A uniform value LLVM holds in VGPRs (a global load, a cross-lane reduction) would
        be an illegal VGPR-to-SGPR copy into the "s" operand: it is read from the first
        lane first (all lanes agree; folded away where the value is in an SGPR already)."""
        if uniform:
            sfx = {"i32": "i32", "i64": "i64", "float": "f32", "double": "f64"}[ty]
            x = e.call(ty, f"llvm.amdgcn.readfirstlane.{sfx}", f"{ty} {x}")
        return super().opaque(e, x, ty, uniform)

    # ids ------------------------------------------------------------------------------
    def lane_id(self, e: Emitter) -> str:
        lo = e.call("i32", "llvm.amdgcn.mbcnt.lo", "i32 -1, i32 0")
        return e.call("i32", "llvm.amdgcn.mbcnt.hi", f"i32 -1, i32 {lo}")

    def wave_id(self, e: Emitter) -> str:
        t = e.call("i32", "llvm.amdgcn.workitem.id.x", "")
        w = e.fresh("w")
        e.emit(f"{w} = lshr i32 {t}, 6")
        return e.call("i32", "llvm.amdgcn.readfirstlane.i32", f"i32 {w}")

    def cta_id(self, e: Emitter) -> str:
        return e.call("i32", "llvm.amdgcn.workgroup.id.x", "")

    def num_ctas(self, e: Emitter) -> str:
        # code object v5 hidden argument 0: hidden_block_count_x
        p = e.call("ptr addrspace(4)", "llvm.amdgcn.implicitarg.ptr", "")
        out = e.fresh("nc")
        e.emit(f"{out} = load i32, ptr addrspace(4) {p}, align 4, !invariant.load !{{}}")
        return out

    def clock(self, e: Emitter) -> str:
        return e.call("i64", "llvm.amdgcn.s.memrealtime", "")

    def cycles(self, e: Emitter) -> str:
        return e.call("i64", "llvm.amdgcn.s.memtime", "")  # the shader clock (s_memtime)

    # cross-lane ------------------------------------------------------------------------
    def _swap32(self, e: Emitter, x: str, mask: int) -> str:
        if mask in DPP_QUAD_PERM:
            return e.call("i32", "llvm.amdgcn.update.dpp.i32",
                          f"i32 poison, i32 {x}, i32 {DPP_QUAD_PERM[mask]}, i32 15, i32 15, i1 false")
        if mask < 32:
            pattern = SWIZZLE_AND_ALL | (mask << 10)
            return e.call("i32", "llvm.amdgcn.ds.swizzle", f"i32 {x}, i32 {pattern}")
        if self.chip == "gfx950":
            pair = e.call("{ i32, i32 }", "llvm.amdgcn.permlane32.swap",
                          f"i32 {x}, i32 {x}, i1 false, i1 false")
            # lanes 0-31 get the source's upper half in element 1; lanes 32-63 the lower in 0
            hi = e.fresh("ps")
            e.emit(f"{hi} = extractvalue {{ i32, i32 }} {pair}, 1")
            lo = e.fresh("ps")
            e.emit(f"{lo} = extractvalue {{ i32, i32 }} {pair}, 0")
            lane = self.lane_id(e)
            low = e.fresh("ps")
            e.emit(f"{low} = icmp ult i32 {lane}, 32")
            out = e.fresh("ps")
            e.emit(f"{out} = select i1 {low}, i32 {hi}, i32 {lo}")
            return out
        return self._bpermute(e, x, self._xor_lane(e, mask))

    def _xor_lane(self, e, mask):
        lane = self.lane_id(e)
        src = e.fresh("sl")
        e.emit(f"{src} = xor i32 {lane}, {mask}")
        return src

    def _bpermute(self, e, x, src_lane):
        addr = e.fresh("ba")
        e.emit(f"{addr} = shl i32 {src_lane}, 2")
        return e.call("i32", "llvm.amdgcn.ds.bpermute", f"i32 {addr}, i32 {x}")

    def lane_swap(self, e: Emitter, x: str, dt: DType, mask: int) -> str:
        parts, join = self.as_i32_words(e, x, dt)
        return join([self._swap32(e, p, mask) for p in parts])

    def shuffle(self, e: Emitter, x: str, dt: DType, src: str) -> str:
        parts, join = self.as_i32_words(e, x, dt)
        return join([self._bpermute(e, p, src) for p in parts])

    def broadcast_first(self, e: Emitter, x: str, dt: DType) -> str:
        parts, join = self.as_i32_words(e, x, dt)
        return join([e.call("i32", "llvm.amdgcn.readfirstlane.i32", f"i32 {p}") for p in parts])

    def ballot(self, e: Emitter, pred: str) -> str:
        return e.call("i64", "llvm.amdgcn.ballot.i64", f"i1 {pred}")

    def prefix_count(self, e: Emitter, pred: str) -> str:
        b = self.ballot(e, pred)
        lo = e.fresh("pc")
        e.emit(f"{lo} = trunc i64 {b} to i32")
        sh = e.fresh("pc")
        e.emit(f"{sh} = lshr i64 {b}, 32")
        hi = e.fresh("pc")
        e.emit(f"{hi} = trunc i64 {sh} to i32")
        c = e.call("i32", "llvm.amdgcn.mbcnt.lo", f"i32 {lo}, i32 0")
        return e.call("i32", "llvm.amdgcn.mbcnt.hi", f"i32 {hi}, i32 {c}")

    def wave_all(self, e: Emitter, ok: str) -> str:
        bad = e.fresh("nb")
        e.emit(f"{bad} = xor i1 {ok}, true")
        b = self.ballot(e, bad)
        out = e.fresh("all")
        e.emit(f"{out} = icmp eq i64 {b}, 0")
        return out

    def backoff(self, e: Emitter):
        e.call("void", "llvm.amdgcn.s.sleep", f"i32 {SLEEP_UNITS * e.k.poll_backoff}")

    def named_barrier(self, e: Emitter, bid: str, waves: int, arrive: bool):
        raise NotImplementedError("named barriers: AMD has one barrier a CTA (the DSL refuses "
                                  "them on AMD targets)")

    def barrier(self, e: Emitter, async_proxy: bool = False):
        # LDS and global writes of the CTA become visible to its other waves (async_proxy:
        # an NVIDIA notion; AMD's MFMA reads registers)
        e.emit('fence syncscope("workgroup") release')
        e.call("void", "llvm.amdgcn.s.barrier", "")
        e.emit('fence syncscope("workgroup") acquire')

    # fp8 -------------------------------------------------------------------------------
    def _check_fp8(self, dt: DType):
        if dt != FP8_NATIVE[self.chip]:
            raise BackendError(f"{self.chip} converts {FP8_NATIVE[self.chip].name} natively, not "
                               f"{dt.name}; convert the bytes at load time (numerics.fnuz_from_fn_bits)")

    def fp8_to_f32(self, e: Emitter, x: str, dt: DType, n: int) -> str:
        self._check_fp8(dt)
        outs = []
        for i in range(n):
            xi = x
            if n > 1:
                xi = e.fresh("f8")
                e.emit(f"{xi} = extractelement <{n} x i8> {x}, i32 {i}")
            w = e.fresh("f8")
            e.emit(f"{w} = zext i8 {xi} to i32")
            outs.append(e.call("float", "llvm.amdgcn.cvt.f32.fp8", f"i32 {w}, i32 0"))
        return e.pack(outs, "float")

    def f32_to_fp8(self, e: Emitter, x: str, dt: DType, n: int) -> str:
        self._check_fp8(dt)
        lim = FP8_MAX[dt.name]
        outs = []
        for i in range(n):
            xi = x
            if n > 1:
                xi = e.fresh("f8")
                e.emit(f"{xi} = extractelement <{n} x float> {x}, i32 {i}")
            # the IR saturates finite overflow and +-inf; NaN stays NaN (minnum would drop it)
            lo = e.call("float", "llvm.maxnum.f32", f"float {xi}, float {-lim:.1f}")
            cl = e.call("float", "llvm.minnum.f32", f"float {lo}, float {lim:.1f}")
            isnan = e.fresh("f8")
            e.emit(f"{isnan} = fcmp uno float {xi}, 0.0")
            v = e.fresh("f8")
            e.emit(f"{v} = select i1 {isnan}, float {xi}, float {cl}")
            w = e.call("i32", "llvm.amdgcn.cvt.pk.fp8.f32", f"float {v}, float 0.0, i32 0, i1 false")
            b = e.fresh("f8")
            e.emit(f"{b} = trunc i32 {w} to i8")
            outs.append(b)
        return e.pack(outs, "i8")

    # matrix ----------------------------------------------------------------------------
    def mma(self, e: Emitter, op) -> str:
        atom = op.attrs["atom"]
        if self.chip not in atom.targets:
            raise BackendError(f"atom {atom.name} does not exist on {self.chip}")
        a, b, c = op.args
        spec = atom.llvm_operands  # (A type, B type, C type, trailing immediate operands)
        ta, tb, tc, tail = spec
        av = self._reinterpret(e, e.val(a), e.ty(a.type), ta)
        bv = self._reinterpret(e, e.val(b), e.ty(b.type), tb)
        cv = e.val(c)
        args = f"{ta} {av}, {tb} {bv}, {tc} {cv}" + "".join(f", i32 {x}" for x in tail)
        return e.call(tc, atom.llvm_intrinsic, args)

    @staticmethod
    def _reinterpret(e, x, src_t, dst_t):
        if src_t == dst_t:
            return x
        o = e.fresh("op")
        e.emit(f"{o} = bitcast {src_t} {x} to {dst_t}")
        return o

    def wgmma_fence(self, e, *args, **kwargs):
        raise BackendError("wgmma is a Hopper instruction; AMD has no warpgroup MMA")

    wgmma_commit = wgmma_wait = wgmma = wgmma_fence


def emit_llvm(kernel: Kernel, chip: str) -> str:
    """The LLVM IR text of `kernel` for an AMD chip. Raises before LLVM for what the chip lacks."""
    if kernel.wave_size != 64:
        raise BackendError(f"{chip} runs wave64; kernel {kernel.name} was built for {kernel.wave_size}")
    if kernel.target not in (chip, "interp"):
        raise BackendError(f"kernel {kernel.name} was built for {kernel.target}, not {chip}")
    for op in kernel.walk():
        if op.opcode.startswith("wgmma"):
            raise BackendError(f"{chip}: {op.opcode} is a Hopper warpgroup instruction")
        if op.opcode == "mma" and chip not in op.attrs["atom"].targets:
            raise BackendError(f"atom {op.attrs['atom'].name} does not exist on {chip}")
    return lower(kernel, AMDGCNHooks(chip))
