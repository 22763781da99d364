"""Running gfx950 code objects in tinygrad's CDNA4 emulator (a verification aid, no GPU needed).

    from monokernel.launch.emulator import EmuKernel, available
    ok, why = available()                      # False + a reason when the tree or clang is absent
    ek = EmuKernel(kernel)                     # builds the gfx950 code object (or pass code=bytes)
    ek(args, grid=4)                           # numpy arrays in `args` are updated in place
    print(disassemble(ek.code))                # what the emulator runs, for a mismatch hunt

tinygrad's repository (not its wheel) carries a mock AMD GPU whose emulator
(`test/mockgpu/amd/emu.py`) executes real CDNA4 machine code on the CPU, one instruction at a
time, each compiled for the host by `clang` on first use (docs: shared/docs/amd-emulator.md).
It is never a dependency: MONOKERNEL_TINYGRAD names an extracted tree
(`git -C <clone> archive HEAD | tar -x -C <dir>`, outside this project), which this module
puts on sys.path, after setting `DEV=MOCK+AMD::gfx950` (tinygrad reads it at import).

Arguments follow the kernel's ABI (`ir.ABI`): a `Ptr` slot takes a numpy array (copied into an
emulator buffer, and back after the launch), a `Scalar` slot a Python number, converted to the
slot's dtype as the interpreter does (floats through monokernel.numerics). Every slot is
handed to tinygrad as a value with its own dtype (pointers as u64 addresses), in ABI order:
tinygrad lays values out in order with natural alignment, which is the ABI's own rule, so an
ABI that mixes pointers and scalars packs the same way as one that lists pointers first.

What the emulator does not model (so what cannot be checked here): concurrency (waves and
workgroups run one after another, so CTAs that poll each other's mailboxes cannot finish
unless the producer runs first), the hidden arguments of code object v5 (not filled by its
dispatch: `num_ctas` does not work), timing, f32 denormals (it runs with the host's FTZ/DAZ
set) and bounds (a bad address kills the process).

Runtime adjustments, made by `_patch_emulator` to this process's emulator module objects and
never to tinygrad's files (each checked against the ISA in test/test_emulator.py):
1. `v_permlane16_swap_b32` / `v_permlane32_swap_b32` fail as shipped ("unknown variable:
   SRC0"): the emulator sends them down its generic VALU path, which does not bind the
   register-number variables (SRC0, VDST) their pseudocode uses. They are routed through the
   cross-lane pseudocode compiler that `v_permlane64_b32` and `v_readlane_b32` use, which
   binds them and stores both registers; AMD's pseudocode then runs as shipped.
2. `ds_swizzle_b32` fails as shipped ("unexpected token in primary"): the CDNA pseudocode of
   that opcode is a prose table. It is emulated from the ISA's definition (bit-mask and
   quad-permute modes, `swizzle_source_lane`); our backend emits it for lane_swap(4/8/16).
3. DPP reads its source lanes inside the loop that writes the destination, so an in-place
   `v_mov_b32_dpp v1, v1 quad_perm:[1,0,3,2]` (LLVM's lane_swap(1) when the source dies)
   reads already-swapped lanes. The source is copied first, as the hardware reads it.
4. `buffer_wbl2` / `buffer_inv` (the release / acquire cache maintenance of device-scope
   fences) are treated as a one-dword buffer load into VGPR 0, clobbering it. They are
   no-ops here (the emulator has no caches).
5. FLAT/GLOBAL atomics never return their old value: the emulator writes vdst only when
   the instruction's `glc` bit is set, and the CDNA3/4 encodings call that bit `sc0` (no
   `glc` field), so vdst keeps what it held. `glc` is read as `sc0` for these atomics.
6. `global_atomic_cmpswap_x2` / `flat_atomic_cmpswap_x2` (64-bit compare-and-swap): the
   pseudocode reads src = DATA[63:0], cmp = DATA[127:64] from four VGPRs, but the emulator's
   atomic path builds DATA from a VGPR pair only when the operand is 64 bits wide, else from
   one VGPR: for this 128-bit operand DATA is src's low dword, so cmp reads as 0 and src loses
   its high dword. The two 64-bit operands are bound from the four VGPRs instead. (The other
   *_X2 atomics have a 64-bit DATA and need only item 5; MUBUF atomics are not emulated.)
7. LDS instructions dereference the address of inactive lanes too (a dword access loads the
   slot and stores `active ? new : old` back), so a masked-off lane whose address register
   holds garbage kills the process (seen in the indexer's score histogram `ds_add_u32`).
   Inactive lanes' LDS address is set to 0 (read and rewritten unchanged).
8. `v_maximum_f32` / `v_maximum3_f32` / `v_minimum_f32` / `v_minimum3_f32` (IEEE 754-2019
   maximum / minimum: a NaN operand gives NaN; LLVM's `llvm.maximum` on gfx950) share the
   pseudocode helper of `v_max_num_f32` & co., which returns the other operand for a NaN.
   They propagate NaN (a quiet NaN) here; the `_num` forms are unchanged.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import numpy as np

from .. import numerics
from ..ir import Kernel, Ptr
from ..types import f64

ENV_TREE = "MONOKERNEL_TINYGRAD"
ARCH = "gfx950"
DEV_SPEC = f"MOCK+AMD::{ARCH}"
SWAP_OPS = ("V_PERMLANE16_SWAP_B32", "V_PERMLANE32_SWAP_B32")
CACHE_OPS = ("BUFFER_WBL2", "BUFFER_INV")  # MUBUF cache write-back / invalidate: no data
CMPSWAP_X2_OPS = ("GLOBAL_ATOMIC_CMPSWAP_X2", "FLAT_ATOMIC_CMPSWAP_X2")  # 128-bit DATA operand


class EmulatorUnavailable(RuntimeError):
    """The tinygrad tree, its mock GPU or clang is missing (the message says which)."""


class EmulatorError(RuntimeError):
    """The emulator refused or failed to run a kernel."""


def tree() -> Path | None:
    v = os.environ.get(ENV_TREE, "")
    return Path(v) if v else None


def available() -> tuple[bool, str]:
    """(True, "") if the emulator can run here, else (False, the reason)."""
    t = tree()
    if t is None:
        return False, f"{ENV_TREE} names no tinygrad tree"
    if not (t / "tinygrad" / "__init__.py").is_file():
        return False, f"{ENV_TREE}={t} holds no tinygrad package"
    if not (t / "test" / "mockgpu" / "amd" / "emu.py").is_file():
        return False, (f"{ENV_TREE}={t} lacks test/mockgpu/amd/emu.py "
                       "(it needs the repository's tree, not the wheel)")
    if shutil.which("clang") is None:
        return False, "the emulator compiles each instruction with clang, which is not on PATH"
    return True, ""


_STATE: dict = {}


def load_tinygrad() -> dict:
    """Put the tree on sys.path, select the gfx950 mock GPU, import tinygrad and adjust its
    emulator (once per process). Raises EmulatorUnavailable, with the reason, where it cannot."""
    if "dev" in _STATE:
        return _STATE
    ok, why = available()
    if not ok:
        raise EmulatorUnavailable(why)
    root = str(tree().resolve())
    if "tinygrad" in sys.modules:
        mod = sys.modules["tinygrad"]
        if not str(Path(mod.__file__).resolve()).startswith(root):
            raise EmulatorUnavailable(f"tinygrad was already imported from {mod.__file__}, "
                                      f"not from {root}")
        if os.environ.get("DEV") != DEV_SPEC:
            raise EmulatorUnavailable(f"tinygrad was imported with DEV={os.environ.get('DEV')!r}; "
                                      f"the emulator needs DEV={DEV_SPEC} set before the import")
    os.environ["DEV"] = DEV_SPEC
    if root not in sys.path:
        sys.path.insert(0, root)
    # tinygrad's mock GPU lives in the tree's `test` package; the standard library has one too
    t = sys.modules.get("test")
    paths = getattr(t, "__path__", []) if t is not None else []
    if t is not None and not any(str(Path(p).resolve()).startswith(root) for p in paths):
        for name in [m for m in sys.modules if m == "test" or m.startswith("test.")]:
            del sys.modules[name]
    try:
        from tinygrad import dtypes
        from tinygrad.device import Device, TinyELF
        from tinygrad.helpers import Target, flat_mv
        from test.mockgpu.amd import emu
    except ImportError as e:
        raise EmulatorUnavailable(f"the tinygrad tree at {root} does not import: {e}") from e
    _patch_emulator(emu)
    dev = Device["AMD"]
    if getattr(dev, "arch", None) != ARCH:
        raise EmulatorUnavailable(f"tinygrad's AMD device is {getattr(dev, 'arch', None)}, "
                                  f"not {ARCH}")
    _STATE.update(dev=dev, dtypes=dtypes, TinyELF=TinyELF, Target=Target, flat_mv=flat_mv, emu=emu)
    return _STATE


IEEE_MINMAX_F32 = ("v_maximum_f32", "v_maximum3_f32", "v_minimum_f32", "v_minimum3_f32")


def _ieee_minmax_propagates_nan():
    """Adjustment 8: the f32 IEEE maximum / minimum helpers of the pseudocode compiler return
    a quiet NaN when any operand is a NaN, else what the shared helper returns."""
    from test.mockgpu.amd import pcode
    from tinygrad.dtype import dtypes
    for name in IEEE_MINMAX_F32:
        orig = pcode._FUNCS[name]
        if getattr(orig, "_monokernel_ieee", False):
            continue

        def ieee(*args, _orig=orig):
            out = _orig(*args)
            nan = None
            for a in args:
                f = a.bitcast(dtypes.float32) if a.dtype == dtypes.uint32 else a.cast(dtypes.float32)
                n = pcode._isnan(f)
                nan = n if nan is None else nan | n
            return nan.where(pcode._const(out.dtype, float("nan")), out)
        ieee._monokernel_ieee = True
        pcode._FUNCS[name] = ieee


def _patch_emulator(emu):
    """The adjustments 1-8 of the module docstring (instruction handlers wrapped, DPP's
    source read replaced, the IEEE min / max helpers). Idempotent; touches only this
    process's module objects."""
    if getattr(emu, "_monokernel_patched", False):
        return

    def wrap(orig):
        def handler(inst, ctx):
            name = emu._op_name(inst).replace("_E32", "").replace("_E64", "")
            if name in SWAP_OPS:
                return ctx.compile_lane_pcode(inst.op, inst)
            return orig(inst, ctx)
        handler.__wrapped__ = orig
        return handler

    def wrap_mem(orig):
        def handler(inst, ctx):
            name = emu._op_name(inst)
            if name == "DS_SWIZZLE_B32":
                return _compile_ds_swizzle(emu, inst, ctx)
            if "ATOMIC" in name and hasattr(type(inst), "sc0") and not hasattr(type(inst), "glc"):
                return _compile_cdna_atomic(emu, orig, inst, ctx, name in CMPSWAP_X2_OPS)
            if name.startswith("DS_") and "PERMUTE" not in name:
                return _compile_ds_inactive_lanes_safe(emu, orig, inst, ctx)
            return orig(inst, ctx)
        handler.__wrapped__ = orig
        return handler

    def wrap_mubuf(orig):
        def handler(inst, ctx):
            if emu._op_name(inst) in CACHE_OPS:  # no caches in the emulator: only the PC moves
                return emu.UOp.sink(*ctx.inc_pc())
            return orig(inst, ctx)
        handler.__wrapped__ = orig
        return handler

    wrapped = {emu._compile_vop12: wrap(emu._compile_vop12),
               emu._compile_vop3: wrap(emu._compile_vop3),
               emu._compile_mem_op: wrap_mem(emu._compile_mem_op),
               emu._compile_mubuf: wrap_mubuf(emu._compile_mubuf)}
    for t, h in list(emu._INST_HANDLERS.items()):
        if h in wrapped:
            emu._INST_HANDLERS[t] = wrapped[h]
    emu._load_dpp16_src0 = _dpp16_src0_snapshot(emu, emu._load_dpp16_src0)
    _ieee_minmax_propagates_nan()
    emu._get_runner.cache_clear()  # a runner built before the patch would be stale
    emu._monokernel_patched = True


def _dpp16_src0_snapshot(emu, orig):
    """DPP reads its source lanes before any lane is written. The emulator reads them inside
    the lane loop that writes vdst, so `v_mov_b32_dpp v1, v1 quad_perm:[1,0,3,2]` (what LLVM
    emits for an xor-1 lane swap whose source dies) sees lane 0's new value in lane 1. This
    copies vsrc0's 64 lanes to a scratch array first and reads the swizzled lane from it."""
    UOp, dtypes, AddrSpace, _c = emu.UOp, emu.dtypes, emu.AddrSpace, emu._c

    def load(ctx, inst, lane, fallback):
        src_lane, enabled, valid = emu._dpp16_ctrl(
            lane, emu._iattr(inst, "dpp"), emu._iattr(inst, "row_mask", 0xf),
            emu._iattr(inst, "bank_mask", 0xf), ctx.wave_size)
        safe_src_lane = (enabled & valid).where(src_lane, _c(0, dtypes.int))
        tmp = UOp.placeholder((ctx.wave_size,), dtypes.uint32, slot=0, addrspace=AddrSpace.LOCAL)
        rl = ctx.range()
        copy = tmp.index(rl).store(ctx.rvgpr_dyn(ctx.inst_field(type(inst).vsrc0), rl)).end(rl)
        swizzled = tmp.after(copy).index(safe_src_lane).load()
        invalid = UOp.const(0, fallback.dtype) if emu._iattr(inst, "bc") else fallback
        return enabled.where(valid.where(swizzled, invalid), fallback)
    load.__wrapped__ = orig
    return load


def _compile_cdna_atomic(emu, orig, inst, ctx, cmpswap_x2: bool):
    """A CDNA FLAT/GLOBAL atomic through the emulator's own path (addressing, exec, memory
    order), with two of its readings corrected while this instruction compiles:
    - the return: the emulator writes the pre-op value to vdst only when the instruction's
      `glc` bit is set, but CDNA3/4 encodings name that bit `sc0` (GLC's place; LLVM sets it
      on every returning atomic) and have no `glc` field, so no CDNA atomic ever returned
      its old value (vdst kept whatever it held). `glc` is read as `sc0` here.
    - {global,flat}_atomic_cmpswap_x2: the pseudocode reads src = DATA[63:0] and
      cmp = DATA[127:64] of a 4-VGPR operand, but the emulator forms DATA from a VGPR pair
      only when the operand is exactly 64 bits wide, else from one VGPR: DATA was src's low
      dword alone (its high dword dropped, cmp read as 0). That line of pseudocode is
      rewritten to two 64-bit operands, DATA = v[d:d+1] (src) and DATA2 = v[d+2:d+3] (cmp),
      bound per lane."""
    iattr, parse = emu._iattr, emu.parse_pcode
    sc0 = int(iattr(inst, "sc0"))

    def iattr_glc_is_sc0(i, name, default=0):
        if i is inst and name == "glc":
            return sc0
        return iattr(i, name, default)

    shipped = "src = DATA[63 : 0].u64;\ncmp = DATA[127 : 64].u64;"
    fixed = "src = DATA.u64;\ncmp = DATA2.u64;"
    if cmpswap_x2 and shipped not in emu.get_pcode(inst.op):
        raise RuntimeError(f"{emu._op_name(inst)}: the emulator's pseudocode changed; "
                           "revisit monokernel's 64-bit compare-and-swap adjustment")
    data_reg = ctx.inst_field(type(inst).data)

    def parse_cmpswap(pcode, srcs=None):
        if srcs is not None and "_vmem" in srcs and shipped in pcode:
            lane, rv = srcs["laneId"], ctx.rvgpr_dyn
            srcs = dict(srcs,
                        DATA=emu._u64(rv(data_reg, lane), rv(data_reg + emu._c(1), lane)),
                        DATA2=emu._u64(rv(data_reg + emu._c(2), lane),
                                       rv(data_reg + emu._c(3), lane)))
            pcode = pcode.replace(shipped, fixed)
        return parse(pcode, srcs)

    emu._iattr = iattr_glc_is_sc0
    if cmpswap_x2:
        emu.parse_pcode = parse_cmpswap
    try:
        return orig(inst, ctx)
    finally:
        emu._iattr, emu.parse_pcode = iattr, parse


def _compile_ds_inactive_lanes_safe(emu, orig, inst, ctx):
    """An LDS instruction through the emulator's own path, with the address of inactive lanes
    set to 0. The emulator visits all 64 lanes and, for a dword access, loads the slot and
    stores `active ? new : old` back, so an inactive lane still dereferences its address
    register: where that holds garbage (a lane masked off because its value is not an
    address) the host process is killed outside the LDS buffer. Hardware never touches LDS
    for an inactive lane; slot 0 (plus the instruction's offset, which is in range) is read
    and rewritten unchanged here."""
    parse = emu.parse_pcode

    def parse_active_addr(pcode, srcs=None):
        if srcs is not None and "_lds" in srcs and "ADDR" in srcs:
            active = emu._lane_active(ctx.rexec(), srcs["laneId"])
            zero = emu.UOp.const(0, srcs["ADDR"].dtype)
            srcs = dict(srcs, ADDR=active.where(srcs["ADDR"], zero),
                        ADDR_BASE=active.where(srcs["ADDR_BASE"], zero))
        return parse(pcode, srcs)

    emu.parse_pcode = parse_active_addr
    try:
        return orig(inst, ctx)
    finally:
        emu.parse_pcode = parse


def swizzle_source_lane(offset: int, lane: int) -> int:
    """The lane `lane` reads in `ds_swizzle_b32 offset:offset` (GCN/CDNA ISA, section "DS_SWIZZLE"):
    offset[15] set: quad-permute mode, lane (lane & ~3) | offset[2*(lane&3)+1 : 2*(lane&3)];
    offset[15] clear: bit-mask mode within 32-lane halves, ((lane & and) | or) ^ xor on lane[4:0]
    with and = offset[4:0], or = offset[9:5], xor = offset[14:10]."""
    if offset & 0x8000:
        return (lane & ~3) | ((offset >> (2 * (lane & 3))) & 3)
    and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (lane & 0x20) | ((((lane & 0x1F) & and_m) | or_m) ^ xor_m)


def _compile_ds_swizzle(emu, inst, ctx):
    """ds_swizzle_b32 (not executable from the CDNA pseudocode, which is a table in prose):
    each active lane i gets DATA0 of lane swizzle_source_lane(offset, i), 0 if that lane is
    inactive. Two phases (read every source into a scratch array, then write), so vdst may be
    data0. The offset is read from this instruction (not a dynamic field): one runner per offset."""
    UOp, dtypes, AddrSpace, _c = emu.UOp, emu.dtypes, emu.AddrSpace, emu._c
    offset = (int(emu._iattr(inst, "offset1")) << 8) | int(emu._iattr(inst, "offset0"))
    if offset >= 0xC000:
        raise RuntimeError(f"ds_swizzle offset {offset:#x}: only the quad-permute and bit-mask "
                           "modes are emulated")
    W = ctx.wave_size
    exec_mask = ctx.rexec()
    data_reg = ctx.inst_field(type(inst).addr)  # ds_swizzle_b32 vdst, vaddr: the source is ADDR
    vdst_reg = ctx.inst_field(type(inst).vdst)
    tmp = UOp.placeholder((W,), dtypes.uint32, slot=0, addrspace=AddrSpace.LOCAL)
    rl = ctx.range()
    lu = rl.cast(dtypes.uint32)
    if offset & 0x8000:
        sel = (_c(offset & 0xFF) >> ((lu & _c(3)) * _c(2))) & _c(3)
        src = (lu & _c(0xFFFFFFFC)) | sel
    else:
        and_m, or_m, xor_m = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
        src = (lu & _c(0x20)) | ((((lu & _c(0x1F)) & _c(and_m)) | _c(or_m)) ^ _c(xor_m))
    src_i = src.cast(dtypes.int)
    val = emu._lane_active(exec_mask, src_i).where(ctx.rvgpr_dyn(data_reg, src_i), _c(0))
    read_phase = tmp.index(rl).store(val).end(rl)
    wl = ctx.range()
    out = tmp.after(read_phase).index(wl).load()
    write_phase = ctx.wvgpr_dyn(vdst_reg, wl, out, exec_mask).end(wl)
    return UOp.sink(read_phase, write_phase, *ctx.inc_pc())


def _scalar_bits(value, dt) -> int:
    """A Scalar slot's value as the unsigned bit pattern of its dtype, converted as the
    interpreter converts it (floats through monokernel.numerics, integers range-checked)."""
    if dt.is_float:
        v = np.asarray(numerics.convert(np.array([float(value)]), f64, dt)).reshape(())
        return int(v.view(np.dtype(f"u{dt.bytes}")))
    if dt.kind == "bool":
        return int(bool(value))
    info = np.iinfo(dt.np)
    if not info.min <= int(value) <= info.max:
        raise ValueError(f"{value} does not fit {dt}")
    return int(value) & ((1 << (8 * dt.bytes)) - 1)


def disassemble(code: bytes) -> str:
    """The .text of a gfx950 code object, one instruction a line, through tinygrad's CDNA
    decoder (LLVM 14's objdump does not know gfx950); the trailing s_nop padding is dropped."""
    import io

    from elftools.elf.elffile import ELFFile
    load_tinygrad()
    from tinygrad.renderer.amd import decode_inst
    text = ELFFile(io.BytesIO(code)).get_section_by_name(".text").data()
    lines, pc = [], 0
    while pc < len(text):
        try:
            inst = decode_inst(text[pc:pc + 16], "cdna")
        except Exception as e:  # data or an encoding the decoder lacks
            lines.append(f"{pc:6d}: <{text[pc:pc + 4].hex()}: {e}>")
            pc += 4
            continue
        lines.append(f"{pc:6d}: {inst!r}")
        pc += inst.size()
    while lines and lines[-1].endswith("s_nop()"):
        lines.pop()
    return "\n".join(lines)


class EmuKernel:
    """A gfx950 code object loaded into the emulator, launchable with numpy arguments."""

    def __init__(self, kernel: Kernel, code: bytes | None = None):
        if kernel.wave_size != 64:
            raise EmulatorError(f"gfx950 runs wave64; {kernel.name} was built for "
                                f"{kernel.wave_size}")
        if code is None:
            if kernel.target != ARCH:
                raise EmulatorError(f"{kernel.name} was built for {kernel.target}; the emulator "
                                    f"runs {ARCH}")
            from ..build import build
            code = build(kernel).data
        self.kernel, self.code = kernel, code
        st = load_tinygrad()
        self._st = st
        dt = st["dtypes"]
        widths = {1: dt.uint8, 2: dt.uint16, 4: dt.uint32, 8: dt.uint64}
        sig = []
        for i, slot in enumerate(kernel.abi.slots):
            w = 8 if isinstance(slot.kind, Ptr) else slot.kind.size
            sig.append((slot.name, i, widths[w], ()))
        self._sig = tuple(sig)
        dev = st["dev"]
        try:
            elf = st["TinyELF"](code, kernel.name, st["Target"]("AMD", arch=dev.arch), self._sig)
            self.prg = dev.runtime(elf)
        except Exception as e:
            raise EmulatorError(f"the emulator could not load {kernel.name}: {e}") from e

    def __call__(self, args: dict, *, grid: int = 1) -> dict:
        """Launch `grid` CTAs of the kernel's threads; Ptr arrays are updated in place."""
        k, st = self.kernel, self._st
        dev, flat_mv = st["dev"], st["flat_mv"]
        names = set(k.abi.names())
        extra = set(args) - names
        if extra:
            raise ValueError(f"arguments {sorted(extra)} are not in the kernel's ABI "
                             f"{sorted(names)}")
        if grid < 1:
            raise ValueError(f"grid {grid} must be at least 1")
        vals, bufs = [], []  # bufs: (name, array, emulator buffer)
        try:
            for slot in k.abi.slots:
                if slot.name not in args:
                    raise ValueError(f"missing kernel argument {slot.name!r}")
                v = args[slot.name]
                if isinstance(slot.kind, Ptr):
                    if not isinstance(v, np.ndarray):
                        raise TypeError(f"argument {slot.name!r} must be a numpy array, "
                                        f"got {type(v)}")
                    if not v.flags.c_contiguous:
                        raise ValueError(f"argument {slot.name!r} must be C-contiguous")
                    nbytes = max(v.nbytes, 4)
                    buf = dev.allocator.alloc((nbytes + 255) // 256 * 256)
                    if v.nbytes:
                        dev.allocator._copyin(buf, memoryview(v.reshape(-1).view(np.uint8)))
                    bufs.append((slot.name, v, buf))
                    vals.append(int(buf.va_addr))
                else:
                    vals.append(_scalar_bits(v, slot.kind.dtype))
            try:
                self.prg(global_size=(grid, 1, 1), local_size=(k.threads, 1, 1),
                         vals=tuple(vals), wait=True)
            except Exception as e:
                raise EmulatorError(f"{k.name} failed in the emulator: "
                                    f"{type(e).__name__}: {e}") from e
            for name, v, buf in bufs:
                if v.nbytes:
                    out = bytearray(v.nbytes)
                    dev.allocator._copyout(flat_mv(memoryview(out)), buf)
                    v.reshape(-1).view(np.uint8)[:] = np.frombuffer(out, np.uint8)
        finally:
            for _, v, buf in bufs:
                dev.allocator.free(buf, buf.size)
        return {name: v for name, v, _ in bufs}


def run(kernel: Kernel, args: dict, *, grid: int = 1, code: bytes | None = None) -> dict:
    """Like interp.run: launch `kernel` (its gfx950 code object, built unless given) on `grid`
    CTAs in the emulator; array arguments are updated in place and returned by name."""
    return EmuKernel(kernel, code)(args, grid=grid)
