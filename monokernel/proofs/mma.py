"""One proof kernel per MMA atom: D = A @ B + C through the atom's operand maps.

Each lane gathers its A/B/C slots from row-major matrices through index tables computed on
the host from the atom's (lane, slot) -> (row, col) maps, runs the atom, and scatters D the
same way. In the interpreter this proves the plumbing (the atom executes from the same maps);
on a GPU or in the ISA emulator it proves the maps themselves against the hardware. For
`wgmma` the B operand is copied to LDS in the atom's shared-memory layout and passed by
descriptor, as on Hopper; the four warps of the warpgroup issue it together.
"""
from __future__ import annotations

import numpy as np

from .. import numerics
from ..atoms import ATOMS, atom as get_atom
from ..atoms.base import SW128_ATOM_BYTES
from ..dsl import build_kernel
from ..ir import ABI, Ptr
from ..types import f32, i32, u64

ATOM_NAMES = tuple(sorted(n for n in ATOMS if not n.startswith("sm90_wgmma")
                          or n.endswith(("n64k32_e4m3", "n64k32_e4m3_ss", "n64k32_e4m3_ss_sw128"))))


def targets_of(name):
    return tuple(sorted(get_atom(name).targets))


def abi(at):
    return ABI(a=Ptr(at.a_dtype), b=Ptr(at.b_dtype), c=Ptr(f32), d=Ptr(f32), a_idx=Ptr(i32),
               b_idx=Ptr(i32), c_idx=Ptr(i32))


def _gather(k, buf, idx_buf, lane, slots, dt):
    vals = []
    for s in range(slots):
        i = k.load(idx_buf, lane * slots + s, i32)
        vals.append(k.load(buf, i, dt))
    return vals[0] if slots == 1 else k.vec(*vals)


def body(k, *, at):
    a = k.args
    if at.group == 128:
        return wg_body(k, at=at)
    lane = k.lane_id()
    A = _gather(k, a.a, a.a_idx, lane, at.a_slots, at.a_dtype)
    B = _gather(k, a.b, a.b_idx, lane, at.b_slots, at.b_dtype)
    C = _gather(k, a.c, a.c_idx, lane, at.c_slots, f32)
    D = k.mma(at, A, B, C)
    for s in range(at.c_slots):
        k.store(a.d, k.load(a.c_idx, lane * at.c_slots + s, i32), D[s] if at.c_slots > 1 else D)


def wg_operands(k, at):
    """A wgmma's operands from the proof's buffers: B [K, N] staged in LDS in the atom's
    layout (b_idx[e]: element e's LDS element offset; "b_smem" must be the kernel's first
    LDS allocation), A and C gathered into registers. Returns (A, C, B descriptor)."""
    a = k.args
    lane = k.wave_id() * k.L + k.lane_id()  # 0..127 over the warpgroup
    smem = k.lds("b_smem", at.b_dtype, int(at.b_smem.table().max()) // at.b_smem.elem_bytes + 1)
    for e0 in k.range(0, at.K * at.N, 128):
        e = e0 + lane
        k.store(smem, k.load(a.b_idx, e, i32, mask=e < at.K * at.N), k.load(a.b, e, at.b_dtype,
                mask=e < at.K * at.N), mask=e < at.K * at.N)
    if at.a_smem is not None:  # the SS form: A [M, K] staged too, after B
        n_a = at.M * at.K
        a_lds = k.lds("a_smem", at.a_dtype, int(at.a_smem.table().max()) // at.a_smem.elem_bytes + 1)
        if at.a_smem.swizzle and k.lds_offset("a_smem") % SW128_ATOM_BYTES:
            raise ValueError(f"{at.name}: A's LDS at byte {k.lds_offset('a_smem')}; a swizzled "
                             f"placement starts on a {SW128_ATOM_BYTES}-byte boundary")
        for e0 in k.range(0, n_a, 128):
            e = e0 + lane
            k.store(a_lds, k.load(a.a_idx, e, i32, mask=e < n_a), k.load(a.a, e, at.a_dtype,
                    mask=e < n_a), mask=e < n_a)
    with k.async_proxy_lds():  # B (and an SS atom's A) is read next by wgmma (the async proxy)
        k.barrier()
    if at.a_smem is not None:
        A = k.const(at.a_smem_descriptor(k.lds_offset("a_smem")), u64)
    else:
        A = _gather(k, a.a, a.a_idx, lane, at.a_slots, at.a_dtype)
    C = _gather(k, a.c, a.c_idx, lane, at.c_slots, f32)
    return A, C, k.const(at.smem_descriptor(0), u64)


def wg_body(k, *, at):
    a = k.args
    lane = k.wave_id() * k.L + k.lane_id()
    A, C, desc = wg_operands(k, at)
    k.wgmma_fence()
    D = k.wgmma(at, A, desc, C)
    k.wgmma_commit()
    k.wgmma_wait(0)
    for s in range(at.c_slots):
        k.store(a.d, k.load(a.c_idx, lane * at.c_slots + s, i32), D[s])


def builder(name):
    def build(target, **_):
        at = get_atom(name)
        waves = 4 if at.group == 128 else 1
        return build_kernel(f"mma_{name}", body, abi=abi(at), target=target, waves=waves,
                            wave_size=32 if at.group in (32, 128) else 64, at=at)
    return build


def make_inputs(rng, name):
    at = get_atom(name)
    A = rng.standard_normal((at.M, at.K)) * 2
    B = rng.standard_normal((at.K, at.N)) * 2
    C = rng.standard_normal((at.M, at.N))
    a = numerics.convert(A, "f64", at.a_dtype)
    b = numerics.convert(B, "f64", at.b_dtype)
    if at.a_smem is not None:  # element e = m * K + k: its LDS element offset
        a_idx = (at.a_smem.table() // at.a_smem.elem_bytes).astype(np.int32).reshape(-1)
    else:
        a_idx = (at.a_rows() * at.K + at.a_cols()).astype(np.int32).reshape(-1)
    c_idx = (at.c_rows() * at.N + at.c_cols()).astype(np.int32).reshape(-1)
    if at.b_source == "smem":
        b_idx = (at.b_smem.table() // at.b_smem.elem_bytes).astype(np.int32)  # [K, N]
        b_idx = b_idx.reshape(-1)
    else:
        b_idx = (at.b_rows() * at.N + at.b_cols()).astype(np.int32).reshape(-1)
    return dict(a=a.reshape(-1), b=b.reshape(-1), c=C.astype(np.float32).reshape(-1),
                d=np.full(at.M * at.N, np.nan, np.float32), a_idx=a_idx, b_idx=b_idx, c_idx=c_idx)


def reference(inp, name):
    at = get_atom(name)
    A = numerics.to_f64(inp["a"], at.a_dtype).reshape(at.M, at.K)
    B = numerics.to_f64(inp["b"], at.b_dtype).reshape(at.K, at.N)
    return dict(d=A @ B + inp["c"].astype(np.float64).reshape(at.M, at.N))


def tolerance(name):
    """Inputs are exact in the operand format, so the products are exact; the hardware sums K
    of them in f32 in an order of its own: a few f32 ulps of the sum of |terms|."""
    at = get_atom(name)
    return at.K * 2.0 ** -23


def check(inp, ref, name):
    at = get_atom(name)
    got = inp["d"].astype(np.float64).reshape(at.M, at.N)
    scale = np.abs(ref["d"]).max()
    return float(np.abs(got - ref["d"]).max() / scale)
