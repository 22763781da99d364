"""Reading AMDGCN code objects: the chip, the code object version and the per-kernel
metadata LLVM writes into the NT_AMDGPU_METADATA note (VGPR/SGPR/AGPR counts, spills,
LDS, scratch, kernarg layout), plus the machine code bytes of a kernel.

No disassembler: llvmlite exports none (its library carries no LLVM MC disassembler entry
point), so instruction-level checks read the assembly text of
`monokernel.backend.toolchain.compile_amdgcn_asm`; `asm_kernel_instructions` below cuts
one kernel's instructions out of it. `kernel_code` gives a kernel's machine code bytes
(sizes, byte-identity, or an external disassembler).
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
ELFOSABI_AMDGPU_HSA = 64

# EF_AMDGPU_MACH_* (llvm/include/llvm/BinaryFormat/ELF.h), the chips of the CDNA line.
_MACH = {
    0x030: "gfx908",
    0x03F: "gfx90a",
    0x040: "gfx940",
    0x04B: "gfx941",
    0x04C: "gfx942",
    0x04F: "gfx950",
    0x051: "gfx9-generic",
    0x05F: "gfx9-4-generic",
}
EF_AMDGPU_MACH = 0x0FF
# Code object V4+ feature bits.
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
_XNACK = {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"}
_SRAMECC = {0x000: "unsupported", 0x400: "any", 0x800: "off", 0xC00: "on"}
EF_AMDGPU_GENERIC_VERSION_OFFSET = 24
# ELFABIVERSION_AMDGPU_HSA_V{n}: the ABI version byte -> code object version.
_ABI_TO_COV = {2: 4, 3: 5, 4: 6}


@dataclass(frozen=True)
class KernelArg:
    name: str | None
    offset: int
    size: int
    value_kind: str  # "global_buffer", "by_value", "hidden_*", ...
    address_space: str | None  # "global", "local", ... for pointers; None otherwise


@dataclass(frozen=True)
class KernelInfo:
    name: str
    symbol: str  # the kernel descriptor symbol, "<name>.kd"
    vgpr_count: int
    sgpr_count: int
    agpr_count: int
    vgpr_spill_count: int
    sgpr_spill_count: int
    group_segment_fixed_size: int  # static LDS bytes
    private_segment_fixed_size: int  # scratch bytes per lane
    kernarg_segment_size: int
    kernarg_segment_align: int
    wavefront_size: int
    max_flat_workgroup_size: int
    uses_dynamic_stack: bool
    args: tuple[KernelArg, ...]
    raw: dict = field(repr=False, compare=False, default_factory=dict)

    @property
    def spills(self) -> int:
        return self.vgpr_spill_count + self.sgpr_spill_count

    def summary(self, chip: str = "") -> dict:
        """One table row."""
        row = {"chip": chip} if chip else {}
        row.update(kernel=self.name, vgpr=self.vgpr_count, agpr=self.agpr_count,
                   sgpr=self.sgpr_count, vgpr_spill=self.vgpr_spill_count,
                   sgpr_spill=self.sgpr_spill_count, lds=self.group_segment_fixed_size,
                   scratch=self.private_segment_fixed_size,
                   kernarg=self.kernarg_segment_size, wave=self.wavefront_size,
                   max_wg=self.max_flat_workgroup_size)
        return row


@dataclass(frozen=True)
class CodeObject:
    chip: str  # "gfx950", "gfx942", ... ("unknown(0x...)" if not a known chip)
    e_flags: int
    xnack: str  # "any" | "on" | "off" | "unsupported"
    sramecc: str
    abi_version: int  # the ELF header's EI_ABIVERSION byte
    code_object_version: int  # 4, 5 or 6
    generic_version: int  # code object V6 generic targets; 0 otherwise
    target: str  # amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx950"
    metadata_version: tuple[int, ...]  # amdhsa.version
    kernels: tuple[KernelInfo, ...]
    metadata: dict = field(repr=False, compare=False, default_factory=dict)

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel {name!r} in the code object; it has "
                       f"{[k.name for k in self.kernels]}")

    def summary(self) -> list[dict]:
        """One row per kernel."""
        return [k.summary(self.chip) for k in self.kernels]


def _strip_keys(obj: Any) -> Any:
    """msgpack metadata keys start with '.' (".vgpr_count"): drop it, recursively."""
    if isinstance(obj, dict):
        return {(k[1:] if isinstance(k, str) and k.startswith(".") else k): _strip_keys(v)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_keys(v) for v in obj]
    return obj


def _elf(data: bytes) -> ELFFile:
    # Imported here: the GPU machine has no pyelftools, and its tools import this module
    # (through monokernel.build) only to emit LLVM IR and PTX, never to read an AMD ELF.
    from elftools.elf.elffile import ELFFile
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    elf = ELFFile(io.BytesIO(data))
    if elf["e_machine"] not in ("EM_AMDGPU", EM_AMDGPU):
        raise ValueError(f"not an AMDGPU ELF (e_machine {elf['e_machine']})")
    return elf


def _metadata_note(elf: ELFFile) -> bytes | None:
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] == NT_AMDGPU_METADATA:
                desc = note["n_descdata"]
                return desc if isinstance(desc, bytes) else desc.encode("latin-1")
    return None


def _kernel_info(k: dict) -> KernelInfo:
    args = tuple(
        KernelArg(name=a.get("name"), offset=int(a.get("offset", 0)),
                  size=int(a.get("size", 0)), value_kind=a.get("value_kind", ""),
                  address_space=a.get("address_space"))
        for a in k.get("args", []))
    return KernelInfo(
        name=k["name"], symbol=k.get("symbol", k["name"] + ".kd"),
        vgpr_count=int(k.get("vgpr_count", 0)), sgpr_count=int(k.get("sgpr_count", 0)),
        agpr_count=int(k.get("agpr_count", 0)),
        vgpr_spill_count=int(k.get("vgpr_spill_count", 0)),
        sgpr_spill_count=int(k.get("sgpr_spill_count", 0)),
        group_segment_fixed_size=int(k.get("group_segment_fixed_size", 0)),
        private_segment_fixed_size=int(k.get("private_segment_fixed_size", 0)),
        kernarg_segment_size=int(k.get("kernarg_segment_size", 0)),
        kernarg_segment_align=int(k.get("kernarg_segment_align", 0)),
        wavefront_size=int(k.get("wavefront_size", 0)),
        max_flat_workgroup_size=int(k.get("max_flat_workgroup_size", 0)),
        uses_dynamic_stack=bool(k.get("uses_dynamic_stack", False)),
        args=args, raw=k)


def read_code_object(data: bytes) -> CodeObject:
    """Parses an AMDGCN code object (as `toolchain.compile_amdgcn` returns)."""
    elf = _elf(data)
    flags = elf["e_flags"]
    mach = flags & EF_AMDGPU_MACH
    abi = elf["e_ident"]["EI_ABIVERSION"]
    cov = _ABI_TO_COV.get(abi, 0)
    note = _metadata_note(elf)
    if note is None:
        raise ValueError("the code object has no NT_AMDGPU_METADATA note")
    meta = _strip_keys(msgpack.unpackb(note, raw=False, strict_map_key=False))
    kernels = tuple(_kernel_info(k) for k in meta.get("amdhsa.kernels", []))
    return CodeObject(
        chip=_MACH.get(mach, f"unknown(0x{mach:03x})"), e_flags=flags,
        xnack=_XNACK[flags & EF_AMDGPU_FEATURE_XNACK_V4],
        sramecc=_SRAMECC[flags & EF_AMDGPU_FEATURE_SRAMECC_V4],
        abi_version=abi, code_object_version=cov,
        generic_version=(flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET) & 0xFF if cov >= 6 else 0,
        target=meta.get("amdhsa.target", ""),
        metadata_version=tuple(meta.get("amdhsa.version", ())),
        kernels=kernels, metadata=meta)


def kernel_code(data: bytes, name: str) -> bytes:
    """The machine code bytes of kernel `name` (its STT_FUNC symbol's st_size bytes)."""
    elf = _elf(data)
    found = []
    for secname in (".symtab", ".dynsym"):
        symtab = elf.get_section_by_name(secname)
        if symtab is None:
            continue
        for sym in symtab.get_symbol_by_name(name) or ():
            if sym["st_info"]["type"] == "STT_FUNC":
                found.append(sym)
        if found:
            break
    if not found:
        raise KeyError(f"no function symbol {name!r} in the code object")
    sym = found[0]
    addr, size = sym["st_value"], sym["st_size"]
    sec = elf.get_section(sym["st_shndx"])
    start = addr - sec["sh_addr"]
    if start < 0 or start + size > sec["sh_size"]:
        raise ValueError(f"symbol {name!r} lies outside its section {sec.name}")
    return sec.data()[start:start + size]


_ASM_SKIP = re.compile(r"^\s*(?:;|//|\.|$|[\w.$]+:)")


def asm_kernel_instructions(asm: str, name: str) -> list[str]:
    """The instruction lines of function `name` in AMDGCN assembly text (from
    `compile_amdgcn_asm`): from its label to its `.Lfunc_end`, without labels,
    directives and comments; each line stripped, trailing comments removed."""
    lines = asm.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == f"{name}:")
    except StopIteration:
        raise KeyError(f"no function {name!r} in the assembly") from None
    out = []
    for l in lines[start + 1:]:
        s = l.strip()
        if s.startswith(".Lfunc_end"):
            break
        if _ASM_SKIP.match(l):
            continue
        s = s.split(";")[0].split("//")[0].strip()
        if s:
            out.append(s)
    return out
