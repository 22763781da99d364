"""The LLVM toolchain (monokernel.backend.toolchain) and the code object reader
(monokernel.codeobject), on small hand-written LLVM IR kernels."""
from __future__ import annotations

import os

import pytest

from monokernel import codeobject as co
from monokernel.backend import toolchain as tc

AMD = ["gfx950", "gfx942"]

# A kernel with a global pointer argument, a by-value argument, the usual kernel
# attributes and a 4 KiB LDS array (exchanged across lanes through a barrier).
LDS_KERNEL = """
target triple = "amdgcn-amd-amdhsa"

@lds = internal addrspace(3) global [1024 x float] poison, align 16

define amdgpu_kernel void @lds_swap(ptr addrspace(1) noalias %out, i32 %n) #0 {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr float, ptr addrspace(3) @lds, i32 %tid
  %f = uitofp i32 %tid to float
  store float %f, ptr addrspace(3) %p, align 4
  call void @llvm.amdgcn.s.barrier()
  %x = xor i32 %tid, 1
  %q = getelementptr float, ptr addrspace(3) @lds, i32 %x
  %v = load float, ptr addrspace(3) %q, align 4
  %in = icmp ult i32 %tid, %n
  br i1 %in, label %store, label %done
store:
  %o = getelementptr float, ptr addrspace(1) %out, i32 %tid
  store float %v, ptr addrspace(1) %o, align 4
  br label %done
done:
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()

attributes #0 = { "amdgpu-flat-work-group-size"="1,256" "amdgpu-no-dispatch-ptr"
  "amdgpu-no-queue-ptr" "amdgpu-no-implicitarg-ptr" "amdgpu-no-hostcall-ptr"
  "amdgpu-no-heap-ptr" "amdgpu-no-multigrid-sync-arg" "amdgpu-no-default-queue"
  "amdgpu-no-completion-action" "uniform-work-group-size"="true" }

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 COV}
"""

# A kernel with just a global pointer argument (no attributes, no LDS).
SIMPLE_KERNEL = """
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @add_one(ptr addrspace(1) %buf) #0 {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr i32, ptr addrspace(1) %buf, i32 %tid
  %v = load i32, ptr addrspace(1) %p, align 4
  %w = add i32 %v, 1
  store i32 %w, ptr addrspace(1) %p, align 4
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
attributes #0 = { "amdgpu-flat-work-group-size"="1,1024" }
"""

# v_permlane32_swap exists on gfx950 only: built for gfx942, instruction selection fails
# and LLVM aborts its process ("LLVM ERROR: Cannot select: intrinsic ...").
GFX950_ONLY = """
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @swap_halves(ptr addrspace(1) %out) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %r = call { i32, i32 } @llvm.amdgcn.permlane32.swap(i32 %tid, i32 %tid, i1 false, i1 false)
  %a = extractvalue { i32, i32 } %r, 0
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %a, ptr addrspace(1) %o, align 4
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare { i32, i32 } @llvm.amdgcn.permlane32.swap(i32, i32, i1 immarg, i1 immarg)
"""

PTX_KERNEL = """
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @iota(ptr addrspace(1) %out) {
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %tid, ptr addrspace(1) %o, align 4
  ret void
}

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"""


def lds_kernel(cov: int = 500) -> str:
    return LDS_KERNEL.replace("COV", str(cov))


@pytest.mark.parametrize("chip", AMD)
@pytest.mark.parametrize("cov", [500, 600])
def test_lds_kernel_builds_and_notes_parse(chip, cov):
    data = tc.compile_amdgcn(lds_kernel(cov), chip)
    obj = co.read_code_object(data)
    assert obj.chip == chip
    assert obj.e_flags & 0xFF == tc.EF_AMDGPU_MACH[chip]
    assert obj.code_object_version == cov // 100
    assert obj.target.startswith(f"amdgcn-amd-amdhsa--{chip}")
    assert obj.xnack in ("any", "on", "off") and obj.sramecc in ("any", "on", "off")
    k = obj.kernel("lds_swap")
    assert k.symbol == "lds_swap.kd"
    assert k.vgpr_count > 0 and k.sgpr_count > 0
    assert k.vgpr_spill_count == 0 and k.sgpr_spill_count == 0 and k.spills == 0
    assert k.group_segment_fixed_size == 1024 * 4  # the LDS array, as declared
    assert k.private_segment_fixed_size == 0
    assert k.kernarg_segment_size == 12  # ptr + i32, no hidden arguments
    assert k.kernarg_segment_align == 8
    assert k.wavefront_size == 64
    assert k.max_flat_workgroup_size == 256
    assert [(a.name, a.offset, a.size, a.value_kind, a.address_space) for a in k.args] == [
        ("out", 0, 8, "global_buffer", "global"), ("n", 8, 4, "by_value", None)]
    row = k.summary(chip)
    assert row["lds"] == 4096 and row["vgpr"] == k.vgpr_count and row["chip"] == chip
    assert obj.summary() == [row]
    code = co.kernel_code(data, "lds_swap")
    assert len(code) > 0 and len(code) % 4 == 0
    assert code[-4:] == bytes.fromhex("0000 81bf")  # s_endpgm


@pytest.mark.parametrize("chip", AMD)
def test_simple_kernel_hidden_args_and_wg_size(chip):
    obj = co.read_code_object(tc.compile_amdgcn(SIMPLE_KERNEL, chip, opt_level=2))
    (k,) = obj.kernels
    assert k.name == "add_one" and k.max_flat_workgroup_size == 1024
    assert k.args[0].value_kind == "global_buffer" and k.args[0].size == 8
    assert k.kernarg_segment_size >= 8 and k.group_segment_fixed_size == 0


def test_rebuild_is_byte_identical():
    ir = lds_kernel()
    # Two jobs at once run in two different children (when there are two CPUs).
    a, b = tc.compile_many([(ir, "gfx950"), (ir, "gfx950")])
    c = tc.compile_amdgcn(ir, "gfx950")
    assert a == b == c
    for needle in (b"/tmp", b"mk-link", b"kernel.o", os.getcwd().encode()):
        assert needle not in a
    assert tc.compile_amdgcn(ir, "gfx942") != a
    asm1 = tc.compile_amdgcn_asm(ir, "gfx942")
    assert asm1 == tc.compile_amdgcn_asm(ir, "gfx942")


def test_asm_text_for_isa_checks():
    asm = tc.compile_amdgcn_asm(lds_kernel(), "gfx950")
    insts = co.asm_kernel_instructions(asm, "lds_swap")
    assert insts[-1] == "s_endpgm"
    assert sum(i.startswith("s_barrier") for i in insts) == 1
    assert any(i.startswith("ds_write") for i in insts)
    assert any(i.startswith("ds_read") for i in insts)


def test_bogus_chip_is_a_value_error_before_llvm():
    with pytest.raises(ValueError, match="gfx9999"):
        tc.compile_amdgcn(SIMPLE_KERNEL, "gfx9999")
    with pytest.raises(ValueError, match="gfx9999"):
        tc.compile_amdgcn_asm(SIMPLE_KERNEL, "gfx9999")
    with pytest.raises(ValueError, match="gfx9999"):
        tc.compile_many([(SIMPLE_KERNEL, "gfx950"), (SIMPLE_KERNEL, "gfx9999")])
    with pytest.raises(ValueError, match="sm_9x"):
        tc.compile_ptx(PTX_KERNEL, "sm_9x")
    with pytest.raises(ValueError, match="PTX"):
        tc.compile_ptx(PTX_KERNEL, "sm_90a", ptx_version=78)


def test_llvm_abort_is_backend_crash_and_caller_survives():
    # The same IR is fine for gfx950 ...
    co.read_code_object(tc.compile_amdgcn(GFX950_ONLY, "gfx950"))
    # ... and aborts LLVM for gfx942.
    with pytest.raises(tc.BackendCrash) as info:
        tc.compile_amdgcn(GFX950_ONLY, "gfx942")
    e = info.value
    assert e.chip == "gfx942" and e.kernel == "swap_halves"
    assert "Cannot select" in e.stderr and e.returncode is not None and e.returncode != 0
    msg = str(e)
    assert "gfx942" in msg and "swap_halves" in msg and "Cannot select" in msg
    # This process is alive and the next build gets a working child.
    assert co.read_code_object(tc.compile_amdgcn(SIMPLE_KERNEL, "gfx942")).chip == "gfx942"


def test_compile_many_isolates_a_crash():
    jobs = [(SIMPLE_KERNEL, "gfx950"), (GFX950_ONLY, "gfx942"), (SIMPLE_KERNEL, "gfx942"),
            tc.Job(PTX_KERNEL, "sm_90a"), tc.Job(SIMPLE_KERNEL, "gfx950", output="asm")]
    r = tc.compile_many(jobs, return_exceptions=True)
    assert co.read_code_object(r[0]).chip == "gfx950"
    assert isinstance(r[1], tc.BackendCrash)
    assert co.read_code_object(r[2]).chip == "gfx942"
    assert ".target sm_90a" in r[3]
    assert "s_endpgm" in r[4]
    with pytest.raises(tc.BackendCrash):
        tc.compile_many(jobs)


def test_timeout_kills_the_child():
    with pytest.raises(tc.BackendCrash, match="timeout"):
        tc.compile_amdgcn(lds_kernel(), "gfx950", timeout=1e-4)
    assert tc.compile_amdgcn(lds_kernel(), "gfx950")[:4] == b"\x7fELF"


@pytest.mark.parametrize("ir, match", [
    ("define amdgpu_kernel void @broken(ptr addrspace(1) %p {\n  ret void\n}\n", "error"),
    # parses, but fails the verifier: a use before its definition in the same block.
    ("define amdgpu_kernel void @bad_order() {\n  %b = add i32 %a, 1\n  %a = add i32 1, 1\n"
     "  ret void\n}\n", "dominate"),
    (PTX_KERNEL, "triple"),  # an NVPTX module handed to the AMD backend
])
def test_malformed_ir_is_llvm_error(ir, match):
    with pytest.raises(tc.LLVMError, match=match) as info:
        tc.compile_amdgcn(ir, "gfx950")
    assert info.value.chip == "gfx950"


def test_ptx_trivial_kernel():
    ptx = tc.compile_ptx(PTX_KERNEL)
    assert ".target sm_90a" in ptx
    assert ".version 8.0" in ptx
    assert ".entry iota" in ptx
    assert ".version 8.6" in tc.compile_ptx(PTX_KERNEL, "sm_90a", ptx_version=86)
    assert tc.compile_ptx(PTX_KERNEL) == ptx


def test_kernel_names_and_readers_reject_garbage():
    assert tc.kernel_names(lds_kernel()) == ["lds_swap"]
    assert tc.kernel_names(PTX_KERNEL) == ["iota"]
    with pytest.raises(ValueError):
        co.read_code_object(b"not an elf")
    data = tc.compile_amdgcn(SIMPLE_KERNEL, "gfx950")
    with pytest.raises(KeyError):
        co.kernel_code(data, "nope")
    with pytest.raises(KeyError):
        co.read_code_object(data).kernel("nope")


def test_llvm_stderr_on_success_is_a_warning():
    with pytest.warns(tc.BackendWarning, match="not a recognized feature"):
        data = tc.compile_amdgcn(SIMPLE_KERNEL, "gfx950", features="+no-such-feature")
    assert co.read_code_object(data).chip == "gfx950"
