"""Kernel -> artifact: LLVM IR text, then a code object (AMD) or PTX (NVIDIA), with the
figures a kernel author checks first (registers, spills, LDS, kernarg bytes) and a manifest.

Everything here is deterministic: the same kernel gives the same bytes (tests rebuild and
compare), so a digest of a code object identifies what was built.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from .backend import amdgcn
from .backend.toolchain import Job, compile_many
from .codeobject import CodeObject, read_code_object
from .ir import Kernel
from .targets import AMD_TARGETS


@dataclass
class Artifact:
    kernel: Kernel
    target: str
    data: bytes  # code object bytes, or PTX text encoded as UTF-8
    llvm_ir: str
    code_object: CodeObject | None = None
    extra: dict = field(default_factory=dict)

    @property
    def suffix(self) -> str:
        return "co" if self.target in AMD_TARGETS else "ptx"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def figures(self) -> dict:
        """The register table row: VGPR / SGPR / AGPR / spills / LDS / kernarg bytes."""
        row = dict(kernel=self.kernel.name, target=self.target)
        if self.code_object is not None:
            info = self.code_object.kernel(self.kernel.name)
            row.update(vgpr=info.vgpr_count, sgpr=info.sgpr_count, agpr=info.agpr_count,
                       vgpr_spill=info.vgpr_spill_count, sgpr_spill=info.sgpr_spill_count,
                       scratch=info.private_segment_fixed_size,
                       lds=info.group_segment_fixed_size, kernarg=info.kernarg_segment_size)
        else:
            row.update(vgpr=None, sgpr=None, agpr=None, vgpr_spill=None, sgpr_spill=None,
                       scratch=None, lds=self.kernel.lds_bytes, kernarg=self.kernel.abi.size)
        return row

    def manifest(self) -> dict:
        return dict(kernel=self.kernel.name, target=self.target, sha256=self.sha256,
                    wave_size=self.kernel.wave_size, waves_per_cta=self.kernel.waves,
                    threads=self.kernel.threads, abi=self.kernel.abi.to_json(),
                    abi_bytes=self.kernel.abi.size,
                    lds=[dict(name=a.name, dtype=a.dtype.name, count=a.count, offset=a.offset)
                         for a in self.kernel.lds],
                    figures=self.figures(), **self.extra)

    def write(self, directory: Path, stem: str | None = None) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        stem = stem or f"{self.kernel.name}.{self.target}"
        path = directory / f"{stem}.{self.suffix}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(self.data)
        tmp.replace(path)  # never a half-written artifact under the final name
        (directory / f"{stem}.json").write_text(json.dumps(self.manifest(), indent=1) + "\n")
        return path


def emit_llvm(kernel: Kernel, target: str) -> str:
    if target in AMD_TARGETS:
        return amdgcn.emit_llvm(kernel, target)
    if target == "sm_90a":
        from .backend import nvptx
        return nvptx.emit_llvm(kernel)
    raise ValueError(f"no code generator for target {target!r}; use {AMD_TARGETS + ('sm_90a',)}")


def build_many(kernels: list[Kernel], *, workers: int | None = None) -> list[Artifact]:
    """Lower every kernel (in this process: Python errors come first), then compile all of them
    in child processes over the machine's cores."""
    irs = [emit_llvm(k, k.target) for k in kernels]
    outs = compile_many([Job(ir, k.target) for ir, k in zip(irs, kernels)], workers=workers)
    arts = []
    for k, ir, out in zip(kernels, irs, outs):
        if k.target in AMD_TARGETS:
            arts.append(Artifact(k, k.target, out, ir, read_code_object(out)))
        else:
            arts.append(Artifact(k, k.target, out.encode(), ir))
    return arts


def build(kernel: Kernel) -> Artifact:
    return build_many([kernel])[0]
