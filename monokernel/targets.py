"""Facts about each target the compiler builds for.

Numbers come from the vendors' documents: MI355X (CDNA4, gfx950) has 256 CUs and 160 KiB of
LDS per CU; MI300X (CDNA3, gfx942) 304 CUs and 64 KiB of LDS; both have 512 VGPRs per lane,
(up to 256 arch + 256 acc) for a wave at occupancy 1, and 102 addressable SGPRs. The H200 (sm_90a)
has 132 SMs, 227 KiB of shared memory per block and 255 registers per thread.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str  # "gfx950", "gfx942", "sm_90a", "interp"
    vendor: str  # "amd", "nvidia", "interp"
    wave_size: int
    num_ctas: int  # persistent grid: one CTA per compute unit
    lds_bytes: int  # LDS / shared memory available to one CTA
    max_vgprs: int  # arch VGPRs per lane (AMD) / registers per thread (NVIDIA)
    max_agprs: int
    max_sgprs: int
    max_threads_per_cta: int
    triple: str
    fp8: str | None  # the fp8 format the MMA units read natively

    @property
    def is_amd(self) -> bool:
        return self.vendor == "amd"

    @property
    def is_nvidia(self) -> bool:
        return self.vendor == "nvidia"


GFX950 = Target("gfx950", "amd", 64, 256, 160 * 1024, 256, 256, 102, 1024,
                "amdgcn-amd-amdhsa", "fp8e4m3fn")
GFX942 = Target("gfx942", "amd", 64, 304, 64 * 1024, 256, 256, 102, 1024,
                "amdgcn-amd-amdhsa", "fp8e4m3fnuz")
SM90A = Target("sm_90a", "nvidia", 32, 132, 227 * 1024, 255, 0, 0, 1024,
               "nvptx64-nvidia-cuda", "fp8e4m3fn")
# The interpreter runs any grid and either wave size; these are its defaults.
INTERP = Target("interp", "interp", 64, 8, 160 * 1024, 1 << 30, 1 << 30, 1 << 30, 1024,
                "", "fp8e4m3fn")

TARGETS = {t.name: t for t in (GFX950, GFX942, SM90A, INTERP)}
AMD_TARGETS = ("gfx950", "gfx942")


def target(name: str | Target) -> Target:
    if isinstance(name, Target):
        return name
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known targets: {sorted(TARGETS)}") from None
