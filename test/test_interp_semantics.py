"""The interpreter's rules that kernels rely on: stalls are reported, polls time out when
asked, wgmma results cannot be read early, memory faults and undefined ops are errors."""
import numpy as np
import pytest

from monokernel import interp
from monokernel.dsl import ABI, DSLError, Ptr, Scalar, build_kernel
from monokernel.interp import InterpError, Stall
from monokernel.memory import MemoryFault
from monokernel.types import f32, i32, u32, u64


def _waiter(k):
    a = k.args
    got, timed_out = k.poll(a.box, k.cta_id(), 1, bits=32)
    k.store(a.out, k.cta_id(), k.cast(timed_out, u32))


WAIT_ABI = ABI(box=Ptr(u64), out=Ptr(u32))


@pytest.mark.parametrize("mode", ["inorder", "random", "relaxed"])
def test_stall_names_cta_wave_and_address(mode):
    kern = build_kernel("waiter", _waiter, abi=WAIT_ABI, target="interp")
    with pytest.raises(Stall) as e:
        interp.run(kern, dict(box=np.zeros(2, np.uint64), out=np.zeros(2, np.uint32)), grid=2,
                   mode=mode)
    msg = str(e.value)
    assert "CTA 0 wave 0 waits on box+0" in msg and "CTA 1 wave 0 waits on box+8" in msg


def test_bounded_poll_times_out_when_asked():
    kern = build_kernel("waiter", _waiter, abi=WAIT_ABI, target="interp")
    out = np.zeros(2, np.uint32)
    interp.run(kern, dict(box=np.zeros(2, np.uint64), out=out), grid=2, on_stall="timeout")
    assert out.tolist() == [1, 1]


def test_every_ir_op_has_an_interpreter_rule_and_an_llvm_lowering():
    """The IR's opcode table, the interpreter (the living definition) and the LLVM emitter
    name the same ops: an op added to one and dropped from another fails here, not in the
    first kernel that uses it."""
    from monokernel import ir
    from monokernel.backend.llvm_common import Emitter
    rules = {n[3:] for n in dir(interp.Wave) if n.startswith("op_")}
    lowered = {n[3:] for n in dir(Emitter) if n.startswith("op_")}
    assert rules == set(ir.OPCODES), sorted(rules ^ set(ir.OPCODES))
    assert set(ir.OPCODES) <= lowered, sorted(set(ir.OPCODES) - lowered)


def test_a_poll_with_no_active_lane_reads_nothing():
    """A masked-off poll issues no load: its address may lie outside every buffer."""
    def body(k):
        a = k.args
        got, timed_out = k.poll(a.box, 1 << 20, 1, bits=32, mask=k.lane_id() < 0)
        k.store(a.out, 0, k.cast(timed_out, u32), mask=k.lane_id().eq(0))
    kern = build_kernel("masked_poll", body, abi=WAIT_ABI, target="interp")
    out = np.full(1, 7, np.uint32)
    interp.run(kern, dict(box=np.zeros(1, np.uint64), out=out), grid=1)
    assert out.tolist() == [0]


def test_a_dsl_polling_loop_yields_and_stalls_at_poll_pause():
    """poll_pause: a loop of plain relaxed loads that waits for a word nothing will write
    is reported as a stall (never a livelock to max_steps), and with on_stall "timeout"
    poll_pause returns true so the loop can give up."""
    def body(k):  # look, then (a round found the word stale) pause and look again
        a = k.args
        seen = k.lane_var(k.load(a.box, k.cta_id(), u64, order="relaxed"))
        given_up = k.uniform_var(0, u32)
        with k.while_(lambda: k.ballot(seen.get().ne(1)).ne(0) & given_up.get().eq(0)):
            given_up.set(k.cast(k.poll_pause(), u32))
            seen.set(k.load(a.box, k.cta_id(), u64, order="relaxed"))
        k.store(a.out, k.cta_id(), given_up.get(), mask=k.lane_id().eq(0))
    kern = build_kernel("spin", body, abi=WAIT_ABI, target="interp")
    for mode in ("inorder", "relaxed"):
        with pytest.raises(Stall, match="poll_pause"):
            interp.run(kern, dict(box=np.zeros(2, np.uint64), out=np.zeros(2, np.uint32)),
                       grid=2, mode=mode)
    out = np.zeros(2, np.uint32)
    interp.run(kern, dict(box=np.zeros(2, np.uint64), out=out), grid=2, on_stall="timeout")
    assert out.tolist() == [1, 1]
    out = np.zeros(2, np.uint32)
    interp.run(kern, dict(box=np.ones(2, np.uint64), out=out), grid=2)
    assert out.tolist() == [0, 0]


def test_barrier_skipped_by_one_wave_is_a_stall():
    def body(k):
        with k.if_(k.wave_id().eq(0)):
            k.barrier()
    kern = build_kernel("bad_barrier", body, abi=ABI(x=Ptr(f32)), target="interp", waves=2)
    with pytest.raises(Stall, match="barrier"):
        interp.run(kern, dict(x=np.zeros(1, np.float32)))


def test_out_of_bounds_access_is_a_memory_fault():
    def body(k):
        k.store(k.args.x, k.lane_id() + 1, k.const(1.0, f32))
    kern = build_kernel("oob", body, abi=ABI(x=Ptr(f32)), target="interp")
    with pytest.raises(MemoryFault, match="outside buffer 'x'"):
        interp.run(kern, dict(x=np.zeros(64, np.float32)))


def test_misaligned_vector_load_is_a_memory_fault():
    def body(k):
        v = k.load(k.args.x, 1, f32, 4)
        k.store(k.args.x, 0, k.extract(v, 0))
    kern = build_kernel("misaligned", body, abi=ABI(x=Ptr(f32)), target="interp")
    with pytest.raises(MemoryFault, match="misaligned"):
        interp.run(kern, dict(x=np.zeros(64, np.float32)))


def test_shift_past_width_is_an_error():
    def body(k):
        k.store(k.args.x, 0, k.const(1, i32) << k.args.s)
    kern = build_kernel("shift", body, abi=ABI(x=Ptr(i32), s=Scalar(i32)), target="interp")
    with pytest.raises(InterpError, match="shift by 32"):
        interp.run(kern, dict(x=np.zeros(1, np.int32), s=32))


def test_lanes_storing_different_values_to_one_address_is_an_error():
    def body(k):
        k.store(k.args.x, 0, k.lane_id())
    kern = build_kernel("race", body, abi=ABI(x=Ptr(i32)), target="interp")
    with pytest.raises(InterpError, match="different values to one address"):
        interp.run(kern, dict(x=np.zeros(1, np.int32)))


def test_integer_division_truncates_toward_zero():
    def body(k):
        a = k.load(k.args.x, k.lane_id(), i32)
        k.store(k.args.q, k.lane_id(), a // 3)
        k.store(k.args.r, k.lane_id(), a % 3)
    kern = build_kernel("div", body, abi=ABI(x=Ptr(i32), q=Ptr(i32), r=Ptr(i32)), target="interp")
    x = np.arange(-32, 32, dtype=np.int32)
    q, r = np.zeros(64, np.int32), np.zeros(64, np.int32)
    interp.run(kern, dict(x=x, q=q, r=r))
    assert q.tolist() == [int(v / 3) for v in x] and (q * 3 + r == x).all()


def test_uniform_atomic_runs_once_per_wave_and_per_lane_atomics_serialise():
    def body(k):
        a = k.args
        k.atomic("add", a.c, 0, k.const(1, u32))  # uniform: once per wave
        old = k.atomic("add", a.c, 1, k.cast(k.lane_id(), u32) * 0 + 1)  # per lane
        k.store(a.olds, k.cta_id() * k.L + k.lane_id(), old)
    kern = build_kernel("atomics", body, abi=ABI(c=Ptr(u32), olds=Ptr(u32)), target="interp", waves=1)
    c, olds = np.zeros(2, np.uint32), np.zeros(3 * 64, np.uint32)
    interp.run(kern, dict(c=c, olds=olds), grid=3, mode="random", seed=5)
    assert c.tolist() == [3, 3 * 64]
    assert sorted(olds.tolist()) == list(range(3 * 64))


def test_dsl_rejects_per_lane_control_flow_and_mixed_types():
    abi = ABI(x=Ptr(f32))
    with pytest.raises(DSLError, match="per-lane"):
        build_kernel("b", lambda k: k.if_(k.lane_id() < 3).__enter__(), abi=abi)
    with pytest.raises(DSLError, match="operand types differ"):
        build_kernel("b", lambda k: k.lane_id() + k.const(1.0, f32), abi=abi)
    with pytest.raises(DSLError, match="storage type"):
        build_kernel("b", lambda k: k.load(k.args.x, 0, "bf16") * k.load(k.args.x, 0, "bf16"), abi=abi)
    with pytest.raises(DSLError, match="at most 16"):
        build_kernel("b", lambda k: k.load(k.args.x, 0, f32, 8), abi=abi)
    with pytest.raises(ValueError, match="unknown target 'gfx1234'"):
        build_kernel("b", lambda k: None, abi=abi, target="gfx1234")
    with pytest.raises(DSLError, match="wave64"):
        build_kernel("b", lambda k: None, abi=abi, target="gfx950", wave_size=32)


def test_missing_and_extra_arguments_are_named():
    kern = build_kernel("k", lambda k: None, abi=ABI(x=Ptr(f32), n=Scalar(i32)), target="interp")
    with pytest.raises(ValueError, match="missing kernel argument 'n'"):
        interp.run(kern, dict(x=np.zeros(1, np.float32)))
    with pytest.raises(ValueError, match=r"\['y'\] are not in the kernel's ABI"):
        interp.run(kern, dict(x=np.zeros(1, np.float32), n=1, y=2))
    with pytest.raises(ValueError, match="does not fit i32"):
        interp.run(kern, dict(x=np.zeros(1, np.float32), n=1 << 40))


def test_value_used_outside_the_region_that_defines_it_is_rejected():
    def body(k):
        with k.if_(k.cta_id().eq(0)):
            v = k.load(k.args.x, 0, f32)
        k.store(k.args.x, 1, v)
    with pytest.raises(DSLError, match="defined inside a region"):
        build_kernel("escape", body, abi=ABI(x=Ptr(f32)), target="interp")


def test_atom_of_another_chip_is_a_build_error():
    from monokernel.proofs import mma
    with pytest.raises(DSLError, match="does not exist on gfx942"):
        mma.builder("gfx950_mfma_f32_16x16x128_f8f6f4")("gfx942")
    with pytest.raises(DSLError, match="gfx950 runs wave64"):  # a warpgroup op needs warp32
        mma.builder("sm90_wgmma_m64n64k32_e4m3")("gfx950")


def test_lds_read_before_any_write_shows_the_poison():
    """LDS starts as interp.LDS_POISON bytes in every CTA (garbage on hardware), so a read
    before the kernel's first write gives 0xA5A5A5A5, never zero; written words read back."""
    def body(k):
        lds = k.lds("scratch", u32, 64)
        lane = k.lane_id()
        k.store(k.args.out, lane, k.load(lds, lane, u32))  # never written
        k.store(lds, lane, k.cast(lane, u32) + 7)
        k.store(k.args.out, 32 + lane, k.load(lds, lane, u32))
    kern = build_kernel("poison", body, abi=ABI(out=Ptr(u32)), wave_size=32)
    for mode in ("inorder", "random"):
        out = np.zeros(64, np.uint32)
        interp.run(kern, dict(out=out), grid=1, mode=mode, seed=1)
        assert (out[:32] == np.uint32(int.from_bytes(bytes([interp.LDS_POISON] * 4), "little"))).all()
        assert np.array_equal(out[32:], np.arange(32, dtype=np.uint32) + 7)


def test_bit_counts_and_trailing_zeros():
    """popc / ctz (the lean scan's keep masks): set bits and trailing zero bits of u32 and
    i32 lanes; ctz of 0 is undefined (the backends assume a nonzero operand): an error here;
    LLVM accepts both on both vendors, branch-free on NVPTX."""
    def body(k):
        a = k.load(k.args.x, k.lane_id(), u32)
        k.store(k.args.pc, k.lane_id(), k.popc(a))
        k.store(k.args.tz, k.lane_id(), k.ctz(k.bitcast(a | k.args.nz, i32)))
    abi = ABI(x=Ptr(u32), pc=Ptr(u32), tz=Ptr(i32), nz=Scalar(u32))
    kern = build_kernel("bits", body, abi=abi, target="interp")
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    x[:4] = [0, 1, 0x80000000, 0xFFFFFFFF]
    pc, tz = np.zeros(64, np.uint32), np.zeros(64, np.int32)
    x[0] = 1 << 20  # nz = 0 below: no lane's ctz operand is 0
    interp.run(kern, dict(x=x, pc=pc, tz=tz, nz=0))
    assert pc.tolist() == [bin(int(v)).count("1") for v in x]
    assert tz.tolist() == [(int(v) & -int(v)).bit_length() - 1 for v in x]
    x[5] = 0
    with pytest.raises(InterpError, match="ctz of 0"):
        interp.run(kern, dict(x=x, pc=pc, tz=tz, nz=0))
    interp.run(kern, dict(x=x, pc=pc, tz=tz, nz=1 << 31))  # a sentinel bit: defined
    assert tz[5] == 31 and tz[0] == 20
    with pytest.raises(DSLError, match="popc needs an integer"):
        build_kernel("bad", lambda k: k.popc(k.load(k.args.f, 0, f32)), abi=ABI(f=Ptr(f32)),
                     target="interp")
    from monokernel.backend import amdgcn, nvptx, toolchain
    ptx = toolchain.compile_ptx(nvptx.emit_llvm(build_kernel("bits", body, abi=abi,
                                                             target="sm_90a"), "sm_90a"))
    assert ptx.count("popc.b32") == 2 and " bra" not in ptx  # ctz: popc((a - 1) & ~a)
    co = toolchain.compile_amdgcn(amdgcn.emit_llvm(build_kernel("bits", body, abi=abi,
                                                                target="gfx950"), "gfx950"),
                                  "gfx950")
    assert co[:4] == b"\x7fELF"


def test_an_lds_allocation_is_used_outside_its_region_through_lds_ref():
    """An allocation made inside an if may not be used after it directly (the verifier names
    the region), but k.lds_ref(name) points to it again there: a value stored inside the if
    is read back after it; an unknown name is an error naming it."""
    def body(k, again=True):
        a = k.args
        with k.if_(a.n > 0):
            buf = k.lds("inner", u32, 64)
            k.store(buf, k.lane_id(), k.cast(k.lane_id(), u32) * 3)
        k.barrier()
        p = k.lds_ref("inner") if again else buf
        k.store(a.out, k.lane_id(), k.load(p, k.lane_id(), u32))
    abi = ABI(n=Scalar(i32), out=Ptr(u32))
    kern = build_kernel("lds_again", body, abi=abi, target="interp")
    out = np.zeros(64, np.uint32)
    interp.run(kern, dict(n=1, out=out), grid=1)
    assert out.tolist() == [3 * i for i in range(64)]
    with pytest.raises(DSLError, match="does not enclose"):
        build_kernel("lds_direct", lambda k: body(k, again=False), abi=abi, target="interp")
    with pytest.raises(DSLError, match="lds_ref: no LDS allocation named 'nope'"):
        build_kernel("lds_none", lambda k: k.lds_ref("nope"), abi=abi, target="interp")
