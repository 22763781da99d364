"""AMDGCN code objects of the proof kernels: LLVM accepts them for both chips, the notes say
zero spills and no scratch, the kernarg layout is the declared ABI, rebuilds are identical,
the kernels carry the amdgpu-no-* attributes, a kernel's IR text is its own (not numbered by
what the process built before), and what a chip lacks is a Python error."""
import pytest

from monokernel.backend import amdgcn
from monokernel.backend.toolchain import BackendError
from monokernel.build import build_many, emit_llvm
from monokernel.dsl import DSLError
from monokernel.ir import Ptr
from monokernel.proofs import PROOFS

CHIPS = ("gfx950", "gfx942")


@pytest.fixture(scope="module")
def artifacts():
    kernels = [p.build(chip, **p.full) for p in PROOFS.values() for chip in CHIPS if chip in p.targets]
    return build_many(kernels)


def test_every_proof_kernel_builds_for_both_chips_without_spills(artifacts):
    built = {(a.kernel.name, a.target) for a in artifacts}
    for p in PROOFS.values():
        for chip in CHIPS:
            if chip in p.targets:
                assert (p.build(chip, **p.full).name, chip) in built
    for a in artifacts:
        co = a.code_object
        assert co.chip == a.target and co.code_object_version == 5
        info = co.kernel(a.kernel.name)
        assert info.vgpr_spill_count == 0 and info.sgpr_spill_count == 0, a.figures()
        assert info.private_segment_fixed_size == 0, a.figures()
        assert 0 < info.vgpr_count <= 256 and info.wavefront_size == 64
        assert info.group_segment_fixed_size == a.kernel.lds_bytes
        assert info.max_flat_workgroup_size == a.kernel.threads


def test_kernarg_layout_equals_the_declared_abi(artifacts):
    for a in artifacts:
        info = a.code_object.kernel(a.kernel.name)
        explicit = [x for x in info.args if not x.value_kind.startswith("hidden")]
        assert [(x.name, x.offset, x.size) for x in explicit] == \
            [(s.name, s.offset, s.kind.size) for s in a.kernel.abi.slots]
        for x, s in zip(explicit, a.kernel.abi.slots):
            assert (x.value_kind == "global_buffer") == isinstance(s.kind, Ptr)


def test_rebuilds_are_byte_identical(artifacts):
    again = build_many([a.kernel for a in artifacts[:4]])
    assert [a.data for a in again] == [a.data for a in artifacts[:4]]


@pytest.mark.parametrize("chip", ["gfx950", "sm_90a"])
def test_a_kernels_llvm_ir_does_not_depend_on_what_was_built_before_it(chip):
    """IR ids are process-wide; the emitted names number them per kernel: the same kernel
    built again after another one gives the same IR text (the manifest's llvm_ir_sha256,
    the compile cache's key), as a build of one kind and of every kind must agree."""
    p, other = PROOFS["rmsnorm"], next(q for n, q in PROOFS.items() if n != "rmsnorm")
    if chip not in p.targets:
        pytest.skip(f"rmsnorm has no {chip} build")
    first = emit_llvm(p.build(chip, **p.full), chip)
    if chip in other.targets:
        emit_llvm(other.build(chip, **other.full), chip)
    assert emit_llvm(p.build(chip, **p.full), chip) == first


def test_kernels_declare_the_implicit_inputs_they_do_not_use():
    p = PROOFS["rmsnorm"]
    text = emit_llvm(p.build("gfx950", **p.full), "gfx950")
    for attr in ("amdgpu-no-dispatch-ptr", "amdgpu-no-queue-ptr", "amdgpu-no-implicitarg-ptr",
                 "amdgpu-no-workitem-id-y", "amdgpu-no-hostcall-ptr", "amdgpu-no-heap-ptr"):
        assert f'"{attr}"' in text


def test_wrong_fp8_format_for_the_chip_is_rejected_before_llvm():
    from monokernel.dsl import ABI, build_kernel
    from monokernel.types import f32
    def body(k):
        k.store(k.args.y, 0, k.cast(k.load(k.args.y, 0, "fp8e4m3fnuz"), f32))
    kern = build_kernel("fnuz_on_gfx950", body, abi=ABI(y=Ptr(f32)), target="gfx950")
    with pytest.raises(BackendError, match="gfx950 converts fp8e4m3fn natively"):
        amdgcn.emit_llvm(kern, "gfx950")


def test_kernel_built_for_one_chip_is_not_lowered_for_another():
    p = PROOFS["rmsnorm"]
    with pytest.raises(BackendError, match="built for gfx950, not gfx942"):
        amdgcn.emit_llvm(p.build("gfx950", **p.full), "gfx942")


def test_warp32_kernel_is_rejected_for_amd():
    from monokernel.dsl import ABI, build_kernel
    with pytest.raises(DSLError, match="wave64"):
        build_kernel("k", lambda k: None, abi=ABI(x=Ptr("f32")), target="gfx942", wave_size=32)
