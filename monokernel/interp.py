"""The interpreter: the executable definition of the IR's semantics (numpy).

Every CTA of the grid runs; every wave is a Python generator that yields where a real wave
could be overtaken: at barriers, at polls that have not yet succeeded, at wgmma waits, and
(in the `random` and `relaxed` modes) at every global memory access. A value is an array of
shape (1, n) when uniform and (L, n) when per-lane; control flow is wave-uniform, so all lanes
of a wave are always active and per-lane conditions are masks.

Modes: `inorder` (each wave runs until it blocks, waves in order), `random` (a seeded random
wave is resumed at every yield), `relaxed` (random + memory.RelaxedMemory, in which a missing
release or acquire shows as stale data), `acquire_only` (random + memory.CausalMemory: a
CTA sees another's released stores only through its own acquire after observing their
publication, no random refreshes; a wait that polls long gives a random refresh time to come
first and hide a missing acquire in `relaxed`, and there an acquire makes every earlier
release visible, observed or not; not here: bench/NOTES.md v59). A state in which every live
wave waits and nothing can change raises `Stall` naming each waiting CTA, wave and address;
with `on_stall="timeout"` bounded polls instead run out (their `timed_out` result is true),
which is how a kernel's own error path is exercised.
"""
from __future__ import annotations


import numpy as np

from . import numerics
from .atoms.base import SW128_ATOM_BYTES, swizzled
from .ir import (BULK_ALIGN, L2_LINE_BYTES, MBARRIER_BYTES, NAMED_BARRIERS, TENSOR_MAP_BYTES,
                 Kernel, Ptr, access_alignment, derived_args)
from .memory import CausalMemory, Memory, MemoryFault, RelaxedMemory
from .types import DType, f64, i1, u8

MODES = ("inorder", "random", "relaxed", "acquire_only")
RELAXED_MODES = {"relaxed": RelaxedMemory, "acquire_only": CausalMemory}  # mode: its memory
ASYNC_COPY = "async_copy"  # bulk_table's tag of an async_copy's bytes (not an mbarrier's)


class InterpError(Exception):
    """A kernel did something undefined (shift past width, division by zero, bad lane...)."""


class Stall(InterpError):
    """Every live wave waits and nothing can change."""


class Pending:
    """An asynchronous MMA result that is not ready: reading it is an error."""
    __slots__ = ("group", "seq")

    def __init__(self, group, seq):
        self.group, self.seq = group, seq


class _WarpGroup:
    """Shared state of 4 warps issuing wgmma together."""

    def __init__(self):
        self.issued: dict[int, list] = {}  # seq -> [(wave index in group, a, desc, c, dest)]
        self.done: dict[int, dict[int, np.ndarray]] = {}


class Wave:
    def __init__(self, run: "Run", cta: int, wave: int):
        self.run, self.cta, self.wave = run, cta, wave
        self.L = run.kernel.wave_size
        self.env: dict[int, object] = {}
        self.vars: dict[int, np.ndarray] = {}
        self.wait_addr = None  # what a blocked wave waits on (for stall reports)
        self.seen_writes = -1
        self.seen_wg = -1  # the run's wgmma issue count when this wave last waited
        self.seen_async = -1  # the run's async_events when this wave last waited
        # mbarrier LDS byte -> (its set-up's generation, phases seen complete)
        self.mbar_seen: dict[int, tuple] = {}
        self.force_timeout = False
        # grid_dep_wait: until a wave has passed it, the earlier launch may still run (pdl)
        self.dep_waited = "grid_dep" not in run.kernel.uses
        self.wg_seq = 0
        self.wg_groups: list[list[int]] = [[]]  # committed groups of wgmma sequence numbers
        self.wg_retired: set[int] = set()  # sequence numbers this wave's waits retired
        # async_copy groups (counted per wave: its lanes issue, commit and wait together)
        self.async_committed = 0
        self.async_retired = 0
        self.lane = np.arange(self.L, dtype=np.int32)[:, None]
        self.rules: dict = {}  # opcode -> this wave's bound op_* method, looked up once

    # --------------------------------------------------------------- value access
    def get(self, v):
        x = self.env[v.id]
        if isinstance(x, Pending):
            # a pending result carried through a variable: ready once this wave's own
            # wgmma_wait has retired its group
            if x.seq not in self.wg_retired:
                raise InterpError(f"CTA {self.cta} wave {self.wave}: {v!r} is a wgmma result "
                                  "read before wgmma_wait completed it")
            self.put(v, self.run.warpgroup(self.cta, x.group).done[x.seq][self.wave % 4])
            x = self.env[v.id]
        return x

    def put(self, v, x: np.ndarray):
        t = v.type
        rows, n, dt = 1 if t.uniform else self.L, t.n, t.dtype.np
        if type(x) is np.ndarray and x.shape == (rows, n) and x.dtype == dt and \
                x.flags.c_contiguous:  # the common case, as np.ascontiguousarray would keep it
            self.env[v.id] = x
            return
        x = np.asarray(x)
        if x.ndim == 0:
            x = x.reshape(1, 1)
        elif x.ndim == 1:
            x = x[:, None]
        if x.shape[0] != rows:
            x = np.broadcast_to(x, (rows, x.shape[1]))
        if x.shape[1] != n:
            x = np.broadcast_to(x, (x.shape[0], n))
        self.env[v.id] = np.ascontiguousarray(x, dtype=dt)

    # --------------------------------------------------------------- execution
    def execute(self):
        yield from self.block(self.run.kernel.body)

    def block(self, blk):
        rules = self.rules
        for op in blk.ops:
            h = rules.get(op.opcode)
            if h is None:
                h = rules[op.opcode] = getattr(self, "op_" + op.opcode, None)
                if h is None:
                    raise InterpError(f"interpreter has no rule for {op.opcode}")
            r = h(op)
            if r is not None:
                yield from r

    # control flow
    def op_if(self, op):
        c = bool(self.get(op.args[0])[0, 0])
        return self.block(op.regions[0] if c else op.regions[1])

    def op_for(self, op):
        start, stop, step = (int(self.get(a)[0, 0]) for a in op.args)
        if step <= 0:
            raise InterpError(f"loop step {step} must be positive")
        return self._for(op, start, stop, step)

    def _for(self, op, start, stop, step):
        iv = op.attrs["iv"]
        for i in range(start, stop, step):
            self.env[iv.id] = np.array([[i]], dtype=iv.dtype.np)
            yield from self.block(op.regions[0])

    def op_while(self, op):
        return self._while(op)

    def _while(self, op):
        cond_blk, body = op.regions
        while True:
            yield from self.block(cond_blk)
            if not self._cond:
                return
            yield from self.block(body)

    def op_yield_cond(self, op):
        self._cond = bool(self.get(op.args[0])[0, 0])

    # a variable may carry a pending wgmma result (a software-pipelined accumulator); reading
    # it is checked where the value is used (get)
    def _var_value(self, v):
        x = self.env[v.id]
        return x if isinstance(x, Pending) else self.get(v)

    def op_var_new(self, op):
        self.vars[op.attrs["var"].id] = self._var_value(op.args[0])

    def op_var_get(self, op):
        x = self.vars[op.attrs["var"].id]
        if isinstance(x, Pending):
            self.env[op.result.id] = x
        else:
            self.put(op.result, x)

    def op_var_set(self, op):
        self.vars[op.attrs["var"].id] = self._var_value(op.args[0])

    # values
    def op_const(self, op):
        cached = op.attrs.get("_value")
        if cached is not None:
            self.env[op.result.id] = cached
            return
        dt = op.result.dtype
        val = op.attrs["value"]
        if dt == i1:
            arr = np.array([[bool(val)]])
        elif dt.is_float:
            arr = numerics.convert(np.array([[val]], np.float64), f64, dt)
        else:
            info = np.iinfo(dt.np)
            if not info.min <= int(val) <= info.max:
                raise InterpError(f"constant {val} does not fit {dt}")
            arr = np.array([[int(val)]], dt.np)
        self.put(op.result, arr)
        self.env[op.result.id].flags.writeable = False
        op.attrs["_value"] = self.env[op.result.id]  # constants are computed once per op

    def op_arg(self, op):
        self.put(op.result, self.run.arg_values[op.attrs["name"]])

    def op_arg_reload(self, op):
        self.op_arg(op)

    def op_opaque(self, op):
        self.put(op.result, self.get(op.args[0]))  # identity: it only hides x from LLVM

    def op_lane_id(self, op):
        self.put(op.result, self.lane)

    def op_wave_id(self, op):
        self.put(op.result, np.int32(self.wave))

    def op_cta_id(self, op):
        self.put(op.result, np.int32(self.cta))

    def op_num_ctas(self, op):
        self.put(op.result, np.int32(self.run.grid))

    def op_clock(self, op):
        # ticks: the run's memory accesses so far (any wave's: a job's span counts the work
        # interleaved with it), strictly increasing from one read to the next
        self.run.ticks = max(self.run.ticks + 1, self.run.accesses)
        self.put(op.result, np.uint64(self.run.ticks))

    op_cycles = op_clock  # one time base: the interpreter has no processor clock

    # arithmetic
    def _bin(self, op, f):
        # (floating-point warnings are off for the whole run: `run`'s errstate, entered
        # once rather than once an op)
        self.put(op.result, f(self.get(op.args[0]), self.get(op.args[1])))

    def op_add(self, op): self._bin(op, np.add)
    def op_sub(self, op): self._bin(op, np.subtract)
    def op_mul(self, op): self._bin(op, np.multiply)
    def op_and(self, op): self._bin(op, np.bitwise_and)
    def op_or(self, op): self._bin(op, np.bitwise_or)
    def op_xor(self, op): self._bin(op, np.bitwise_xor)

    def op_min(self, op):
        self._bin(op, np.fmin if op.result.dtype.is_float else np.minimum)

    def op_max(self, op):
        self._bin(op, np.fmax if op.result.dtype.is_float else np.maximum)

    def op_div(self, op):
        dt = op.result.dtype
        if dt.is_float:
            return self._bin(op, np.divide)
        a, b = self.get(op.args[0]), self.get(op.args[1])
        if (b == 0).any():
            raise InterpError(f"integer division by zero in {op!r}")
        q = np.abs(a.astype(np.int64) if dt.bits < 64 else a) // np.abs(b)
        neg = (a < 0) ^ (b < 0) if dt.is_signed else np.zeros_like(q, bool)
        self.put(op.result, np.where(neg, -q, q).astype(dt.np))

    def op_rem(self, op):
        dt = op.result.dtype
        a, b = self.get(op.args[0]), self.get(op.args[1])
        if (b == 0).any():
            raise InterpError(f"integer remainder by zero in {op!r}")
        self.put(op.result, np.fmod(a, b).astype(dt.np))

    def _shift_amount(self, op):
        b = self.get(op.args[1])
        bits = op.result.dtype.bits
        if b.size == 1:  # (most shifts are by a constant: one compare, not two reductions)
            bad = not 0 <= int(b[0, 0]) < bits
        else:
            bad = bool((b < 0).any() or (b >= bits).any())
        if bad:
            raise InterpError(f"shift by {int(b.max())} of a {bits}-bit value in {op!r}")
        return b

    def op_shl(self, op):
        a = self.get(op.args[0])
        b = self._shift_amount(op)
        self.put(op.result, np.left_shift(a, b.astype(a.dtype)))

    def op_shr(self, op):
        a = self.get(op.args[0])
        b = self._shift_amount(op)
        self.put(op.result, np.right_shift(a, b.astype(a.dtype)))

    def _un(self, op, f):
        a = self.get(op.args[0])
        with np.errstate(all="ignore"):
            self.put(op.result, np.asarray(f(a)).astype(op.result.dtype.np))

    def op_neg(self, op): self._un(op, np.negative)
    def op_abs(self, op): self._un(op, np.abs)
    def op_not(self, op): self._un(op, np.invert)
    def op_popc(self, op): self._un(op, lambda a: _bit_count(a))
    def op_ctz(self, op):
        a = self.get(op.args[0])
        if np.any(np.asarray(a) == 0):
            raise InterpError(f"ctz of 0 (undefined: the backends assume a nonzero operand) "
                              f"in {op.result!r}")
        self._un(op, _trailing_zeros)
    def op_exp2(self, op): self._un(op, np.exp2)
    def op_log2(self, op): self._un(op, np.log2)
    def op_sqrt(self, op): self._un(op, np.sqrt)
    def op_sin(self, op): self._un(op, np.sin)
    def op_cos(self, op): self._un(op, np.cos)

    def op_rsqrt(self, op):
        self._un(op, lambda a: 1.0 / np.sqrt(a.astype(np.float64)))

    def op_fma(self, op):
        a, b, c = (self.get(x).astype(np.float64) for x in op.args)
        with np.errstate(all="ignore"):
            self.put(op.result, (a * b + c).astype(op.result.dtype.np))

    _CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}

    def op_cmp(self, op):
        self._bin(op, self._CMP[op.attrs["pred"]])

    def op_select(self, op):
        c, a, b = (self.get(x) for x in op.args)
        self.put(op.result, np.where(c, a, b))

    def op_relu_bf16x2(self, op):
        a, b = (self.get(x).astype(np.float32) for x in op.args)
        lo, hi = (numerics.f32_to_bf16_bits(np.where(np.isnan(x), x, np.maximum(x, 0.0)))
                  .astype(np.uint32) for x in (a, b))
        self.put(op.result, lo | hi << 16)

    def op_cast(self, op):
        a = self.get(op.args[0])
        self.put(op.result, numerics.convert(a, op.args[0].dtype, op.result.dtype))

    def op_bitcast(self, op):
        a = np.ascontiguousarray(self.get(op.args[0]))
        rows = a.shape[0]
        self.put(op.result, a.view(np.uint8).reshape(rows, -1).view(op.result.dtype.np))

    def op_vec_pack(self, op):
        parts = [self.get(x) for x in op.args]
        rows = max(p.shape[0] for p in parts)
        self.put(op.result, np.concatenate([np.broadcast_to(p, (rows, 1)) for p in parts], axis=1))

    def op_extract(self, op):
        self.put(op.result, self.get(op.args[0])[:, op.attrs["index"]:op.attrs["index"] + 1])

    def op_insert(self, op):
        v, x = self.get(op.args[0]), self.get(op.args[1])
        rows = max(v.shape[0], x.shape[0])
        out = np.array(np.broadcast_to(v, (rows, v.shape[1])))
        out[:, op.attrs["index"]] = x[:, 0]
        self.put(op.result, out)

    def op_ptr_add(self, op):
        p = self.get(op.args[0])
        off = self.get(op.args[1]).astype(np.int64)
        self.put(op.result, (p.astype(np.int64) + off).astype(p.dtype))

    # memory ---------------------------------------------------------------------------
    def op_lds_base(self, op):
        alloc = next(a for a in self.run.kernel.lds if a.name == op.attrs["name"])
        self.put(op.result, np.uint32(alloc.offset))

    def _addresses(self, op, dt, n, at: int = 0):
        """Per-lane byte addresses of the (pointer, index) at op.args[at], op.args[at + 1],
        one row per lane if any operand (mask included) is per-lane."""
        p, idx = self.get(op.args[at]), self.get(op.args[at + 1])
        addr = p.astype(np.int64)[:, 0] + idx.astype(np.int64)[:, 0] * dt.bytes
        rows = max(self.get(x).shape[0] for x in op.args)
        return np.broadcast_to(addr, (rows,)), n * dt.bytes

    def _mask_of(self, op, rows, position):
        if not op.attrs.get("masked"):
            return None
        m = self.get(op.args[position])[:, 0]
        return np.broadcast_to(m, (rows,)) if m.shape[0] != rows else m

    def _lds_index(self, addr, nbytes, what):
        size = self.run.lds_size
        if addr.size and (addr.min() < 0 or addr.max() + nbytes > size):
            raise MemoryFault(f"CTA {self.cta} wave {self.wave}: {what} of LDS byte "
                              f"{int(addr.max())} (+{nbytes}) outside the {size}-byte allocation")
        if (addr % access_alignment(nbytes)).any():
            raise MemoryFault(f"{what}: misaligned {nbytes}-byte LDS access")
        return addr[:, None] + np.arange(nbytes)

    def _is_lds(self, op):
        return op.args[0].dtype.name == "ptr_lds"

    def _memory_point(self):
        self.run.accesses += 1
        if self.run.mode != "inorder":
            yield "mem"

    def op_load(self, op):
        return self._load(op)

    def _load(self, op):
        yield from self._memory_point()
        dt, n = op.attrs["dtype"], op.attrs["n"]
        addr, nb = self._addresses(op, dt, n)
        mask = self._mask_of(op, addr.shape[0], 2)
        sel = slice(None) if mask is None else mask
        out = np.zeros((addr.shape[0], nb), np.uint8)
        if mask is None or mask.any():
            a = addr[sel]
            if self._is_lds(op):
                idx = self._lds_index(a, nb, "load")
                self._check_bulk(idx, "read")
                out[sel] = self.run.lds[self.cta][idx]
            else:
                mem = self.run.mem
                b, idx = mem.locate(a, nb, f"CTA {self.cta} wave {self.wave} load")
                self._dep_check(b, "load", write=False)
                if op.attrs.get("order"):
                    out[sel] = mem.atomic_load(b, idx, self.cta)
                    if op.attrs["order"] in ("acquire", "seq_cst") and op.attrs["scope"] in ("device", "system"):
                        mem.acquire(self.cta)
                else:
                    out[sel] = mem.plain_load(self.cta, b, idx)
        self.put(op.result, out.view(dt.np).reshape(addr.shape[0], n))

    def op_store(self, op):
        return self._store(op)

    def _store(self, op):
        yield from self._memory_point()
        val = self.get(op.args[2])
        dt, n = op.args[2].dtype, op.args[2].n
        addr, nb = self._addresses(op, dt, n)
        rows = max(addr.shape[0], val.shape[0])
        addr = np.broadcast_to(addr, (rows,))
        data = np.ascontiguousarray(np.broadcast_to(val, (rows, n))).view(np.uint8).reshape(rows, nb)
        mask = self._mask_of(op, rows, 3)
        if mask is not None:
            addr, data = addr[mask], data[mask]
        if rows > 1 and len(addr) > 1:
            # lanes writing one address: the highest lane wins (as the hardware's order does
            # not promise, kernels must not rely on it; the interpreter reports it)
            if len(np.unique(addr)) != len(addr) and not (data == data[0]).all():
                raise InterpError(f"CTA {self.cta} wave {self.wave}: lanes store different "
                                  f"values to one address in {op!r}")
        if len(addr) == 0:
            return
        if self._is_lds(op):
            idx = self._lds_index(addr, nb, "store")
            self._check_bulk(idx, "overwritten")
            if self.run.bulk_marks is not None:
                self.run.bulk_marks[self.cta][idx] = 0
            self.run.lds[self.cta][idx] = data
            self._generic_lds_write(idx)
            return
        mem = self.run.mem
        b, idx = mem.locate(addr, nb, f"CTA {self.cta} wave {self.wave} store")
        self._dep_check(b, "store", write=True)
        order = op.attrs.get("order")
        if order:
            if order in ("release", "seq_cst") and op.attrs["scope"] in ("device", "system"):
                mem.release(self.cta)
            mem.atomic_store(self.cta, b, idx, data)
        else:
            mem.plain_store(self.cta, b, idx, data)

    def op_atomic(self, op):
        return self._atomic(op)

    def _atomic(self, op):
        yield from self._memory_point()
        kind, order, scope = op.attrs["op"], op.attrs["order"], op.attrs["scope"]
        val = self.get(op.args[2])
        dt = op.args[2].dtype
        addr, nb = self._addresses(op, dt, 1)
        rows = max(addr.shape[0], val.shape[0])
        addr = np.broadcast_to(addr, (rows,))
        val = np.broadcast_to(val, (rows, 1))
        cmpv = np.broadcast_to(self.get(op.args[3]), (rows, 1)) if kind == "cas" else None
        mask = self._mask_of(op, rows, 4 if kind == "cas" else 3)
        old = np.zeros((rows, 1), dt.np)
        lds = self._is_lds(op)
        mem = self.run.mem
        device = scope in ("device", "system") and not lds
        if device and order in ("release", "acq_rel", "seq_cst"):
            mem.release(self.cta)
        if lds:
            act = addr if mask is None else addr[mask]
            self._generic_lds_write(self._lds_index(act, nb, "atomic"))
        if lds and kind == "add" and not dt.is_float:
            self._lds_int_add(addr, nb, val, mask, old, dt)  # same result, vectorised
            self.put(op.result, old)
            return
        for lane in range(rows):  # lanes in order: a defined, deterministic serialisation
            if mask is not None and not mask[lane]:
                continue
            if lds:
                idx = self._lds_index(addr[lane:lane + 1], nb, "atomic")[0]
                store = self.run.lds[self.cta]
                cur = store[idx].view(dt.np)[0]
            else:
                b, idx = mem.locate(addr[lane:lane + 1], nb, f"CTA {self.cta} atomic")
                self._dep_check(b, "atomic", write=True)
                idx = idx[0]
                cur = mem.atomic_load(b, idx, self.cta).view(dt.np)[0]
            v = val[lane, 0]
            if kind == "add":
                new = (np.array(cur) + v).astype(dt.np)
            elif kind == "max":
                new = max(cur, v)
            elif kind == "min":
                new = min(cur, v)
            elif kind == "or":
                new = cur | v
            elif kind == "and":
                new = cur & v
            elif kind == "exch":
                new = v
            else:  # cas
                new = v if cur == cmpv[lane, 0] else cur
            old[lane, 0] = cur
            raw = np.array([new], dt.np).view(np.uint8)
            if lds:
                store[idx] = raw
            else:
                mem.atomic_store(self.cta, b, idx, raw, rmw=True)
        if device and order in ("acquire", "acq_rel", "seq_cst"):
            mem.acquire(self.cta)
        self.put(op.result, old)

    def _lds_int_add(self, addr, nb, val, mask, old, dt):
        """An integer atomic add on LDS as the lane-ordered loop defines it (each lane gets the
        word before its own add: the initial value plus the adds of the lanes below it on the
        same word), computed at once: integer adds wrap, so the order of the sum is exact."""
        act = np.arange(addr.shape[0]) if mask is None else np.flatnonzero(mask)
        if act.size == 0:
            return
        a = addr[act]
        idx = self._lds_index(a, nb, "atomic")
        store = self.run.lds[self.cta]
        cur = np.ascontiguousarray(store[idx]).view(dt.np)[:, 0]
        v = val[act, 0].astype(dt.np)
        order = np.argsort(a, kind="stable")  # by word, lanes in order within a word
        sa, sv = a[order], v[order]
        start = np.ones(sa.size, bool)
        start[1:] = sa[1:] != sa[:-1]
        first = np.flatnonzero(start)
        with np.errstate(over="ignore"):
            cs = np.cumsum(sv, dtype=dt.np)
            before = cs - sv  # adds of lower lanes, all words
            excl = before - before[first][np.cumsum(start) - 1]
            old[act[order], 0] = cur[order] + excl
            final = cur[order][first] + np.add.reduceat(sv, first, dtype=dt.np)
        store[idx[order][first]] = final.astype(dt.np).view(np.uint8).reshape(first.size, nb)

    def op_prefetch_l2(self, op):
        """No effect on memory or values (a hint); what it checks is what the hardware would
        fault on or silently waste: a range outside one buffer, or not 16-byte aligned."""
        nbytes = op.attrs["nbytes"]
        addr, _ = self._addresses(op, u8, 1)
        mask = self._mask_of(op, addr.shape[0], 2)
        addr = addr if mask is None else addr[mask]
        if len(addr):
            b, idx = self.run.mem.locate(np.unique(addr), nbytes, "prefetch_l2")
            if op.attrs.get("line"):
                first, end = idx[:, 0] // L2_LINE_BYTES, idx[:, -1] // L2_LINE_BYTES
                if (first != end).any():
                    bad = int(idx[first != end][0, 0])
                    raise MemoryFault(f"prefetch_l2 line: bytes {bad} .. +{nbytes} of "
                                      f"{self.run.mem.names[b]!r} cross an "
                                      f"{L2_LINE_BYTES}-byte L2 line")
            self._dep_check(b, "prefetch_l2", write=False)  # before a wait: constants only
            if self.run.prefetched is not None:
                counts = self.run.prefetched.setdefault(b, np.zeros(self.run.mem.buffers[b].size,
                                                                    np.int64))
                np.add.at(counts, idx.ravel(), 1)

    # bulk copies into LDS and mbarriers ----------------------------------------------------
    def _check_bulk(self, idx, how):
        """LDS bytes a bulk copy writes may be read (or overwritten) by a wave only after its
        mbar_wait saw the copy's phase complete: the hardware's copy lands at some time before
        that completion, so an earlier access reads stale bytes or races the copy."""
        marks = self.run.bulk_marks
        if marks is None:
            return
        m = marks[self.cta][idx]
        for j in np.unique(m[m != 0]):
            bar, gen, phase = self.run.bulk_table[int(j) - 1]
            if bar == ASYNC_COPY:  # (ASYNC_COPY, the issuing wave, its group)
                if self.run.async_retired.get((self.cta, gen), 0) <= phase:
                    raise InterpError(
                        f"LDS bytes an async_copy (wave {gen}, "
                        f"its group {phase}) writes {how} before that wave's async_wait "
                        "retired the group")
                continue
            seen_gen, seen = self.mbar_seen.get(bar, (None, 0))
            if seen_gen != gen or seen <= phase:
                raise InterpError(
                    f"LDS bytes a bulk copy writes {how} before this wave waited for the copy's "
                    f"mbarrier (LDS byte {bar}) to complete phase {phase}")

    def _mbar(self, op, what):
        bar = int(self.get(op.args[0])[0, 0])
        self._lds_index(np.array([bar]), MBARRIER_BYTES, what)  # in LDS, 8-byte aligned
        return bar

    def _mbar_state(self, bar, what):
        st = self.run.mbars.get((self.cta, bar))
        if st is None:
            raise InterpError(f"{what}: the mbarrier at LDS byte {bar} was never initialised "
                              "(mbar_init, then a barrier before other waves use it)")
        return st

    def _mbar_progress(self, st):
        if st["pending"] == 0 and st["tx"] == 0:
            st["phase"] += 1
            st["pending"] = st["count"]
        self.run.async_events += 1

    def op_mbar_init(self, op):
        bar = self._mbar(op, "mbar_init")
        if (self.cta, bar) in self.run.mbars:
            raise InterpError(f"mbar_init: the mbarrier at LDS byte {bar} is already set up "
                              "(mbar_inval it first: initialising a valid mbarrier is undefined)")
        gen = self.run.mbar_gens.get((self.cta, bar), 0) + 1
        self.run.mbar_gens[(self.cta, bar)] = gen
        self.run.mbars[(self.cta, bar)] = dict(count=op.attrs["count"], pending=op.attrs["count"],
                                               tx=0, phase=0, gen=gen)
        self.run.async_events += 1

    def op_mbar_inval(self, op):
        bar = self._mbar(op, "mbar_inval")
        st = self._mbar_state(bar, "mbar_inval")
        if st["tx"] or st["pending"] != st["count"]:
            raise InterpError(f"mbar_inval: the mbarrier at LDS byte {bar} has a phase in flight "
                              f"({st['count'] - st['pending']} of {st['count']} arrivals, "
                              f"{st['tx']} bytes outstanding)")
        del self.run.mbars[(self.cta, bar)]
        marks = self.run.bulk_marks[self.cta]  # its copies are complete: plain LDS bytes now
        for j, (b, gen, _) in enumerate(self.run.bulk_table):
            if b == bar and gen == st["gen"]:
                marks[marks == j + 1] = 0

    def op_mbar_arrive_tx(self, op):
        bar = self._mbar(op, "mbar_arrive_tx")
        st = self._mbar_state(bar, "mbar_arrive_tx")
        if st["pending"] == 0:
            raise InterpError(f"mbar_arrive_tx: more arrivals than the {st['count']} the "
                              f"mbarrier at LDS byte {bar} counts a phase")
        st["pending"] -= 1
        st["tx"] += op.attrs["nbytes"]
        self._mbar_progress(st)

    def op_bulk_load_lds(self, op):
        nbytes = op.attrs["nbytes"]
        bar = int(self.get(op.args[3])[0, 0])
        st = self._mbar_state(bar, "bulk_load_lds")
        dst = np.array([int(self.get(op.args[0])[0, 0])], np.int64)
        src = self.get(op.args[1]).astype(np.int64)[:1, 0] + self.get(op.args[2]).astype(np.int64)[:1, 0]
        mem = self.run.mem
        b, gidx = mem.locate(src, nbytes, "bulk_load_lds source")
        self._dep_check(b, "bulk_load_lds", write=False)
        lidx = self._lds_index(dst, nbytes, "bulk_load_lds destination")
        self._check_bulk(lidx, "overwritten")  # a copy into bytes another copy still writes
        self.run.lds[self.cta][lidx] = mem.plain_load(self.cta, b, gidx)
        self.run.bulk_table.append((bar, st["gen"], st["phase"]))
        self.run.bulk_marks[self.cta][lidx] = len(self.run.bulk_table)
        st["tx"] -= nbytes
        self._mbar_progress(st)

    def op_tma_load_rows(self, op):
        """The box lands now, placed (swizzled), marked as a bulk copy's bytes on its
        mbarrier phase: read as bulk_load_lds's. The rows are read from buffer `of` itself
        (the tensor map's bytes are the CUDA launcher's); a box past the buffer's end is an
        error (TMA would fill it with zeros: no kernel here means to read there)."""
        a = op.attrs
        rows, rb, nbytes, width = a["box_rows"], a["row_bytes"], a["nbytes"], a["box_width"]
        bar = int(self.get(op.args[4])[0, 0])
        st = self._mbar_state(bar, "tma_load_rows")
        dst = int(self.get(op.args[0])[0, 0])
        if a["swizzle"] and dst % SW128_ATOM_BYTES:
            raise InterpError(f"tma_load_rows: a 128B-swizzled box at LDS byte {dst}; it starts "
                              f"on a {SW128_ATOM_BYTES}-byte boundary")
        row = int(self.get(op.args[3]).astype(np.int64)[0, 0])
        col = int(self.get(op.args[5]).astype(np.int64)[0, 0])
        if row < 0:
            raise InterpError(f"tma_load_rows: row {row} of {a['tmap']}")
        if col < 0 or col % BULK_ALIGN or col + width > rb:
            raise InterpError(f"tma_load_rows: col {col} of {a['tmap']} ({width}-byte box rows "
                              f"of {rb}-byte rows, {BULK_ALIGN}-byte aligned)")
        src = self.get(op.args[2]).astype(np.int64)[0, 0] + (row + np.arange(rows)) * rb + col
        mem = self.run.mem
        b, gidx = mem.locate(src, width, f"tma_load_rows {a['tmap']} rows {row} .. "
                                         f"{row + rows - 1}, bytes {col} .. {col + width - 1}")
        gidx = gidx.reshape(1, nbytes)  # (the box's rows back to back, as it lands)
        self._dep_check(b, "tma_load_rows", write=False)
        lidx = self._lds_index(np.array([dst], np.int64), nbytes, "tma_load_rows destination")
        if a["swizzle"]:
            lidx = swizzled(lidx)
        self._check_bulk(lidx, "overwritten")
        self.run.lds[self.cta][lidx] = mem.plain_load(self.cta, b, gidx)
        self.run.bulk_table.append((bar, st["gen"], st["phase"]))
        self.run.bulk_marks[self.cta][lidx] = len(self.run.bulk_table)
        st["tx"] -= nbytes
        self._mbar_progress(st)

    def op_async_copy(self, op):
        return self._async_copy(op)

    def _async_copy(self, op):
        """The copy's bytes land now, marked: a read (or another copy over them) before this
        wave's async_wait retires the group is an error (_check_bulk), as the hardware's copy
        lands at some time before that wait."""
        yield from self._memory_point()
        dt, n = op.attrs["dtype"], op.attrs["n"]
        dst, nb = self._addresses(op, dt, n)
        src, _ = self._addresses(op, dt, n, at=2)
        rows = dst.shape[0]
        if rows > 1 and len(np.unique(dst)) != rows:
            raise InterpError(f"CTA {self.cta} wave {self.wave}: lanes async_copy into one LDS "
                              f"address in {op!r}")
        mem = self.run.mem
        b, gidx = mem.locate(src, nb, f"CTA {self.cta} wave {self.wave} async_copy source")
        self._dep_check(b, "async_copy", write=False)
        lidx = self._lds_index(dst, nb, "async_copy destination")
        self._check_bulk(lidx, "overwritten")
        self.run.lds[self.cta][lidx] = mem.plain_load(self.cta, b, gidx)
        self.run.bulk_table.append((ASYNC_COPY, self.wave, self.async_committed))
        self.run.bulk_marks[self.cta][lidx] = len(self.run.bulk_table)

    def op_async_commit(self, op):
        self.async_committed += 1

    def op_async_wait(self, op):
        self.async_retired = max(self.async_retired,
                                 self.async_committed - op.attrs["pending"])
        self.run.async_retired[(self.cta, self.wave)] = self.async_retired

    def op_mbar_wait(self, op):
        return self._mbar_wait(op)

    def _mbar_wait(self, op):
        bar = self._mbar(op, "mbar_wait")
        parity = int(self.get(op.args[1])[0, 0]) & 1
        while True:
            st = self._mbar_state(bar, "mbar_wait")
            if (st["phase"] & 1) != parity:  # the phase of that parity is the last completed
                self.mbar_seen[bar] = (st["gen"], st["phase"])
                self.wait_addr = None
                return
            self.wait_addr = f"mbarrier at LDS byte {bar} (phase {st['phase']})"
            yield "async"

    def _dep_check(self, b, what, *, write):
        """The contract of Ptr(constant=True) and grid_dep_wait: nothing writes a constant
        buffer, and a wave that has not passed its grid_dep_wait touches nothing else (under
        programmatic dependent launch the earlier launch may still be writing, or reading,
        every other buffer)."""
        name = self.run.mem.names[b]
        constant = name in self.run.constant_buffers
        if write and constant:
            raise InterpError(f"{what} to {name!r}, declared "
                              "Ptr(constant=True): no launch may write it")
        if not self.dep_waited and (write or not constant):
            raise InterpError(f"{what} of {name!r} before "
                              "grid_dep_wait: with pdl the earlier launch may still be running; "
                              "only Ptr(constant=True) buffers may be read before the wait")

    def op_poll_pause(self, op):
        """A DSL polling loop's round ends: other waves run, and this one counts as polling
        what it has seen (the scheduler's stall check); true once the run gives it up."""
        if not self.force_timeout:
            self.wait_addr = "a polling loop (poll_pause)"
            self.seen_writes = self.run.mem.writes
            yield "poll"
        self.wait_addr = None
        self.put(op.results[0], np.bool_(self.force_timeout))
        self.force_timeout = False

    def op_grid_dep_launch(self, op):
        """No effect here: the interpreter runs one launch at a time."""

    def op_grid_dep_wait(self, op):
        self.dep_waited = True

    def op_fence(self, op):
        if op.attrs["scope"] not in ("device", "system"):
            return None
        return self._fence(op)

    def _fence(self, op):
        yield from self._memory_point()
        order = op.attrs["order"]
        if order in ("release", "acq_rel", "seq_cst"):
            self.run.mem.release(self.cta)
        if order in ("acquire", "acq_rel", "seq_cst"):
            self.run.mem.acquire(self.cta)

    def _generic_lds_write(self, idx):
        if self.run.unfenced is not None:
            self.run.unfenced[self.cta][idx] = self.wave + 1

    def _proxy_fence(self):
        """fence.proxy.async by this wave: its ordinary LDS writes become visible to wgmma."""
        if self.run.unfenced is not None:
            mine = self.run.unfenced[self.cta]
            mine[mine == self.wave + 1] = 0

    def op_barrier(self, op):
        if op.attrs.get("async_proxy"):
            self._proxy_fence()
        return self._barrier()

    def _barrier(self):
        self.wait_addr = "barrier"
        yield "barrier"
        self.wait_addr = None

    def op_lds_poison(self, op):
        """A job's end (the linker's, between two CTA barriers): the bytes lose their values.
        A copy into them still unretired, or an mbarrier in them still initialised, would
        land in (or be found by) the CTA's next job: an error naming the byte."""
        lo, n = op.attrs["offset"], op.attrs["nbytes"]
        hi = min(lo + n, self.run.lds_size)
        for (cta, bar), _ in self.run.mbars.items():
            if cta == self.cta and lo <= bar < hi:
                raise InterpError(f"CTA {self.cta}: the mbarrier at LDS byte {bar} is still "
                                  "initialised at a job's end (mbar_inval it in the job)")
        if self.run.bulk_marks is not None:
            marks = self.run.bulk_marks[self.cta][lo:hi]
            for j in np.unique(marks[marks != 0]):
                bar, wave, group = self.run.bulk_table[int(j) - 1]
                if bar == ASYNC_COPY and self.run.async_retired.get((self.cta, wave), 0) <= group:
                    raise InterpError(f"CTA {self.cta}: an async_copy of wave {wave} (its group "
                                      f"{group}) into LDS is unretired at a job's end")
            marks[:] = 0
        self.run.lds[self.cta][lo:hi] = LDS_POISON
        if self.run.unfenced is not None:
            self.run.unfenced[self.cta][lo:hi] = 0

    def op_wave_sync(self, op):
        """No effect here: a wave's lanes run each op together (in lockstep, as on AMD)."""

    def op_named_barrier(self, op):
        bid = int(self.get(op.args[0])[0, 0])
        if not 0 < bid < NAMED_BARRIERS:
            raise InterpError(f"named barrier id {bid}: ids are 1 .. {NAMED_BARRIERS - 1}")
        need = op.attrs["waves"]
        state = self.run.named.setdefault((self.cta, bid), [0, []])
        state[0] += 1
        if state[0] == need:  # complete: every waiter goes on, the next completion opens
            for w in state[1]:
                self.run.named_waiting.discard(id(w))
            self.run.waits_changed += 1
            self.run.named[(self.cta, bid)] = [0, []]
            return None
        if op.attrs["arrive"]:
            return None
        state[1].append(self)
        self.run.named_waiting.add(id(self))
        self.run.waits_changed += 1
        return self._named_wait(bid)

    def _named_wait(self, bid):
        self.wait_addr = f"named barrier {bid}"
        yield "named"
        self.wait_addr = None

    def op_poll(self, op):
        return self._poll(op)

    def _poll(self, op):
        dt = op.attrs["dtype"]
        addr, nb = self._addresses(op, dt, 1)
        mask = self._mask_of(op, addr.shape[0], 3)
        expected = self.get(op.args[2]).astype(np.uint64)
        fieldmask = np.uint64((1 << op.attrs["bits"]) - 1)
        shift = np.uint64(op.attrs["shift"])
        pred = self._CMP[op.attrs["pred"]]
        mem = self.run.mem
        if mask is not None and not mask.any():  # no lane polls: nothing is read
            yield from self._memory_point()
            self.put(op.results[0], np.zeros((addr.shape[0], nb), np.uint8).view(dt.np))
            self.put(op.results[1], np.bool_(False))
            return
        b, idx = mem.locate(addr if mask is None else addr[mask], nb,
                            f"CTA {self.cta} wave {self.wave} poll")
        self._dep_check(b, "poll", write=False)
        polls = 0
        yield from self._memory_point()
        while True:
            got = mem.atomic_load(b, idx, self.cta)
            raw = np.zeros((addr.shape[0], nb), np.uint8)
            raw[slice(None) if mask is None else mask] = got
            x = raw.view(dt.np).astype(np.uint64)[:, 0]
            field = (x >> shift) & fieldmask
            exp = np.broadcast_to(expected[:, 0], field.shape)
            good = pred(field, exp)
            ok = bool(good.all() if mask is None else good[mask].all())
            polls += 1
            timed_out = not ok and (polls >= op.attrs["bound"] or self.force_timeout)
            if ok or timed_out:
                self.force_timeout = False
                self.wait_addr = None
                self.put(op.results[0], raw.view(dt.np))
                self.put(op.results[1], np.bool_(timed_out))
                return
            self.wait_addr = f"{mem.names[b]}+{int(idx[0, 0])}"
            self.seen_writes = mem.writes
            yield "poll"

    # cross-lane ---------------------------------------------------------------------------
    def op_lane_swap(self, op):
        a = self.get(op.args[0])
        if a.shape[0] == 1:
            return self.put(op.result, a)
        self.put(op.result, a[self.lane[:, 0] ^ op.attrs["mask"]])

    def op_shuffle(self, op):
        a, src = self.get(op.args[0]), self.get(op.args[1])[:, 0]
        if (src < 0).any() or (src >= self.L).any():
            raise InterpError(f"shuffle from lane {int(src.max())} outside 0..{self.L - 1}")
        if a.shape[0] == 1:
            return self.put(op.result, a)
        self.put(op.result, a[src])

    _REDUCE = {"add": np.add, "max": np.fmax, "min": np.fmin, "or": np.bitwise_or,
               "and": np.bitwise_and}

    def op_wave_reduce(self, op):
        a = self.get(op.args[0])
        f = self._REDUCE[op.attrs["op"]]
        if not op.args[0].dtype.is_float and op.attrs["op"] in ("max", "min"):
            f = np.maximum if op.attrs["op"] == "max" else np.minimum
        v = np.broadcast_to(a, (self.L, 1)).copy()
        s = self.L // 2
        with np.errstate(all="ignore"):
            while s >= 1:  # the butterfly every backend uses: same order, same bits
                v = f(v, v[self.lane[:, 0] ^ s]).astype(a.dtype)
                s //= 2
        self.put(op.result, v[:1])

    def op_ballot(self, op):
        p = np.broadcast_to(self.get(op.args[0])[:, 0], (self.L,))
        bits = sum(1 << i for i in range(self.L) if p[i])
        self.put(op.result, np.array([[bits]], op.result.dtype.np))

    def op_prefix_count(self, op):
        p = np.broadcast_to(self.get(op.args[0])[:, 0], (self.L,)).astype(np.int32)
        self.put(op.result, (np.cumsum(p) - p).astype(np.int32))

    def op_match_any(self, op):
        v = np.broadcast_to(self.get(op.args[0])[:, 0], (self.L,))
        same = v[:, None] == v[None, :]  # [lane, other lane]
        self.put(op.results[0], same.sum(1).astype(np.int32))
        below = np.tril(same, -1)  # an equal lane below this one
        self.put(op.results[1], ~below.any(1))

    def op_readfirstlane(self, op):
        self.put(op.result, self.get(op.args[0])[:1])

    # matrix -------------------------------------------------------------------------------
    def op_mma(self, op):
        atom = op.attrs["atom"]
        a, b, c = (self.get(x) for x in op.args)
        self.put(op.result, mma_reference(atom, a, b, c))

    def op_wgmma_fence(self, op):
        if op.attrs.get("async_proxy"):
            self._proxy_fence()

    def op_wgmma(self, op):
        group = self.run.warpgroup(self.cta, self.wave // 4)
        seq = self.wg_seq
        self.wg_seq += 1
        self.run.wg_issued += 1
        # C may be the pending result of an earlier wgmma of this warp: the hardware chains
        # accumulations in flight; only reading the registers before the wait is undefined
        c = self.env[op.args[2].id]
        group.issued.setdefault(seq, []).append(
            (self.wave % 4, self.get(op.args[0]), self.get(op.args[1]), c, op.result,
             op.attrs["atom"]))
        self.wg_groups[-1].append(seq)
        self.env[op.result.id] = Pending(self.wave // 4, seq)

    def op_wgmma_commit(self, op):
        self.wg_groups.append([])

    def op_wgmma_wait(self, op):
        return self._wgmma_wait(op)

    def _wgmma_wait(self, op):
        committed = self.wg_groups[:-1]
        keep = op.attrs["pending"]
        finish = committed[:max(0, len(committed) - keep)]
        group = self.run.warpgroup(self.cta, self.wave // 4)
        for grp in finish:
            for seq in grp:
                while len(group.issued.get(seq, ())) < 4:
                    self.wait_addr = f"wgmma #{seq} of warpgroup {self.wave // 4}"
                    yield "wgmma"
                self.wait_addr = None
                if seq not in group.done:
                    group.done[seq] = self.run.complete_wgmma(self.cta, group.issued[seq])
                for (w, _, _, _, dest, _) in group.issued[seq]:
                    if w == self.wave % 4:
                        self.put(dest, group.done[seq][w])
                self.wg_retired.add(seq)
        self.wg_groups = committed[len(finish):] + [self.wg_groups[-1]]


def _bit_count(a: np.ndarray) -> np.ndarray:
    """Set bits of each integer (as its unsigned bit pattern)."""
    u = np.asarray(a).astype(np.uint64) & np.uint64((1 << (8 * np.asarray(a).dtype.itemsize)) - 1)
    n = np.zeros(u.shape, np.uint64)
    while np.any(u):
        n += u & np.uint64(1)
        u >>= np.uint64(1)
    return n


def _trailing_zeros(a: np.ndarray) -> np.ndarray:
    """Trailing zero bits of each integer (its width for 0; op ctz refuses 0)."""
    bits = 8 * np.asarray(a).dtype.itemsize
    u = np.asarray(a).astype(np.uint64) & np.uint64((1 << bits) - 1)
    low = u & (~u + np.uint64(1))  # the lowest set bit
    out = np.full(u.shape, bits, np.uint64)
    nz = low != 0
    out[nz] = np.log2(low[nz].astype(np.float64)).astype(np.uint64)
    return out


def _decode(x: np.ndarray, dt: DType) -> np.ndarray:
    return numerics.to_f64(x, dt)


def mma_reference(atom, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """D = A @ B + C through the atom's (lane, slot) -> (row, col) maps, in float64, rounded
    once to the accumulator type."""
    A = np.zeros((atom.M, atom.K))
    B = np.zeros((atom.K, atom.N))
    C = np.zeros((atom.M, atom.N))
    ar, ac = atom.a_rows(), atom.a_cols()
    br, bc = atom.b_rows(), atom.b_cols()
    cr, cc = atom.c_rows(), atom.c_cols()
    A[ar, ac] = _decode(np.broadcast_to(a, ar.shape), atom.a_dtype)
    B[br, bc] = _decode(np.broadcast_to(b, br.shape), atom.b_dtype)
    C[cr, cc] = _decode(np.broadcast_to(c, cr.shape), atom.acc_dtype)
    D = A @ B + C
    return numerics.convert(D[cr, cc], f64, atom.acc_dtype)


LDS_POISON = 0xA5  # every LDS byte of every CTA when a run starts (a NaN-free, non-zero
# pattern: 0xA5A5A5A5 as u32 is 2.8e9, as f32 -2.9e-16)


class Run:
    # tests: rebuild the runnable waves every step and fail where the kept list differs (a
    # missed waits_changed bump); off, the list is rebuilt only on a bump
    check_runnable = False

    def __init__(self, kernel: Kernel, args: dict, grid: int, mode: str, seed: int,
                 on_stall: str, max_steps: int):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {MODES}")
        if on_stall not in ("raise", "timeout"):
            raise ValueError(f"on_stall must be 'raise' or 'timeout', got {on_stall!r}")
        if grid < 1:
            raise ValueError(f"grid {grid} must be at least 1")
        self.kernel, self.grid, self.mode, self.on_stall = kernel, grid, mode, on_stall
        self.max_steps = max_steps
        self.rng = np.random.default_rng(seed)
        self.mem = RELAXED_MODES[mode](grid) if mode in RELAXED_MODES else Memory()
        self.ticks = 0
        # wgmma issues so far (any wave): progress for a wave waiting on a warpgroup's
        # wgmma, as memory writes are for a poller
        self.wg_issued = 0
        self.accesses = 0  # memory accesses so far (any wave): the clock's time base
        self.lds_size = kernel.lds_bytes  # computed once: _lds_index asks on every access
        # LDS holds garbage when a kernel starts on hardware: a byte read before the kernel
        # wrote it shows as LDS_POISON (never a convenient zero)
        self.lds = [np.full(self.lds_size, LDS_POISON, np.uint8) for _ in range(grid)]
        # wgmma reads B from LDS through the async proxy: bytes written by ordinary stores
        # (generic proxy) must be proxy-fenced by their writer first (fence.proxy.async: an
        # async_proxy barrier or wgmma fence). Per CTA byte: writer wave + 1 while unfenced.
        self.unfenced = ([np.zeros(self.lds_size, np.uint8) for _ in range(grid)]
                         if "wgmma" in kernel.uses else None)
        self.arg_values = {}
        self.buffers = {}
        self.constant_buffers = {s.name for s in kernel.abi.slots
                                 if isinstance(s.kind, Ptr) and s.kind.constant}
        self._wg = {}
        # named barriers: (cta, id) -> [waves counted toward the open completion, the waves
        # waiting for it]; a waiting wave is not runnable until the completion
        self.named: dict[tuple, list] = {}
        self.named_waiting: set[int] = set()
        # bumped where a wave's runnability changes (a barrier's arrival or release, a named
        # barrier's, a wave's exit): the scheduler's runnable list is rebuilt only then
        self.waits_changed = 0
        self.prefetched: dict | None = None  # buffer index -> bytes' prefetch counts (run())
        # bulk copies into LDS (bulk_load_lds) and their mbarriers: per (CTA, LDS byte) the
        # barrier state {count, pending, tx, phase}; per CTA LDS byte, 0 or 1 + the index in
        # bulk_table of the (barrier, phase) whose completion makes the copied byte readable
        self.mbars: dict[tuple, dict] = {}
        self.mbar_gens: dict[tuple, int] = {}  # (CTA, LDS byte) -> set-ups so far
        self.bulk_table: list[tuple] = []
        self.async_retired: dict[tuple, int] = {}  # (CTA, wave) -> its async groups retired
        self.bulk_marks = ([np.zeros(self.lds_size, np.int32) for _ in range(grid)]
                           if "bulk" in kernel.uses else None)
        self.async_events = 0  # mbarrier arrivals / completions so far: progress for waiters
        self._bind(args)

    def _bind(self, args):
        names = set(self.kernel.abi.names())
        extra = set(args) - names
        if extra:
            raise ValueError(f"arguments {sorted(extra)} are not in the kernel's ABI {sorted(names)}")
        args = dict(args)
        for slot in derived_args(self.kernel.abi):  # the tensor copies read `of` itself
            if slot.name in args:
                raise ValueError(f"argument {slot.name!r} is the tensor map of {slot.kind.of!r}, "
                                 "derived by the launcher; do not pass it")
            args[slot.name] = np.zeros(TENSOR_MAP_BYTES, np.uint8)
        for slot in self.kernel.abi.slots:
            if slot.name not in args:
                raise ValueError(f"missing kernel argument {slot.name!r}")
            v = args[slot.name]
            if isinstance(slot.kind, Ptr):
                if not isinstance(v, np.ndarray):
                    raise TypeError(f"argument {slot.name!r} must be a numpy array, got {type(v)}")
                self.arg_values[slot.name] = np.uint64(self.mem.add(slot.name, v))
                self.buffers[slot.name] = v
            else:
                dt = slot.kind.dtype
                if dt.is_float:
                    self.arg_values[slot.name] = numerics.convert(np.array([float(v)]), f64, dt)[0]
                else:
                    info = np.iinfo(dt.np)
                    if not info.min <= int(v) <= info.max:
                        raise ValueError(f"argument {slot.name!r} = {v} does not fit {dt}")
                    self.arg_values[slot.name] = dt.np.type(int(v))

    def warpgroup(self, cta, g):
        return self._wg.setdefault((cta, g), _WarpGroup())

    def complete_wgmma(self, cta, issued):
        """Gather the 4 warps' fragments into the warpgroup's 128-lane operands, read B from
        the CTA's shared memory through the descriptor, and split D back per warp."""
        issued = sorted(issued, key=lambda t: t[0])
        atom = issued[0][5]

        def acc(t):
            c = t[3]
            if isinstance(c, Pending):  # chained on an earlier wgmma, completed before this one
                c = self._wg[(cta, c.group)].done[c.seq][t[0]]
            return np.broadcast_to(c, (32, c.shape[1]))
        c = np.concatenate([acc(t) for t in issued])
        desc = int(issued[0][2][0, 0])
        a_desc = int(issued[0][1][0, 0]) if atom.a_smem is not None else None  # SS: A's
        reads = [("B", atom.read_b_smem, desc)] + ([("A", atom.read_a_smem, a_desc)]
                                                    if a_desc is not None else [])
        if self.unfenced is not None:
            for what, read, d in reads:
                dirty = np.ascontiguousarray(read(self.unfenced[cta], d)).view(np.uint8)
                if dirty.any():
                    waves = sorted({int(x) - 1 for x in dirty.ravel() if x})
                    raise InterpError(
                        f"CTA {cta}: a wgmma ({atom.name}) reads {what} from LDS that wave(s) "
                        f"{waves} wrote with ordinary stores and did not proxy-fence (the async "
                        f"proxy may read stale bytes): stage {what} before a barrier inside "
                        f"KernelBuilder.async_proxy_lds()")
        b = atom.read_b_smem(self.lds[cta], desc)  # (K, N) raw storage values
        B = numerics.to_f64(b, atom.b_dtype)
        C = np.zeros((atom.M, atom.N))
        if a_desc is not None:
            A = numerics.to_f64(atom.read_a_smem(self.lds[cta], a_desc), atom.a_dtype)
        else:
            a = np.concatenate([np.broadcast_to(t[1], (32, t[1].shape[1])) for t in issued])
            A = np.zeros((atom.M, atom.K))
            A[atom.a_rows(), atom.a_cols()] = numerics.to_f64(a, atom.a_dtype)
        cr, cc = atom.c_rows(), atom.c_cols()
        C[cr, cc] = numerics.to_f64(c, atom.acc_dtype)
        D = numerics.convert((A @ B + C)[cr, cc], f64, atom.acc_dtype)
        return {w: D[32 * w:32 * (w + 1)] for w in range(4)}

    def execute(self):
        k = self.kernel
        waves = [Wave(self, c, w) for c in range(self.grid) for w in range(k.waves)]
        gens = {id(w): w.execute() for w in waves}
        live = list(waves)
        at_barrier = {c: set() for c in range(self.grid)}
        alive_in_cta = {c: k.waves for c in range(self.grid)}
        polling: set[int] = set()
        steps = 0
        cursor = 0
        randomised = self.mode != "inorder"
        seen_changes = None
        while live:
            if seen_changes != self.waits_changed or self.check_runnable:
                fresh = [w for w in live if id(w) not in at_barrier[w.cta]
                         and id(w) not in self.named_waiting]
                if seen_changes == self.waits_changed and fresh != runnable:
                    raise InterpError("the runnable waves changed with no waits_changed bump: "
                                      "a path that blocks or frees a wave must bump it")
                seen_changes, runnable = self.waits_changed, fresh
            if not runnable:
                self._stall(live, "every live wave waits at a barrier")
            if polling and len(polling) == len(runnable) and \
                    all(w.seen_writes == self.mem.writes and w.seen_wg == self.wg_issued
                        and w.seen_async == self.async_events for w in runnable):
                # nothing can change what the pollers see, unless a relaxed store is pending
                if not self.mem.settle():
                    if self.on_stall == "timeout":
                        for w in runnable:
                            w.force_timeout = True
                    else:
                        self._stall(live, "every live wave polls memory that nothing will change")
                for w in runnable:
                    w.seen_writes = -1
            if randomised:
                w = runnable[int(self.rng.integers(len(runnable)))]
                self.mem.random_step(self.rng)
            else:
                w = runnable[cursor % len(runnable)]
            steps += 1
            if steps > self.max_steps:
                raise InterpError(f"more than {self.max_steps} scheduling steps: raise max_steps "
                                  "or look for a livelock")
            try:
                ev = next(gens[id(w)])
            except StopIteration:
                live.remove(w)
                self.waits_changed += 1
                polling.discard(id(w))
                alive_in_cta[w.cta] -= 1
                self._release_barrier(at_barrier, alive_in_cta, w.cta, live)
                continue
            except (InterpError, MemoryFault) as e:
                raise type(e)(f"CTA {w.cta} wave {w.wave}: {e}") from None
            if ev == "barrier":
                at_barrier[w.cta].add(id(w))
                self.waits_changed += 1
                polling.discard(id(w))
                self._release_barrier(at_barrier, alive_in_cta, w.cta, live)
                if not randomised:
                    cursor += 1
            elif ev in ("poll", "wgmma", "async"):
                polling.add(id(w))
                # what the waiter saw: a wgmma issue by another warp of its group may
                # complete the group it waits on (a stall only if neither changes)
                w.seen_wg = self.wg_issued
                w.seen_async = self.async_events
                if ev != "poll":
                    w.seen_writes = self.mem.writes
                if not randomised:
                    cursor += 1
            else:
                polling.discard(id(w))
        left = {key: st[0] for key, st in self.named.items() if st[0]}
        if left:
            raise Stall("named barriers left with arrivals no completion used (an unbalanced "
                        "turn protocol: the next use of the id would complete early): "
                        + ", ".join(f"CTA {c} id {b}: {n}" for (c, b), n in sorted(left.items())))

    def _release_barrier(self, at_barrier, alive_in_cta, cta, live):
        if at_barrier[cta] and len(at_barrier[cta]) == alive_in_cta[cta]:
            if alive_in_cta[cta] != self.kernel.waves:
                exited = self.kernel.waves - alive_in_cta[cta]
                raise Stall(f"CTA {cta}: {exited} wave(s) exited while others wait at a barrier "
                            "(barriers must sit in CTA-uniform control flow)")
            at_barrier[cta].clear()
            self.waits_changed += 1

    def _stall(self, live, why):
        waits = "; ".join(f"CTA {w.cta} wave {w.wave} waits on {w.wait_addr}" for w in live[:16])
        more = f" (+{len(live) - 16} more)" if len(live) > 16 else ""
        raise Stall(f"stall: {why}: {waits}{more}")

    def collect(self):
        for slot in self.kernel.abi.slots:
            if isinstance(slot.kind, Ptr):
                arr = self.buffers[slot.name]
                b = (int(self.arg_values[slot.name]) >> 40) - 1
                if isinstance(self.mem, RelaxedMemory):
                    self.mem.settle()
                arr.reshape(-1).view(np.uint8)[:] = self.mem.buffers[b]


def run(kernel: Kernel, args: dict, *, grid: int = 1, mode: str = "inorder", seed: int = 0,
        on_stall: str = "raise", max_steps: int = 50_000_000,
        prefetched: dict | None = None) -> dict:
    """Run `kernel` on a grid of `grid` CTAs. Array arguments are updated in place with what the
    kernel wrote (after a relaxed run, with every store made visible). `prefetched`, a dict:
    filled with {argument name: how many times each of its bytes was asked of the L2 by
    prefetch_l2} (what a test checks a prefetch scheme covers)."""
    r = Run(kernel, args, grid, mode, seed, on_stall, max_steps)
    if prefetched is not None:
        r.prefetched = {}
    with np.errstate(all="ignore"):  # the kernel's float ops are IEEE: inf / NaN, no warning
        r.execute()
    if prefetched is not None:
        by_index = {(int(r.arg_values[s.name]) >> 40) - 1: s.name
                    for s in kernel.abi.slots if isinstance(s.kind, Ptr)}
        prefetched.update({by_index[b]: c for b, c in r.prefetched.items()})
    r.collect()
    derived = {s.name for s in derived_args(kernel.abi)}
    return {n: v for n, v in r.buffers.items() if n not in derived}
