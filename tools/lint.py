"""Check every code object under a folder against its manifest.

    python -m tools.lint DIR

For each <stem>.co (AMDGCN) / <stem>.ptx (NVPTX) with <stem>.json beside it (as tools.build
writes them), checks:

  file       the bytes are the ones the manifest's sha256 names
  chip       AMD: the ELF e_flags name the manifest's chip (EF_AMDGPU_MACH); PTX: `.target`
  kernarg    the kernel's explicit kernel arguments (AMD: the NT_AMDGPU_METADATA args; PTX:
             the .entry's .param list) are the declared ABI: names (AMD), order, offsets,
             sizes, pointer-ness; AMD: the kernarg segment holds the ABI
  spills     AMD: zero VGPR and SGPR spills, no scratch (private segment) and no dynamic
             stack; PTX: no .local memory
  budget     AMD: the unified VGPR allocation within what one CU's SIMD holds for the
             launch's CTA size (ceil(waves / 4) waves per SIMD share 512 registers per lane,
             granule 8), arch VGPRs and AGPRs at most 256 each (monokernel/targets.py; on
             gfx90a+ the metadata's vgpr_count is the unified total: arch VGPRs aligned to 4,
             then the AGPRs, so arch = vgpr_count - agpr_count), SGPRs
             within 102 addressable + 6 (VCC, FLAT_SCRATCH, XNACK_MASK), LDS within the chip's
             LDS per CTA, the flat work-group size and wave size as launched; PTX: LDS within
             227 KiB
  figures    the manifest's register/LDS/kernarg figures are the code object's

prints one row per code object and every violation; exits 1 on any violation (or when DIR
holds no code object), 0 otherwise.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from pathlib import Path

from monokernel.targets import Target, target as get_target

VGPRS_PER_SIMD_LANE = 512  # CDNA3/CDNA4: one unified file of arch + acc VGPRs per lane
VGPR_GRANULE = 8
SIMDS_PER_CU = 4
SGPR_EXTRA = 6  # VCC, FLAT_SCRATCH, XNACK_MASK counted in the metadata's sgpr_count
NV_REGS_PER_SM = 65536

COLUMNS = ("file", "target", "vgpr", "arch", "agpr", "sgpr", "spills", "scratch", "lds", "kernarg",
           "threads", "status")


def budget(t: Target, threads: int, wave_size: int | None = None) -> dict:
    """What one CTA of `threads` threads may use on target `t` (one CTA per CU/SM)."""
    wave_size = wave_size or t.wave_size
    waves = max(1, math.ceil(threads / wave_size))
    if t.is_amd:
        per_simd = math.ceil(waves / SIMDS_PER_CU)
        unified = VGPRS_PER_SIMD_LANE // per_simd // VGPR_GRANULE * VGPR_GRANULE
        return dict(threads=t.max_threads_per_cta, waves_per_simd=per_simd,
                    vgpr=min(t.max_vgprs, unified), agpr=min(t.max_agprs, unified),
                    unified=unified, sgpr=t.max_sgprs + SGPR_EXTRA, lds=t.lds_bytes)
    if t.is_nvidia:
        return dict(threads=t.max_threads_per_cta,
                    regs=min(t.max_vgprs, NV_REGS_PER_SM // max(threads, 1)), lds=t.lds_bytes)
    return dict(threads=t.max_threads_per_cta, lds=t.lds_bytes)


def unified_used(vgpr_count: int) -> int:
    """Registers per lane a wave allocates, from the metadata's vgpr_count (on gfx90a+ the
    unified total: arch VGPRs aligned to 4, then the AGPRs), in granules of 8."""
    return (vgpr_count + VGPR_GRANULE - 1) // VGPR_GRANULE * VGPR_GRANULE


def arch_vgprs(vgpr_count: int, agpr_count: int) -> int:
    """The arch VGPRs (at most; aligned to 4 when AGPRs follow) of a unified vgpr_count."""
    return vgpr_count - agpr_count if agpr_count else vgpr_count


# ------------------------------------------------------------------------------------- checks

def _abi_rows(manifest) -> list[tuple]:
    return [(a["name"], a["offset"], a["size"], a["kind"] == "ptr") for a in manifest["abi"]]


def check_amd(data: bytes, m: dict) -> tuple[dict, list[str]]:
    from monokernel.codeobject import read_code_object
    v = []
    try:
        co = read_code_object(data)
    except Exception as e:  # noqa: BLE001 - a broken file is a violation, not a crash
        return {}, [f"not a readable AMDGCN code object: {e}"]
    want = m.get("target")
    if co.chip != want:
        v.append(f"chip: e_flags 0x{co.e_flags:x} name {co.chip}, the manifest says {want}")
    try:
        info = co.kernel(m["kernel"])
    except KeyError as e:
        return {}, v + [str(e)]
    row = dict(vgpr=info.vgpr_count, arch=arch_vgprs(info.vgpr_count, info.agpr_count),
               agpr=info.agpr_count, sgpr=info.sgpr_count,
               spills=info.vgpr_spill_count + info.sgpr_spill_count,
               scratch=info.private_segment_fixed_size, lds=info.group_segment_fixed_size,
               kernarg=info.kernarg_segment_size)
    explicit = [(a.name, a.offset, a.size, a.value_kind == "global_buffer")
                for a in info.args if not a.value_kind.startswith("hidden")]
    declared = _abi_rows(m)
    if explicit != declared:
        for i in range(max(len(explicit), len(declared))):
            got = explicit[i] if i < len(explicit) else None
            exp = declared[i] if i < len(declared) else None
            if got != exp:
                v.append(f"kernarg {i}: code object has {_argtxt(got)}, the ABI declares "
                         f"{_argtxt(exp)}")
    if info.kernarg_segment_size < m.get("abi_bytes", 0):
        v.append(f"kernarg segment {info.kernarg_segment_size} B < the ABI's {m['abi_bytes']} B")
    if info.vgpr_spill_count or info.sgpr_spill_count:
        v.append(f"spills: {info.vgpr_spill_count} VGPR, {info.sgpr_spill_count} SGPR")
    if info.private_segment_fixed_size:
        v.append(f"scratch: {info.private_segment_fixed_size} bytes per lane")
    if info.uses_dynamic_stack:
        v.append("uses a dynamic stack")
    t = get_target(want) if want in ("gfx950", "gfx942") else get_target(co.chip) \
        if co.chip in ("gfx950", "gfx942") else None
    threads = int(m.get("threads", 0))
    if t is not None:
        b = budget(t, threads, m.get("wave_size"))
        arch = arch_vgprs(info.vgpr_count, info.agpr_count)
        if arch > b["vgpr"]:
            v.append(f"arch VGPRs {arch} > {b['vgpr']} (CTA of {threads} threads)")
        if info.agpr_count > b["agpr"]:
            v.append(f"AGPRs {info.agpr_count} > {b['agpr']}")
        u = unified_used(info.vgpr_count)
        if u > b["unified"]:
            v.append(f"VGPR allocation {u} (arch + acc) > {b['unified']} per lane: "
                     f"{b['waves_per_simd']} wave(s) of the CTA share a SIMD")
        if info.sgpr_count > b["sgpr"]:
            v.append(f"SGPRs {info.sgpr_count} > {b['sgpr']}")
        if info.group_segment_fixed_size > b["lds"]:
            v.append(f"LDS {info.group_segment_fixed_size} B > {b['lds']} B of {t.name}")
        if threads > b["threads"]:
            v.append(f"CTA of {threads} threads > {b['threads']}")
    if info.max_flat_workgroup_size and info.max_flat_workgroup_size < threads:
        v.append(f"max flat work-group size {info.max_flat_workgroup_size} < the launch's "
                 f"{threads} threads")
    if m.get("wave_size") and info.wavefront_size != m["wave_size"]:
        v.append(f"wave size {info.wavefront_size} != the manifest's {m['wave_size']}")
    fig = m.get("figures") or {}
    for key, got in (("vgpr", info.vgpr_count), ("agpr", info.agpr_count),
                     ("sgpr", info.sgpr_count), ("vgpr_spill", info.vgpr_spill_count),
                     ("sgpr_spill", info.sgpr_spill_count),
                     ("scratch", info.private_segment_fixed_size),
                     ("lds", info.group_segment_fixed_size),
                     ("kernarg", info.kernarg_segment_size)):
        if key in fig and fig[key] != got:
            v.append(f"manifest figure {key} = {fig[key]}, the code object has {got}")
    return row, v


def _argtxt(a) -> str:
    if a is None:
        return "nothing"
    return f"{a[0]}@{a[1]}:{a[2]}B{' ptr' if a[3] else ''}"


_PTX_TYPES = {"u64": 8, "s64": 8, "b64": 8, "f64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4,
              "u16": 2, "s16": 2, "b16": 2, "f16": 2, "u8": 1, "s8": 1, "b8": 1}


def check_ptx(data: bytes, m: dict) -> tuple[dict, list[str]]:
    v = []
    text = data.decode("utf-8", "replace")
    tm = re.search(r"^\s*\.target\s+([\w]+)", text, re.M)
    if not tm or tm.group(1) != m.get("target"):
        v.append(f"chip: PTX .target {tm.group(1) if tm else 'missing'}, the manifest says "
                 f"{m.get('target')}")
    em = re.search(r"\.entry\s+" + re.escape(m["kernel"]) + r"\s*\((.*?)\)", text, re.S)
    row = dict(lds=m.get("figures", {}).get("lds"), kernarg=m.get("abi_bytes"))
    if not em:
        return row, v + [f"no .entry {m['kernel']} in the PTX"]
    params = [re.match(r"\s*\.param\s+\.(\w+)", p) for p in em.group(1).split(",")
              if p.strip()]
    off, got = 0, []
    for pm in params:
        ty = pm.group(1) if pm else "?"
        size = _PTX_TYPES.get(ty, 0)
        off = (off + size - 1) // size * size if size else off
        got.append((off, size))
        off += size
    declared = [(a["offset"], a["size"]) for a in m["abi"]]
    if got != declared:
        v.append(f"kernarg: PTX params (offset, size) {got}, the ABI declares {declared}")
    if re.search(r"^\s*\.local\b", text, re.M):
        v.append("spills: the PTX declares .local memory (stack / spill)")
    t = get_target(m.get("target", "sm_90a")) if m.get("target") in ("sm_90a",) else None
    lds = int((m.get("figures") or {}).get("lds") or 0)
    if t is not None and lds > t.lds_bytes:
        v.append(f"LDS {lds} B > {t.lds_bytes} B")
    row.update(spills=0 if not v else None)
    return row, v


def lint_file(path: Path) -> tuple[dict, list[str]]:
    row = dict(file=str(path))
    mpath = path.with_suffix(".json")
    if not mpath.exists():
        return dict(row, status="FAIL"), [f"no manifest {mpath.name} beside it"]
    try:
        m = json.loads(mpath.read_text())
    except ValueError as e:
        return dict(row, status="FAIL"), [f"manifest is not JSON: {e}"]
    data = path.read_bytes()
    row.update(target=m.get("target"), threads=m.get("threads"))
    v = []
    if m.get("sha256") and hashlib.sha256(data).hexdigest() != m["sha256"]:
        v.append("file: its sha256 is not the manifest's (rebuilt or altered after the manifest)")
    if "abi" not in m or "kernel" not in m:
        return dict(row, status="FAIL"), v + ["manifest lacks the kernel name or the ABI"]
    fn = check_amd if path.suffix == ".co" else check_ptx
    got, more = fn(data, m)
    row.update(got)
    v += more
    row["status"] = "ok" if not v else f"FAIL ({len(v)})"
    return row, v


def find(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.suffix in (".co", ".ptx") and p.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.lint", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="folder written by tools.build (searched recursively), or a file")
    args = ap.parse_args(argv)
    root = Path(args.dir)
    if not root.exists():
        ap.error(f"{root} does not exist")
    files = find(root)
    if not files:
        print(f"error: no code objects (.co / .ptx) under {root}", file=sys.stderr)
        return 1
    from tools.common import table
    rows, bad = [], []
    for f in files:
        row, v = lint_file(f)
        row["file"] = str(f.relative_to(root)) if root.is_dir() else f.name
        rows.append(row)
        bad += [f"{row['file']}: {x}" for x in v]
    print(table(rows, COLUMNS))
    if bad:
        print(f"\n{len(bad)} violation(s):", file=sys.stderr)
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        return 1
    print(f"\n{len(files)} code object(s): no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
