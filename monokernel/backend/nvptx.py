"""NVPTX backend: the target hooks of llvm_common for Hopper (sm_90a, the H200), and
`emit_llvm(kernel)` -> LLVM IR text, `build_ptx(kernel)` -> PTX text for the CUDA driver.

Choices, with the fact behind each (checked against LLVM 22's NVPTX output):
- kernels are `define ptx_kernel` (LLVM 22's kernel calling convention) with
  "nvvm.reqntid" = threads (`.reqntid`: a launch with another block size is a driver error,
  not a silent misrun; it also bounds registers as `.maxntid` would, and ptxas refuses the
  two together) and "nvvm.minctasm" = the kernel's ctas_per_sm (1, persistent: one CTA per
  SM; more bounds the registers so that many CTAs fit an SM).
- shared memory is one `extern .shared` array (@lds, dynamic shared memory), so a CTA may
  use up to 227 KiB: a static `.shared` array above 48 KiB is refused by ptxas. The
  launcher passes the kernel's `lds_bytes` as the launch's dynamic shared size.
- allocas stay in the default address space (NVPTX moves them to .local itself).
- cross-lane ops are `shfl.sync` / `vote.sync` with the full mask: IR control flow is
  warp-uniform, so all 32 lanes arrive (a masked op's branch reconverges before them).
- scopes: wave -> "block" (PTX has no warp scope), cta -> "block", device -> "device"
  (.gpu), system -> "" (.sys).
- read-modify-write atomics are inline `atom.<sem>.<scope>` PTX: LLVM 22's NVPTX lowers
  every `atomicrmw` to a plain `atom.global.op` (relaxed, .gpu), dropping both the
  ordering and the scope (seen on LLVM 22.1: acq_rel/release/seq_cst and syncscope("")
  all gave `atom.global.add.u32`). `cmpxchg`, atomic loads/stores and fences keep both,
  so they stay LLVM instructions (`ld.relaxed.gpu`, `atom.acq_rel.sys...cas`, ...).
- fp8: only OCP e4m3fn exists on Hopper: `cvt.rn.satfinite.e4m3x2.f32` encodes two
  (saturating as numerics.py does; NaN -> NaN), `cvt.rn.f16x2.e4m3x2` then an exact
  f16 -> f32 decodes two. e4m3fnuz is a BackendError.
- MMA: `mma.sync m16n8k16 bf16` through LLVM's intrinsic; `mma.sync m16n8k32 e4m3`
  (LLVM 22 has no intrinsic) and `wgmma.mma_async m64nNk32 e4m3` as inline PTX. A wgmma
  descriptor in the IR addresses the CTA's LDS by byte offset (as the interpreter reads
  it); the lowering adds the shared-window address of @lds to its start-address field.
  Seen on the H200: wgmma e4m3 sums its products with ~14 significant bits (0.0063 off on
  |D| ~ 50 against the interpreter's exact-then-rounded sum), so it matches the interpreter
  to a tolerance, not bit for bit; mma.sync bf16/e4m3 matched to 1e-5.
- `fence.proxy.async.shared::cta` before the barriers (and in the wgmma fences) the IR marks
  async_proxy (the code that stages wgmma's B in LDS: KernelBuilder.async_proxy_lds): LDS
  written by ordinary stores is read next by the async proxy. Nowhere else: the fence waits
  for all the thread's memory accesses in flight (the interpreter reports B read by a wgmma
  while ordinary stores to it are not proxy-fenced).
"""
from __future__ import annotations

from ..atoms.base import DESC_FIELD_MASK, DESC_SHIFT
from ..ir import Kernel
from ..targets import TARGETS
from ..types import DType, bf16, f16, f32, fp8e4m3fn
from .llvm_common import TargetHooks, BackendError, Emitter, lower

TRIPLE = "nvptx64-nvidia-cuda"
# LLVM 22's NVPTX data layout for nvptx64 (the target machine's, checked with llvmlite 0.50)
DATALAYOUT = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
SMS = ("sm_90a",)
# PTX ISA 8.4: the oldest with mma.sync .e4m3 (8.4), wgmma (8.0), cvt e4m3x2 (7.8); the
# H200's CUDA 13 driver reads up to 9.0.
PTX_VERSION = 84
SCOPES = {"wave": "block", "cta": "block", "device": "device", "system": ""}
PTX_SCOPES = {"wave": "cta", "cta": "cta", "device": "gpu", "system": "sys"}
FULL_MASK = -1
WARP = 32  # threads a warp (a named barrier counts threads)
SHFL_CLAMP = 0x1F  # shfl `c` operand: clamp 31, segment mask 0 (the whole warp)
# mma.sync forms LLVM 22 has no intrinsic for, emitted as inline PTX: (m, n, k), input type
MMA_SYNC_PTX = {((16, 8, 16), f16): "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
                ((16, 8, 32), fp8e4m3fn): "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"}
BACKOFF_NS = 64  # nanosleep between polls: off the memory path, still prompt
BARRIER_FENCES = False  # explicit CTA fences around bar.sync (see barrier()): off, measured
# slower on the H200 (front 13.21 -> 12.39 us at 2 rows, index_scoring 512K x 8 85.4 -> 83.4
# without them; same digests, top-k exact: bench/NOTES.md v7)
# the CTA's LDS base: 1024 bytes, so an LDS byte offset and its shared-window address agree
# in the bits the 128B swizzle XORs (atoms.base.swizzled: bits 4-9)
LDS_ALIGN = 1024
PREDICATED_MASKED_OPS = True  # masked plain stores and atomics the IR marks `predicated`
# (KernelBuilder.predicated_masks) as predicated inline PTX (see predicated_store): LLVM's
# branch around each became BSSY / BRA / BSYNC in ptxas's SASS, a warp reconvergence per
# masked store (48 an iteration of sel_h1's scan). False: branches everywhere (an A/B switch)
# LLVM scalar type -> (inline-asm register constraint, PTX bit type) for predicated stores
_STORE_REG = {"i32": ("r", "b32"), "float": ("f", "b32"), "i64": ("l", "b64"),
              "double": ("d", "b64"), "i16": ("h", "b16"), "half": ("h", "b16"),
              "bfloat": ("h", "b16")}


def _dim(atom, name: str) -> int:
    v = getattr(atom, name, None)
    return v if v is not None else getattr(atom, name.upper())


class NVPTXHooks(TargetHooks):
    SCOPES = SCOPES
    name = "nvptx"

    def __init__(self, sm: str = "sm_90a"):
        if sm not in SMS:
            raise ValueError(f"unknown NVIDIA SM {sm!r}; known: {list(SMS)}")
        self.sm = sm

    # module ---------------------------------------------------------------------------
    def module_header(self, e: Emitter) -> str:
        return f'target datalayout = "{DATALAYOUT}"\ntarget triple = "{TRIPLE}"\n'

    def globals(self, e: Emitter):
        if e.k.lds_bytes:
            yield f"@lds = external addrspace(3) global [0 x i8], align {LDS_ALIGN}"

    def module_footer(self, e: Emitter):
        yield "!0 = !{i32 1}"
        yield f"attributes #0 = {{ {self.kernel_attrs(e.k)} }}"

    def kernel_attrs(self, k: Kernel) -> str:
        # .reqntid alone: ptxas refuses .maxntid next to it ("Conflicting directives")
        return (f'"nvvm.reqntid"="{k.threads}" "nvvm.minctasm"="{k.ctas_per_sm}" '
                f'"target-cpu"="{self.sm}"')

    def kernel_header(self, e: Emitter, k: Kernel, params: str) -> str:
        return f"define ptx_kernel void @{k.name}({params}) #0"

    def alloca_suffix(self) -> str:
        return ""

    def alloca_ptr(self) -> str:
        return "ptr"

    # PTX register classes of inline asm operands (uniformity has none: one thread's view)
    OPAQUE_CONSTRAINT = {"i32": "r", "i64": "l", "float": "f", "double": "d"}

    def opaque_constraint(self, llvm_type: str, uniform: bool) -> str:
        return self.OPAQUE_CONSTRAINT[llvm_type]


    # ids ------------------------------------------------------------------------------
    def _sreg(self, e: Emitter, name: str, ty: str = "i32") -> str:
        return e.call(ty, f"llvm.nvvm.read.ptx.sreg.{name}", "")

    def lane_id(self, e: Emitter) -> str:
        return self._sreg(e, "laneid")

    def wave_id(self, e: Emitter) -> str:
        t = self._sreg(e, "tid.x")
        w = e.fresh("w")
        e.emit(f"{w} = lshr i32 {t}, 5")
        return w

    def cta_id(self, e: Emitter) -> str:
        return self._sreg(e, "ctaid.x")

    def num_ctas(self, e: Emitter) -> str:
        return self._sreg(e, "nctaid.x")

    def clock(self, e: Emitter) -> str:
        return self._sreg(e, "globaltimer", "i64")

    def cycles(self, e: Emitter) -> str:
        return self._sreg(e, "clock64", "i64")

    # cross-lane ------------------------------------------------------------------------
    def _shfl(self, e: Emitter, mode: str, x: str, lane: str) -> str:
        return e.call("i32", f"llvm.nvvm.shfl.sync.{mode}.i32",
                      f"i32 {FULL_MASK}, i32 {x}, i32 {lane}, i32 {SHFL_CLAMP}")

    def lane_swap(self, e: Emitter, x: str, dt: DType, mask: int) -> str:
        if not 0 < mask < 32:
            raise BackendError(f"nvptx: lane_swap mask {mask} outside a 32-lane warp")
        parts, join = self.as_i32_words(e, x, dt)
        return join([self._shfl(e, "bfly", p, str(mask)) for p in parts])

    def shuffle(self, e: Emitter, x: str, dt: DType, src: str) -> str:
        parts, join = self.as_i32_words(e, x, dt)
        return join([self._shfl(e, "idx", p, src) for p in parts])

    def broadcast_first(self, e: Emitter, x: str, dt: DType) -> str:
        parts, join = self.as_i32_words(e, x, dt)
        return join([self._shfl(e, "idx", p, "0") for p in parts])

    def ballot(self, e: Emitter, pred: str) -> str:
        return e.call("i32", "llvm.nvvm.vote.ballot.sync", f"i32 {FULL_MASK}, i1 {pred}")

    def prefix_count(self, e: Emitter, pred: str) -> str:
        b = self.ballot(e, pred)
        lt = self._sreg(e, "lanemask.lt")
        m = e.fresh("pc")
        e.emit(f"{m} = and i32 {b}, {lt}")
        return e.call("i32", "llvm.ctpop.i32", f"i32 {m}")

    def match_any(self, e: Emitter, x: str):
        """match.any.sync.b32: the lanes holding x's value; their count, and whether no
        lane below this one is among them."""
        m = e.call("i32", "llvm.nvvm.match.any.sync.i32", f"i32 {FULL_MASK}, i32 {x}")
        n = e.call("i32", "llvm.ctpop.i32", f"i32 {m}")
        lt = self._sreg(e, "lanemask.lt")
        below = e.fresh("mb")
        e.emit(f"{below} = and i32 {m}, {lt}")
        lead = e.fresh("ml")
        e.emit(f"{lead} = icmp eq i32 {below}, 0")
        return n, lead

    def wave_all(self, e: Emitter, ok: str) -> str:
        return e.call("i1", "llvm.nvvm.vote.all.sync", f"i32 {FULL_MASK}, i1 {ok}")

    def backoff(self, e: Emitter):
        e.call("void", "llvm.nvvm.nanosleep", f"i32 {BACKOFF_NS * e.k.poll_backoff}")

    def barrier(self, e: Emitter, async_proxy: bool = False):
        # the IR's barrier (a CTA-scope acq_rel fence and a rendezvous, shared and global):
        # bar.sync 0 alone is both (CUDA's __syncthreads: every shared and global access of
        # the CTA's threads before it is visible to all of them after it); the explicit
        # fences around it are emitted only when BARRIER_FENCES asks. Where LDS written by
        # ordinary stores is read next by the tensor cores (wgmma's B: the async proxy),
        # each writer needs a proxy fence before the barrier: barriers the IR marks
        # async_proxy (KernelBuilder.async_proxy_lds), not every barrier of a wgmma kernel.
        if async_proxy:
            self._asm_void(e, "fence.proxy.async.shared::cta;")
        if BARRIER_FENCES:
            e.emit('fence syncscope("block") release')
        e.call("void", "llvm.nvvm.barrier.cta.sync.aligned.all", "i32 0")
        if BARRIER_FENCES:
            e.emit('fence syncscope("block") acquire')

    def named_barrier(self, e: Emitter, bid: str, waves: int, arrive: bool):
        # bar.sync / bar.arrive id, threads (the .aligned forms: every thread of a warp
        # executes it, as the IR's uniform control flow promises)
        kind = "arrive" if arrive else "sync"
        e.call("void", f"llvm.nvvm.barrier.cta.{kind}.aligned.count",
               f"i32 {bid}, i32 {waves * WARP}")

    # atomics ---------------------------------------------------------------------------
    _ATOM_SEM = {"relaxed": "relaxed", "acquire": "acquire", "release": "release",
                 "acq_rel": "acq_rel", "seq_cst": "acq_rel"}

    def _pred(self, e: Emitter, cond: str) -> str:
        x = e.fresh("pm")
        e.emit(f"{x} = zext i1 {cond} to i32")
        return x

    def predicates_masks(self) -> bool:
        return PREDICATED_MASKED_OPS

    def predicated_store(self, e: Emitter, cond: str, vtype, value: str, ptr_ty: str,
                         addr: str) -> bool:
        """A masked plain store (of IR type `vtype`) as ONE predicated `@p st` (inline PTX)
        instead of a branch around it; False (the caller branches) for types it does not
        cover: i8 elements, vectors other than 2 or 4 elements of at most 128 bits."""
        n, elem = vtype.n, e.ty(vtype.dtype)
        value_ty = e.ty(vtype)
        if elem not in _STORE_REG or n not in (1, 2, 4):
            return False
        reg, bt = _STORE_REG[elem]
        if n * int(bt[1:]) > 128:
            return False
        space = "shared" if "addrspace(3)" in ptr_ty else "global"
        vals = [value] if n == 1 else []
        for i in range(n if n > 1 else 0):
            x = e.fresh("se")
            e.emit(f"{x} = extractelement {value_ty} {value}, i32 {i}")
            vals.append(x)
        ops = ", ".join(f"${i + 2}" for i in range(n))
        vec = f".v{n}" if n > 1 else ""
        src = f"{{{ops}}}" if n > 1 else ops
        asm = (f"{{ .reg .pred p; setp.ne.b32 p, $0, 0; @p st.{space}{vec}.{bt} [$1], {src}; }}")
        cons = ",".join(["r", "l"] + [reg] * n)
        args = ", ".join([f"i32 {self._pred(e, cond)}", f"{ptr_ty} {addr}"] +
                         [f"{elem} {v}" for v in vals])
        e.emit(f'call void asm sideeffect "{asm}", "{cons},~{{memory}}"({args})')
        return True

    # bulk copies into LDS (the TMA unit) and their mbarriers; LDS pointers are 64-bit values
    # of the shared window here ("l"), as the predicated shared stores pass them
    def mbar_init(self, e: Emitter, bar: str, count: int):
        e.emit('call void asm sideeffect "mbarrier.init.shared::cta.b64 [$0], $1; '
               'fence.mbarrier_init.release.cluster;", "l,r,~{memory}"'
               f'(ptr addrspace(3) {bar}, i32 {count})')

    def mbar_arrive_tx(self, e: Emitter, bar: str, nbytes: int):
        e.emit('call void asm sideeffect "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", '
               f'"l,r,~{{memory}}"(ptr addrspace(3) {bar}, i32 {nbytes})')

    def bulk_load_lds(self, e: Emitter, dst: str, src: str, nbytes: int, bar: str):
        e.emit('call void asm sideeffect "cp.async.bulk.shared::cluster.global.mbarrier::'
               'complete_tx::bytes [$0], [$1], $2, [$3];", "l,l,r,l,~{memory}"'
               f'(ptr addrspace(3) {dst}, ptr addrspace(1) {src}, i32 {nbytes}, '
               f'ptr addrspace(3) {bar})')

    def tma_load_rows(self, e: Emitter, dst: str, tmap: str, row: str, bar: str, col: str):
        # the tensor map in global memory (ir.TensorMap, written by the launcher before the
        # launch); coordinates innermost first: byte `col` of row `row`
        e.emit('call void asm sideeffect "cp.async.bulk.tensor.2d.shared::cluster.global.tile.'
               'mbarrier::complete_tx::bytes [$0], [$1, {$4, $2}], [$3];", "l,l,r,l,r,~{memory}"'
               f'(ptr addrspace(3) {dst}, ptr addrspace(1) {tmap}, i32 {row}, '
               f'ptr addrspace(3) {bar}, i32 {col})')

    def mbar_inval(self, e: Emitter, bar: str):
        e.emit('call void asm sideeffect "mbarrier.inval.shared::cta.b64 [$0];", "l,~{memory}"'
               f'(ptr addrspace(3) {bar})')

    def mbar_try_wait(self, e: Emitter, bar: str, parity: str) -> str:
        """One mbarrier.try_wait.parity (it may itself wait a while before giving up): 1 once
        the phase of that parity has completed. The memory clobber keeps LDS reads after it."""
        r = e.fresh("mbt")
        e.emit(f'{r} = call i32 asm sideeffect "{{ .reg .pred p; mbarrier.try_wait.parity.'
               f'shared::cta.b64 p, [$1], $2; selp.u32 $0, 1, 0, p; }}", "=r,l,r,~{{memory}}"'
               f'(ptr addrspace(3) {bar}, i32 {parity})')
        ok = e.fresh("mbo")
        e.emit(f"{ok} = icmp ne i32 {r}, 0")
        return ok

    # lane-private async copies (cp.async, LDGSTS): counted groups, so a pipeline's wait
    # retires exactly the steps it reads (loads into registers share scoreboards: a consumer
    # of one step's loads waits for every later load on its scoreboard too)
    def async_copy(self, e: Emitter, dst: str, src: str, nbytes: int):
        kind = "cg" if nbytes == 16 else "ca"  # .cg (L2 only) takes 16 bytes alone
        e.call("void", f"llvm.nvvm.cp.async.{kind}.shared.global.{nbytes}",
               f"ptr addrspace(3) {dst}, ptr addrspace(1) {src}")

    def async_commit(self, e: Emitter):
        e.call("void", "llvm.nvvm.cp.async.commit.group", "")

    def async_wait(self, e: Emitter, pending: int):
        e.call("void", "llvm.nvvm.cp.async.wait.group", f"i32 {int(pending)}")

    def wave_sync(self, e: Emitter):
        """bar.warp.sync of the full warp: its lanes meet and their memory accesses before
        it are ordered before those after it (CUDA's __syncwarp)."""
        e.call("void", "llvm.nvvm.bar.warp.sync", f"i32 {FULL_MASK}")

    def grid_dep_launch(self, e: Emitter):
        """griddepcontrol.launch_dependents: the next launch (made with the programmatic
        stream serialization attribute) may start its CTAs; a hint, so no memory clobber."""
        e.emit('call void asm sideeffect "griddepcontrol.launch_dependents;", ""()')

    def grid_dep_wait(self, e: Emitter):
        """griddepcontrol.wait: blocks until the prerequisite grids have completed and their
        memory is visible; the memory clobber keeps every later access after it."""
        e.emit('call void asm sideeffect "griddepcontrol.wait;", "~{memory}"()')

    def prefetch_l2(self, e: Emitter, addr: str, nbytes: int, line: bool = False):
        """One bulk prefetch into the L2 (sm_90, the TMA unit: no registers, no completion to
        wait for); `line`: the L2 line holding addr, by the load unit (`prefetch.global.L2`).
        No memory clobber: it orders nothing, so LLVM may move loads across it."""
        if line:
            e.emit(f'call void asm sideeffect "prefetch.global.L2 [$0];", '
                   f'"l"(ptr addrspace(1) {addr})')
            return
        e.emit(f'call void asm sideeffect "cp.async.bulk.prefetch.L2.global [$0], $1;", '
               f'"l,r"(ptr addrspace(1) {addr}, i32 {nbytes})')

    def atomic_rmw(self, e: Emitter, rmw: str, dt: DType, addr: str, ptr_ty: str,
                   value: str, order: str, scope: str, pred: str | None = None) -> str:
        """One `atom.<sem>.<scope>.<space>.<op>.<type>` as inline PTX; returns the old value.
        `rmw` is the LLVM atomicrmw operation llvm_common chose (add, fadd, max, umax, ...).
        With `pred` (an i1), only where it holds, the result 0 elsewhere (no branch)."""
        shared = "addrspace(3)" in ptr_ty
        sc = "cta" if shared else PTX_SCOPES[scope]
        space = "shared" if shared else "global"
        bits = dt.bits
        if bits not in (32, 64):
            raise BackendError(f"nvptx: atomics are 32/64-bit, not {dt}")
        if dt.is_float:
            if rmw == "fadd":
                op, ty = "add", f"f{bits}"
            elif rmw == "xchg":
                op, ty = "exch", f"b{bits}"
            else:
                raise BackendError(f"nvptx: atomic {rmw} on {dt}")
        else:
            op, ty = {"add": ("add", f"u{bits}"), "max": ("max", f"s{bits}"),
                      "min": ("min", f"s{bits}"), "umax": ("max", f"u{bits}"),
                      "umin": ("min", f"u{bits}"), "xchg": ("exch", f"b{bits}"),
                      "or": ("or", f"b{bits}"), "and": ("and", f"b{bits}")}[rmw]
        reg = {("float", 32): "f", ("float", 64): "d"}.get((dt.kind, bits), "r" if bits == 32 else "l")
        pre = f"fence.sc.{sc}; " if order == "seq_cst" else ""
        atom = f"atom.{self._ATOM_SEM[order]}.{sc}.{space}.{op}.{ty} $0, [$1], $2;"
        t = e.ty(dt)
        out = e.fresh("at")
        if pred is None:
            e.emit(f'{out} = call {t} asm sideeffect "{pre}{atom}", "={reg},l,{reg},~{{memory}}"'
                   f"({ptr_ty} {addr}, {t} {value})")
            return out
        zero = {"f": "0f00000000", "d": "0d0000000000000000"}.get(reg, "0")
        asm = (f"{{ .reg .pred p; setp.ne.b32 p, $3, 0; mov.b{bits} $0, {zero}; "
               f"@p {pre}@p {atom} }}" if pre else
               f"{{ .reg .pred p; setp.ne.b32 p, $3, 0; mov.b{bits} $0, {zero}; @p {atom} }}")
        e.emit(f'{out} = call {t} asm sideeffect "{asm}", "={reg},l,{reg},r,~{{memory}}"'
               f"({ptr_ty} {addr}, {t} {value}, i32 {self._pred(e, pred)})")
        return out

    # fp8 -------------------------------------------------------------------------------
    def _check_fp8(self, dt: DType):
        if dt != fp8e4m3fn:
            raise BackendError(f"{self.sm} converts only OCP e4m3fn (fp8e4m3fn), not {dt.name}: "
                               "Hopper has no e4m3fnuz; keep fnuz bytes for gfx942")

    def fp8_to_f32(self, e: Emitter, x: str, dt: DType, n: int) -> str:
        self._check_fp8(dt)
        outs = []
        for i in range(0, n, 2):
            if n == 1:
                lo = e.fresh("f8")
                e.emit(f"{lo} = zext i8 {x} to i16")
                pair = lo
            else:
                b0 = e.fresh("f8")
                e.emit(f"{b0} = extractelement <{n} x i8> {x}, i32 {i}")
                if i + 1 < n:
                    b1 = e.fresh("f8")
                    e.emit(f"{b1} = extractelement <{n} x i8> {x}, i32 {i + 1}")
                else:
                    b1 = "0"
                v0 = e.fresh("f8")
                e.emit(f"{v0} = insertelement <2 x i8> poison, i8 {b0}, i32 0")
                v1 = e.fresh("f8")
                e.emit(f"{v1} = insertelement <2 x i8> {v0}, i8 {b1}, i32 1")
                pair = e.fresh("f8")
                e.emit(f"{pair} = bitcast <2 x i8> {v1} to i16")
            # cvt.rn.f16x2.e4m3x2: byte k of the input -> half k of the result (exact)
            h2 = e.call("<2 x half>", "llvm.nvvm.e4m3x2.to.f16x2.rn", f"i16 {pair}")
            for j in range(min(2, n - i)):
                h = e.fresh("f8")
                e.emit(f"{h} = extractelement <2 x half> {h2}, i32 {j}")
                f = e.fresh("f8")
                e.emit(f"{f} = fpext half {h} to float")
                outs.append(f)
        return e.pack(outs, "float")

    def f32_to_fp8(self, e: Emitter, x: str, dt: DType, n: int) -> str:
        self._check_fp8(dt)
        xs = []
        for i in range(n):
            if n == 1:
                xs.append(x)
            else:
                xi = e.fresh("f8")
                e.emit(f"{xi} = extractelement <{n} x float> {x}, i32 {i}")
                xs.append(xi)
        outs = []
        for i in range(0, n, 2):
            lo = xs[i]
            hi = xs[i + 1] if i + 1 < n else "0.0"
            # cvt.rn.satfinite.e4m3x2.f32 d, a, b: a -> upper byte, b -> lower byte
            w = e.call("i16", "llvm.nvvm.ff.to.e4m3x2.rn", f"float {hi}, float {lo}")
            v = e.fresh("f8")
            e.emit(f"{v} = bitcast i16 {w} to <2 x i8>")
            for j in range(min(2, n - i)):
                b = e.fresh("f8")
                e.emit(f"{b} = extractelement <2 x i8> {v}, i32 {j}")
                outs.append(b)
        return e.pack(outs, "i8")

    # matrix ----------------------------------------------------------------------------
    def _words(self, e: Emitter, v, what: str) -> list[str]:
        """A per-lane operand (n elements) as its 32-bit registers, slot 0 in the low bits."""
        nbytes = v.type.bytes
        if nbytes % 4:
            raise BackendError(f"nvptx: MMA operand {what} of {v.type} is not whole registers")
        regs = nbytes // 4
        src_t = e.ty(v.type)
        if regs == 1:
            if src_t == "i32":
                return [e.val(v)]
            o = e.fresh("mw")
            e.emit(f"{o} = bitcast {src_t} {e.val(v)} to i32")
            return [o]
        vec = e.fresh("mw")
        e.emit(f"{vec} = bitcast {src_t} {e.val(v)} to <{regs} x i32>")
        out = []
        for i in range(regs):
            o = e.fresh("mw")
            e.emit(f"{o} = extractelement <{regs} x i32> {vec}, i32 {i}")
            out.append(o)
        return out

    def _floats(self, e: Emitter, v) -> list[str]:
        if v.n == 1:
            return [e.val(v)]
        out = []
        for i in range(v.n):
            o = e.fresh("mc")
            e.emit(f"{o} = extractelement <{v.n} x float> {e.val(v)}, i32 {i}")
            out.append(o)
        return out

    def _unpack_struct(self, e: Emitter, s: str, n: int) -> str:
        st = "{ " + ", ".join(["float"] * n) + " }"
        outs = []
        for i in range(n):
            o = e.fresh("md")
            e.emit(f"{o} = extractvalue {st} {s}, {i}")
            outs.append(o)
        return e.pack(outs, "float")

    def _check_atom(self, atom, want_group: int):
        if self.sm not in atom.targets:
            raise BackendError(f"atom {atom.name} does not exist on {self.sm} "
                               f"(it runs on {sorted(atom.targets)})")
        if atom.group != want_group:
            raise BackendError(f"atom {atom.name}: group {atom.group}, expected {want_group}")
        if atom.acc_dtype != f32:
            raise BackendError(f"atom {atom.name}: only f32 accumulators are lowered")

    def mma(self, e: Emitter, op) -> str:
        atom = op.attrs["atom"]
        self._check_atom(atom, 32)
        a, b, c = op.args
        shape = (_dim(atom, "m"), _dim(atom, "n"), _dim(atom, "k"))
        aw, bw, cf = self._words(e, a, "A"), self._words(e, b, "B"), self._floats(e, c)
        if len(aw) != 4 or len(bw) != 2 or len(cf) != 4:
            raise BackendError(f"atom {atom.name}: operands of {len(aw)}/{len(bw)}/{len(cf)} "
                               "registers; mma.sync m16n8 takes 4/2/4")
        st = "{ float, float, float, float }"
        if shape == (16, 8, 16) and atom.a_dtype == bf16 and atom.b_dtype == bf16:
            args = ", ".join([f"i32 {x}" for x in aw + bw] + [f"float {x}" for x in cf])
            s = e.call(st, "llvm.nvvm.mma.m16n8k16.row.col.bf16", args)
        elif (shape, atom.a_dtype) in MMA_SYNC_PTX and atom.b_dtype == atom.a_dtype:
            asm = (MMA_SYNC_PTX[shape, atom.a_dtype] +
                   " {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
            cons = ",".join(["=f"] * 4 + ["r"] * 6 + ["f"] * 4)
            args = ", ".join([f"i32 {x}" for x in aw + bw] + [f"float {x}" for x in cf])
            s = e.fresh("mma")
            e.emit(f'{s} = call {st} asm sideeffect "{asm}", "{cons}"({args})')
        else:
            raise BackendError(f"nvptx: no mma.sync lowering for atom {atom.name} "
                               f"(m{shape[0]}n{shape[1]}k{shape[2]} {atom.a_dtype})")
        return self._unpack_struct(e, s, 4)

    def relu_bf16x2(self, e: Emitter, a: str, b: str, n: int) -> str:
        # cvt.rn.relu.bf16x2.f32 d, hi, lo: one F2FP.RELU.BF16.F32.PACK_AB (ptxas does not
        # fuse max.f32 + cvt.rn.bf16x2.f32 into it)
        if n != 1:
            raise BackendError("nvptx: relu_bf16x2 on vectors is not lowered")
        v = e.call("<2 x bfloat>", "llvm.nvvm.ff2bf16x2.rn.relu", f"float {b}, float {a}")
        o = e.fresh("rb")
        e.emit(f"{o} = bitcast <2 x bfloat> {v} to i32")
        return o

    def _asm_void(self, e: Emitter, text: str):
        e.emit(f'call void asm sideeffect "{text}", "~{{memory}}"()')

    def wgmma_fence(self, e: Emitter, async_proxy: bool = False):
        # registers before the wgmmas; the warp's own generic-proxy LDS writes only where the
        # IR asks (async_proxy_lds): in a loop the proxy fence waits for every load in flight
        if async_proxy:
            self._asm_void(e, "fence.proxy.async.shared::cta;")
        self._asm_void(e, "wgmma.fence.sync.aligned;")

    def wgmma_commit(self, e: Emitter):
        self._asm_void(e, "wgmma.commit_group.sync.aligned;")

    def wgmma_wait(self, e: Emitter, pending: int):
        if not 0 <= int(pending) <= 7:
            raise BackendError(f"wgmma_wait({pending}): PTX takes 0..7 pending groups")
        self._asm_void(e, f"wgmma.wait_group.sync.aligned {int(pending)};")

    def wgmma(self, e: Emitter, op) -> str:
        atom = op.attrs["atom"]
        self._check_atom(atom, 128)
        m, n, k = _dim(atom, "m"), _dim(atom, "n"), _dim(atom, "k")
        lowered = {(32, fp8e4m3fn), (16, bf16)}  # m64nNk32 e4m3, m64nNk16 bf16 (A: regs)
        if m != 64 or (k, atom.a_dtype) not in lowered or atom.b_dtype != atom.a_dtype \
                or n % 8 or not 8 <= n <= 256 or (atom.a_smem is not None and k != 32):
            raise BackendError(f"nvptx: no wgmma lowering for atom {atom.name}")
        if not e.k.lds_bytes:
            raise BackendError(f"kernel {e.k.name}: wgmma reads B from shared memory, but the "
                               "kernel declares no LDS")
        a, desc, c = op.args
        ss = atom.a_smem is not None
        aw, cf = ([] if ss else self._words(e, a, "A")), self._floats(e, c)
        nd = n // 2
        if (not ss and len(aw) != 4) or len(cf) != nd:
            raise BackendError(f"atom {atom.name}: A has {len(aw)} registers and D {len(cf)} "
                               f"floats per lane; m64n{n}k{k} takes 4 and {nd}")
        asm = atom.asm.replace("%", "$")  # the atom's PTX, operands numbered LLVM's way
        cons = ",".join(["=f"] * nd + (["l"] if ss else ["r"] * 4) + ["l", "r"]
                        + [str(j) for j in range(nd)] + ["~{memory}"])
        a_args = [f"i64 {self._lds_descriptor(e, a)}"] if ss else [f"i32 {x}" for x in aw]
        args = ", ".join(a_args + [f"i64 {self._lds_descriptor(e, desc)}", "i32 1"]
                         + [f"float {x}" for x in cf])
        st = "{ " + ", ".join(["float"] * nd) + " }"
        s = e.fresh("wgmma")
        e.emit(f'{s} = call {st} asm sideeffect "{asm}", "{cons}"({args})')
        return self._unpack_struct(e, s, nd)

    def _lds_descriptor(self, e: Emitter, desc) -> str:
        """An IR descriptor (LDS byte offset in its start-address field) with the CTA's
        shared-window address of @lds added (start address: bits 0-13, in 16-byte units)."""
        base = e.fresh("wg")
        e.emit(f"{base} = ptrtoint ptr addrspace(3) @lds to i64")
        sh = e.fresh("wg")
        e.emit(f"{sh} = lshr i64 {base}, {DESC_SHIFT}")
        lo = e.fresh("wg")
        e.emit(f"{lo} = and i64 {sh}, {DESC_FIELD_MASK}")
        d = e.fresh("wg")
        e.emit(f"{d} = add i64 {e.val(desc)}, {lo}")
        return d


def check_kernel(kernel: Kernel, sm: str = "sm_90a"):
    """Raise BackendError for anything sm_90a lacks, before any LLVM runs."""
    if sm not in SMS:
        raise BackendError(f"unknown NVIDIA SM {sm!r}; known: {list(SMS)}")
    if kernel.wave_size != WARP:
        raise BackendError(f"{sm} runs 32-lane warps; kernel {kernel.name} was built for "
                           f"{kernel.wave_size}")
    if kernel.target not in (sm, "interp"):
        raise BackendError(f"kernel {kernel.name} was built for {kernel.target}, not {sm}")
    chip = TARGETS[sm]
    if kernel.threads > chip.max_threads_per_cta:
        raise BackendError(f"kernel {kernel.name}: {kernel.threads} threads; a CTA has at most "
                           f"{chip.max_threads_per_cta}")
    if kernel.lds_bytes > chip.lds_bytes:
        raise BackendError(f"kernel {kernel.name}: {kernel.lds_bytes} bytes of LDS; an {sm} "
                           f"CTA gets at most {chip.lds_bytes // 1024} KiB")
    for op in kernel.walk():
        if op.opcode in ("mma", "wgmma"):
            atom = op.attrs["atom"]
            if sm not in atom.targets:
                raise BackendError(f"atom {atom.name} does not exist on {sm} "
                                   f"(it runs on {sorted(atom.targets)})")
        if op.opcode.startswith("wgmma") and kernel.waves % 4:
            raise BackendError(f"kernel {kernel.name}: {op.opcode} needs whole warpgroups "
                               f"(waves a multiple of 4, got {kernel.waves})")
        if op.opcode == "cast":
            for v in (op.args[0], op.result):
                if v.dtype.name == "fp8e4m3fnuz":
                    raise BackendError(f"{sm} has no e4m3fnuz conversion ({op!r}); Hopper "
                                       "reads OCP e4m3fn")


def emit_llvm(kernel: Kernel, sm: str = "sm_90a") -> str:
    """The LLVM IR text of `kernel` for an NVIDIA SM. Raises BackendError before LLVM for
    what the chip lacks."""
    check_kernel(kernel, sm)
    return lower(kernel, NVPTXHooks(sm))


def build_ptx(kernel: Kernel, sm: str = "sm_90a", *, ptx_version: int = PTX_VERSION,
              opt_level: int = 3, timeout: float | None = None) -> str:
    """PTX text of `kernel` (LLVM runs in a child process: monokernel.backend.toolchain)."""
    from .toolchain import compile_ptx
    return compile_ptx(emit_llvm(kernel, sm), sm, ptx_version, opt_level, timeout=timeout)


__all__ = ["NVPTXHooks", "emit_llvm", "build_ptx", "check_kernel", "PTX_VERSION", "BackendError"]
