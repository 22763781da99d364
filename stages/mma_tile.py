"""A tensor-core projection tile: partial sums of Y = Wdq A^T for up to 8 activation rows.

    W    fp8 [n_out, K] (the chip's e4m3 format), fp32 block scales [ceil(n_out/128), K/128]:
         Wdq[n, k] = W[n, k] * scale[n // 128, k // 128]; or bf16 [n_out, K] unscaled (the
         loaded words are the MMA's A registers as they are: 4 loads a row a block)
    A    R <= 8 rows of K activations, f32 values handed to `stage` by the caller
    out  for a tile of `tile_m` outputs x `blocks` 128-wide K blocks, each
         sum_{k in the blocks} Wdq[n, k] * A[r, k]  through a callback (`emit`)

One stage body for wave64 and warp32: the MMA atom is the chip's bf16 instruction
(`PROJ_ATOMS`: gfx950 v_mfma_f32_16x16x32_bf16, gfx942 v_mfma_f32_16x16x16_bf16, sm_90a
mma.sync m16n8k16 bf16) and every lane number below is DERIVED from the atom's own operand
maps (`ProjTiling.of`), then checked: 16 weight rows are the atom's A (M = 16; e4m3 -> bf16 is
exact), the activations are B (columns), f32 accumulation.

Permuted K. An MMA sums over k in any order, so the 128 k of a scale block are permuted onto
the atom's K indices (the same permutation for A and B) such that every lane holds 32
CONTIGUOUS k of each weight row it holds: two 16-byte nontemporal loads a row a block
(`perm[c * K_atom + kk]` = the block's k for MMA c of the block, atom index kk). Every A and
B register (2 bf16) is one aligned word of the lane's 32 values (`a_words`, `b_words`).

Activations exactly (the brief's choice): a bf16 MMA reads bf16, but the front's activations
a = x * g are products of two bf16 (16 significant bits, exact in f32, not in bf16). `stage`
splits each value a into hi = a with its low 16 bits cleared (a bf16) and lo = a - hi (exact
in f32, and at most 8 significant bits: a bf16 too), so W (hi + lo) = W a with every product
exact (4 x 8 significant bits) and only the MMA's f32 accumulation rounding. Both halves are
B columns: column f of the staged activations is (part f // R, row f % R); with 2R <= N (AMD's
N = 16; Hopper's N = 8 at R <= 4) one MMA covers both and the hi and lo columns of a row are
summed by one lane swap (`join`, derived from the C map); at R = N = 8 the lo columns are
a second MMA into the same accumulator (`passes` = 2). (Exactness needs products that neither
overflow nor underflow f32 and a lo that is not subnormal: |a| >= 2^-110. `parts=1` feeds
bf16-exact activations unsplit.)

Work split (static per kernel): a tile is tile_m / 16 m-tiles; with W >= m-tiles every wave
owns one m-tile and one of W / m-tiles K-parts (blocks kp, kp + KP, ...), the K-parts summed
through LDS in part order after a CTA barrier; with fewer waves a wave runs several m-tiles
one after the other. A wave keeps `depth` blocks of weight loads in flight through a ring of
variables in a runtime loop (unrolled, LLVM would hoist every block's loads and LDS reads and
spill). Per block the MMAs' sum is scaled once: total = fma(sum, scale, total). The same bits
on every run: the MMA order, the block order and the K-part order are fixed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monokernel.atoms import atom as get_atom
from monokernel.types import bf16, f16, f32, i32, u8, u32
from spec.config import FP8_SCALE_BLOCK

BLOCK = FP8_SCALE_BLOCK  # K per weight scale block (and rows per scale block)
LOAD_BYTES = 16  # one weight load per lane: 16 fp8
LOADS_IN_FLIGHT = 16  # 16-byte weight loads a lane keeps in flight (the ring's depth)
MAX_ASYNC_BLOCKS = 8  # blocks a wave may have in async copy groups (async_wait counts 0..7)
PIECE_K = 8  # activations a staging thread loads and converts at once (a row's 8 k)
ACT_PAD_WORDS = 4  # LDS row padding of the staged activations (spreads rows over banks)
HI_MASK = 0xFFFF0000  # the bf16 part of an f32's bits

# the bf16 MMA of each chip; the interpreter runs any of them (by wave size, or `chip`)
PROJ_ATOMS = {"gfx950": "gfx950_mfma_f32_16x16x32_bf16",
              "gfx942": "gfx942_mfma_f32_16x16x16_bf16",
              "sm_90a": "sm90_mma_m16n8k16_bf16"}
# the f16 form where a chip has it (FrontProj.half = "f16": weights decoded in one unpack a
# pair; activations under a range scale, module doc)
PROJ_ATOMS_F16 = {"sm_90a": "sm90_mma_m16n8k16_f16"}
F32_MANTISSA_BITS, F32_EXP_MASK, F32_EXP_BIAS = 23, 0xFF, 127
# the f16 path's range scale puts a row's largest |a| in [2^RANGE_TOP, 2^(RANGE_TOP + 1)):
# below f16's 65504 with one binade to spare, so hi never overflows
RANGE_TOP = 14
RANGE_EXP_MIN, RANGE_EXP_MAX = 1, 2 * F32_EXP_BIAS - 1  # scale and inverse: normal f32
INTERP_CHIP = {64: "gfx950", 32: "sm_90a"}


def proj_atom_name(target: str, lanes: int, chip: str | None = None, half: str = "bf16") -> str:
    """The `half` ("bf16" or "f16") atom a projection uses on `target` (interp: `chip`'s,
    else by wave size)."""
    if target == "interp":
        chip = chip or INTERP_CHIP[lanes]
    else:
        chip = target
    table = {"bf16": PROJ_ATOMS, "f16": PROJ_ATOMS_F16}.get(half)
    if table is None or chip not in table:
        raise ValueError(f"no {half} projection atom for {chip!r}; known: "
                         f"{sorted(table) if table else 'halves bf16, f16'}")
    name = table[chip]
    if get_atom(name).group != lanes:
        raise ValueError(f"{name} runs on {get_atom(name).group} lanes, the kernel's waves "
                         f"have {lanes}")
    return name


# ------------------------------------------------------------------------- lane functions

@dataclass(frozen=True)
class LaneFn:
    """A per-lane integer table written as const + sum of ((lane >> shift) & mask) * coef:
    the vendors' maps are affine in the bits of the lane number, so every lane fact the
    tile needs is a few shifts and masks, derived here instead of written per vendor."""
    const: int
    terms: tuple  # ((shift, mask, coef), ...)
    lanes: int

    @staticmethod
    def of(table) -> "LaneFn":
        t = [int(x) for x in np.asarray(table).ravel()]
        n = len(t)
        bits = n.bit_length() - 1
        if n != 1 << bits:
            raise ValueError(f"a lane table of {n} entries is not a power of two")
        coef = [t[1 << b] - t[0] for b in range(bits)]
        for ln in range(n):
            if t[ln] != t[0] + sum(coef[b] for b in range(bits) if ln >> b & 1):
                raise ValueError(f"lane table {t} is not affine in the lane's bits (lane {ln})")
        terms, b = [], 0
        while b < bits:
            if coef[b] == 0:
                b += 1
                continue
            w = 1
            while b + w < bits and coef[b + w] == coef[b] << w:
                w += 1
            terms.append((b, (1 << w) - 1, coef[b]))
            b += w
        return LaneFn(t[0], tuple(terms), n)

    def table(self) -> np.ndarray:
        ln = np.arange(self.lanes)
        out = np.full(self.lanes, self.const, np.int64)
        for sh, m, c in self.terms:
            out += ((ln >> sh) & m) * c
        return out

    def emit(self, k, lane):
        """The value for `lane` (a per-lane i32)."""
        v = None
        for sh, m, c in self.terms:
            x = lane >> sh if sh else lane
            if (m + 1) << sh != self.lanes:  # the top bits need no mask (lane < lanes)
                x = x & m
            if c != 1:
                x = x * c
            v = x if v is None else v + x
        if v is None:
            return k.const(self.const, i32)
        return v + self.const if self.const else v


# ------------------------------------------------------------------------- the tiling

def _words(elems, what):
    """Element indices of consecutive slot pairs -> word indices (each pair one aligned word)."""
    if len(elems) % 2:
        raise ValueError(f"{what}: an odd number of bf16 slots")
    out = []
    for i in range(0, len(elems), 2):
        e0, e1 = elems[i], elems[i + 1]
        if e0 % 2 or e1 != e0 + 1:
            raise ValueError(f"{what}: slots {i}, {i + 1} hold elements {e0}, {e1}, not one aligned word")
        out.append(e0 // 2)
    return tuple(out)


def a_permutation(at, L: int):
    """The K permutation inside a BLOCK-wide block that gives every lane CONTIGUOUS k of each
    weight row it holds in A (module doc), derived from the atom's A map over its first `L`
    lanes: (perm [c * K + kk] -> block k, held rows [lane] -> sorted rows, window [lane], k a
    lane holds of a row a block, a_words [c][reg] -> (h, word of the lane's words of row h)).
    Shared by this tile and stages/wgmma_proj.py (a warpgroup's first warp: the other warps
    repeat it 16 rows on)."""
    K, nc = at.k, BLOCK // at.k
    ar, ac = at.a_rows()[:L], at.a_cols()[:L]  # [lane, slot]
    slots = ar.shape[1]
    perm = np.full(BLOCK, -1, np.int64)
    held = [sorted(set(int(x) for x in ar[ln])) for ln in range(L)]
    if len({len(h) for h in held}) != 1:
        raise ValueError(f"{at.name}: lanes hold different numbers of A rows")
    amap = [[None] * slots for _ in range(nc)]
    window = np.full(L, -1, np.int64)
    lane_k = None
    for ln in range(L):
        for h, row in enumerate(held[ln]):
            holders = [x for x in range(L) if row in held[x]]
            q = holders.index(ln)
            mine = [s for s in range(slots) if ar[ln, s] == row]
            per = len(mine)
            lk = per * nc
            if lk * len(holders) != BLOCK or lk % LOAD_BYTES:
                raise ValueError(f"{at.name}: lane {ln} holds {lk} k of row {row} a block "
                                 f"({len(holders)} holders); 16-byte loads need a multiple of 16")
            if lane_k not in (None, lk) or window[ln] not in (-1, q):
                raise ValueError(f"{at.name}: lane {ln}'s rows differ in k count or window")
            lane_k, window[ln] = lk, q
            for c in range(nc):
                for j, s in enumerate(mine):
                    kappa = c * K + int(ac[ln, s])
                    phys = lk * q + c * per + j
                    if perm[kappa] not in (-1, phys):
                        raise ValueError(f"{at.name}: atom k {kappa} lands on block k "
                                         f"{perm[kappa]} and {phys}: no lane-independent permutation")
                    perm[kappa] = phys
                    e = (h, c * per + j)
                    if amap[c][s] not in (None, e):
                        raise ValueError(f"{at.name}: A slot {s} differs across lanes")
                    amap[c][s] = e
    if sorted(perm.tolist()) != list(range(BLOCK)):
        raise ValueError(f"{at.name}: the K permutation is not a bijection")
    per_word = u32.bytes // at.a_dtype.bytes  # A values a 32-bit register
    a_words = []
    for c in range(nc):
        regs = []
        for s in range(0, slots, per_word):
            es = [amap[c][s + i] for i in range(per_word)]
            if len({h for h, _ in es}) != 1:
                raise ValueError(f"{at.name}: A register {s // per_word} mixes two rows")
            e = [x for _, x in es]
            if e[0] % per_word or e != list(range(e[0], e[0] + per_word)):
                raise ValueError(f"{at.name}: A slots {s}.. hold elements {e}, not one aligned word")
            regs.append((es[0][0], e[0] // per_word))
        a_words.append(tuple(regs))
    return tuple(int(x) for x in perm), held, window, lane_k, tuple(a_words)


@dataclass(frozen=True)
class ProjTiling:
    """What the atom's maps say about feeding it 16 weight rows x permuted-K blocks (module
    doc). Lane facts are LaneFns; per-slot facts are tuples."""
    atom_name: str
    rows: int  # activation rows R
    parts: int  # 2: hi and lo halves of each activation (exact); 1: bf16 activations
    lane_k: int  # k of a row a lane holds per block (32)
    chunks: int  # MMAs per block (BLOCK / atom K)
    perm: tuple  # [c * K + kk] -> k inside the block
    a_rows: tuple  # [h] LaneFn: the lane's h-th weight row (0..15)
    a_window: LaneFn  # the lane's 32-k window of its weight rows (k = 32 * window + e)
    a_words: tuple  # [c][reg] -> (h, word of the lane's 16 words of row h)
    b_col: LaneFn  # the lane's B column (0..N-1)
    b_window: LaneFn
    b_words: tuple  # [c][reg] -> word of the lane's 16 words of its column
    passes: int  # MMAs per chunk (B column groups)
    c_row: LaneFn  # C row of slot 0; slot s adds c_row_off[s]
    c_row_off: tuple
    c_col: LaneFn
    c_col_off: tuple
    join: tuple | None  # (lane xor d, slot map): where a hi column's lo column sits (None:
    # one column per row)
    runs: tuple  # ((first slot, count), ...): slots of one column at consecutive C rows

    @property
    def atom(self):
        return get_atom(self.atom_name)

    @property
    def columns(self):  # staged activation columns: part * R + row
        return self.parts * self.rows

    @property
    def loads_per_block(self):  # 16-byte weight loads a lane issues per block (fp8 weights)
        return self.loads_per_block_of(1)

    def loads_per_block_of(self, w_bytes: int) -> int:
        """16-byte weight loads a lane issues per block of weights of `w_bytes` a value."""
        return len(self.a_rows) * self.lane_k * w_bytes // LOAD_BYTES

    @staticmethod
    def of(atom_name: str, rows: int, parts: int = 2) -> "ProjTiling":
        at = get_atom(atom_name)
        if at.a_dtype not in (bf16, f16) or at.b_dtype != at.a_dtype or at.b_source != "regs" \
                or at.m != 16:
            raise ValueError(f"{at.name}: the projection tile needs a bf16 or f16 register MMA "
                             "with M = 16")
        if at.a_dtype == f16 and parts != 2:
            raise ValueError(f"{at.name}: f16 activations are staged as hi + lo (parts=2)")
        if BLOCK % at.k:
            raise ValueError(f"{at.name}: K = {at.k} does not divide the {BLOCK}-wide block")
        if parts not in (1, 2) or not 1 <= rows <= at.n:
            raise ValueError(f"{at.name}: {rows} rows x {parts} parts; rows must be <= N = {at.n}")
        K, nc, L = at.k, BLOCK // at.k, at.group
        perm, held, window, lane_k, a_words = a_permutation(at, L)
        perm = np.asarray(perm)
        # B: one column per lane, its k inside one lane_k window
        br, bc = at.b_rows(), at.b_cols()
        bslots = br.shape[1]
        bcol = np.array([int(bc[ln, 0]) for ln in range(L)])
        if any(len(set(int(x) for x in bc[ln])) != 1 for ln in range(L)):
            raise ValueError(f"{at.name}: a lane holds several B columns")
        bwin = np.full(L, -1, np.int64)
        bmap = [[None] * bslots for _ in range(nc)]
        for ln in range(L):
            for c in range(nc):
                for s in range(bslots):
                    phys = int(perm[c * K + int(br[ln, s])])
                    q, e = divmod(phys, lane_k)
                    if bwin[ln] not in (-1, q) or bmap[c][s] not in (None, e):
                        raise ValueError(f"{at.name}: lane {ln}'s B k leave one {lane_k}-k window "
                                         "or differ across lanes")
                    bwin[ln], bmap[c][s] = q, e
        b_words = tuple(_words(bmap[c], f"{at.name} B") for c in range(nc))
        # C: row and column of each slot, affine in lane and slot
        cr, cc = at.c_rows(), at.c_cols()
        row_off = tuple(int(cr[0, s] - cr[0, 0]) for s in range(cr.shape[1]))
        col_off = tuple(int(cc[0, s] - cc[0, 0]) for s in range(cc.shape[1]))
        if not ((cr == cr[:, :1] + np.array(row_off)).all() and (cc == cc[:, :1] + np.array(col_off)).all()):
            raise ValueError(f"{at.name}: C rows/columns are not lane part + slot part")
        cols = parts * rows
        passes = -(-cols // at.n)
        if passes > 1 and at.n != rows:
            raise ValueError(f"{at.name}: {cols} columns over N = {at.n} need N == rows")
        join = None
        if passes == 1 and parts == 2:
            lane_of, slot_of = at.owner("c")  # [row, col]
            ds, fixed = set(), {}
            for ln in range(L):
                for s in range(cr.shape[1]):
                    if cc[ln, s] < rows:
                        r_, c_ = cr[ln, s], cc[ln, s] + rows
                        ds.add(ln ^ int(lane_of[r_, c_]))
                        if fixed.setdefault(s, int(slot_of[r_, c_])) != slot_of[r_, c_]:
                            raise ValueError(f"{at.name}: slot {s}'s lo column moves between slots")
            sigma = [fixed.get(s, s) for s in range(cr.shape[1])]
            d = ds.pop() if len(ds) == 1 else -1
            if d < 0 or d & (d - 1) or d >= L:
                raise ValueError(f"{at.name}: hi and lo columns are not one lane swap apart")
            join = (d, tuple(sigma))
        runs, s = [], 0
        while s < len(row_off):
            n = 1
            while s + n < len(row_off) and col_off[s + n] == col_off[s] and \
                    row_off[s + n] == row_off[s] + n:
                n += 1
            runs.append((s, n))
            s += n
        return ProjTiling(at.name, rows, parts, lane_k, nc, tuple(int(x) for x in perm),
                          tuple(LaneFn.of([held[ln][h] for ln in range(L)])
                                for h in range(len(held[0]))),
                          LaneFn.of(window), tuple(a_words), LaneFn.of(bcol), LaneFn.of(bwin),
                          b_words, passes, LaneFn.of(cr[:, 0]), row_off, LaneFn.of(cc[:, 0]),
                          col_off, join, tuple(runs))


_CACHE: dict = {}


def tiling(atom_name: str, rows: int, parts: int = 2) -> ProjTiling:
    key = (atom_name, rows, parts)
    if key not in _CACHE:
        _CACHE[key] = ProjTiling.of(atom_name, rows, parts)
    return _CACHE[key]


# ------------------------------------------------------------------------- the kernel code

def act_row_words(chunk: int) -> int:
    """u32 words of one staged activation column (2 bf16 a word, padded)."""
    return chunk // 2 + ACT_PAD_WORDS


def act_lds_words(T: ProjTiling, chunk: int) -> int:
    return T.columns * act_row_words(chunk)


def _pack_bf16_exact(k, f):
    """f32 values that are exactly bf16 -> u32 words of 2 bf16 (low half first): the bf16 is
    the f32's high half, so truncation is exact and cheaper than a rounding conversion (which
    gfx942 has no instruction for)."""
    u = k.bitcast(f, u32)
    return [(u[2 * i] >> 16) | (u[2 * i + 1] & HI_MASK) for i in range(f.n // 2)]


def _pack_weights(k, f):
    """Decoded fp8 weights (f32, exactly bf16) -> u32 words of 2 bf16. On NVIDIA a rounding
    conversion packs a pair in one instruction (cvt.rn.bf16x2.f32; exact, the values being
    bf16), where the bit packing takes two (a shift-or and a mask); AMD keeps the bit
    packing (gfx942 has no rounding conversion); the interpreter runs NVIDIA's form."""
    if k.target.vendor == "amd":
        return _pack_bf16_exact(k, f)
    b = k.bitcast(k.cast(f, bf16), u32, f.n // 2)
    return [b[i] for i in range(f.n // 2)]


def load_activations(k, T: ProjTiling, chunk: int, load8):
    """Phase 1 of staging the job's activations: issue the loads. `load8(r, kk, mask)` loads
    what row r's values k0 + kk .. + 8 of the job's chunk are made of (any values); returns
    the pending pieces for `store_activations`. Issued BEFORE the weight loads on AMD (it
    counts outstanding loads in order, so waiting for these does not wait for the weights);
    after them where `project(weights_first=True)` (the sm_90a front)."""
    R = T.rows
    if chunk % PIECE_K:
        raise ValueError(f"mma_tile: a chunk of {chunk} k is not a whole number of 8-k pieces")
    nvec, nthr = R * chunk // PIECE_K, k.W * k.L
    tid = k.wave_id() * k.L + k.lane_id()
    out = []
    for it in range(-(-nvec // nthr)):
        v = it * nthr + tid
        m = v < nvec if nvec % nthr else None
        r = v / (chunk // PIECE_K)
        kk = (v % (chunk // PIECE_K)) * PIECE_K
        out.append((r, kk, m, load8(r, kk, m)))
    return out


def range_lds_words(T: ProjTiling) -> int:
    """u32 words of the f16 path's range table (a row's max |a| bits), 0 for bf16."""
    return T.rows if T.atom.a_dtype == f16 else 0


def clear_range(k, T: ProjTiling, rng):
    """The f16 path: zero the rows' max words (in phase 1; store_activations' first barrier
    orders it before the maxima)."""
    tid = k.wave_id() * k.L + k.lane_id()
    k.store(rng, k.min(tid, T.rows - 1), k.const(0, u32), mask=tid < T.rows)


def range_scales(k, max_bits, top: int = RANGE_TOP):
    """(scale, its inverse) of a row from its max |a| bits: powers of two that put the row's
    largest |a| * scale in [2^top, 2^(top + 1)) (top = RANGE_TOP: f16's hi never overflows, its
    lo is exact for every |a| * scale >= 2^-9), clamped to normal f32 powers (zero rows: any
    scale). Exponent fields: e(scale) = 2 bias + top - e(max), e(inv) = 2 bias - e(scale)."""
    e = (max_bits >> F32_MANTISSA_BITS) & F32_EXP_MASK
    x = k.max(k.min(k.const(2 * F32_EXP_BIAS + top, i32) - k.bitcast(e, i32),
                    RANGE_EXP_MAX), RANGE_EXP_MIN)
    scale = k.bitcast(k.bitcast(x, u32) << F32_MANTISSA_BITS, f32)
    inv = k.bitcast(k.bitcast(2 * F32_EXP_BIAS - x, u32) << F32_MANTISSA_BITS, f32)
    return scale, inv


def store_activations(k, T: ProjTiling, lds, chunk: int, pending, value8, rng=None):
    """Phase 2: `value8(pieces)` -> the f32 x 8 values; stored as the MMA's B: column
    f = part * R + r holds the hi (part 0) or lo (part 1) bf16 half of row r's values (module
    doc). With parts=1, `value8` may return the bf16 x 8 values themselves (stored as they
    are). The caller puts CTA barriers around the staging (before: the previous job's reads
    are done; after: the stores are visible to every wave)."""
    R, stride = T.rows, act_row_words(chunk)
    if T.atom.a_dtype == f16:
        _store_f16(k, T, lds, chunk, [(r, kk, m, value8(p)) for r, kk, m, p in pending], rng)
        return
    for r, kk, m, pieces in pending:
        a = value8(pieces)
        if a.dtype == bf16:
            if T.parts != 1:
                raise ValueError("mma_tile: bf16 activations are staged unsplit (parts=1)")
            k.store(lds, r * stride + kk / 2, k.bitcast(a, u32), mask=m)
            continue
        if T.parts == 1:
            k.store(lds, r * stride + kk / 2, k.vec(*_pack_bf16_exact(k, a)), mask=m)
            continue
        hi = k.bitcast(k.bitcast(a, u32) & HI_MASK, f32)
        lo = a - hi  # exact: the low 16 bits of a (at most 8 significant bits)
        k.store(lds, r * stride + kk / 2, k.vec(*_pack_bf16_exact(k, hi)), mask=m)
        k.store(lds, (R + r) * stride + kk / 2, k.vec(*_pack_bf16_exact(k, lo)), mask=m)


def _store_f16(k, T, lds, chunk, vals, rng):
    """f16 hi / lo halves of a * 2^-e, e per row from the chunk's max |a| (range_scales):
    hi = f16(a s), lo = f16(a s - hi), both exact where |a s| >= 2^-9; the MMA sums are
    multiplied by the inverse at emission (_emit)."""
    R, stride = T.rows, act_row_words(chunk)
    k.barrier()  # clear_range's zeros before any row's maximum
    # where a wave's pieces of a round lie in one row (a row's pieces a multiple of the wave:
    # the front's chunks), the wave's maximum first, one atomic a wave instead of one a
    # thread on the row's word (the H200 staging was no faster for it: bench/NOTES.md v21)
    one_row = chunk // PIECE_K % k.L == 0
    for r, kk, m, a in vals:
        mx = k.abs(a[0])
        for j in range(1, a.n):
            mx = k.max(mx, k.abs(a[j]))
        if one_row and m is None:
            mx = k.wave_max(mx)
            k.atomic("max", rng, k.min(r, R - 1), k.bitcast(mx, u32), mask=k.lane_id().eq(0),
                     scope="cta")
            continue
        k.atomic("max", rng, k.min(r, R - 1), k.bitcast(mx, u32), mask=m, scope="cta")
    k.barrier()  # every row's maximum
    for r, kk, m, a in vals:
        scale, _ = range_scales(k, k.load(rng, k.min(r, R - 1), u32))
        x = a * scale
        hi = k.cast(x, f16)
        lo = k.cast(x - k.cast(hi, f32), f16)
        k.store(lds, r * stride + kk / 2, k.bitcast(hi, u32, a.n // 2), mask=m)
        k.store(lds, (R + r) * stride + kk / 2, k.bitcast(lo, u32, a.n // 2), mask=m)


@dataclass(frozen=True)
class WaveSplit:
    """How a tile's m-tiles and K blocks are shared by the CTA's waves (module doc)."""
    mtiles: int  # 16-row m-tiles of the tile
    kparts: int  # waves per m-tile (K parts, summed in part order)
    per_wave: int  # m-tiles a wave runs one after the other

    @staticmethod
    def of(tile_m: int, m: int, waves: int) -> "WaveSplit":
        if tile_m % m:
            raise ValueError(f"mma_tile: a tile of {tile_m} rows is not a whole number of {m}-row MMAs")
        mt = tile_m // m
        if waves >= mt:
            if waves % mt:
                raise ValueError(f"mma_tile: {waves} waves do not split over {mt} m-tiles")
            return WaveSplit(mt, waves // mt, 1)
        if mt % waves:
            raise ValueError(f"mma_tile: {mt} m-tiles do not split over {waves} waves")
        return WaveSplit(mt, 1, mt // waves)


def project(k, T: ProjTiling, *, w, w_stride: int, w_dtype, scale, scale_stride: int, row0, k0,
            kb0, blocks: int, tile_m: int, lds, chunk: int, stage, emit, red=None,
            w_rows: int | None = None, loads_in_flight: int = LOADS_IN_FLIGHT,
            straight: bool = False, async_slots=None, rng=None, weights_first: bool = False):
    """The tile's partial sums (module doc).

    w, scale      weight and block-scale pointers; w_stride = K (elements a weight row),
                  scale_stride = K / 128. w_dtype: the chip's fp8 (converted to bf16, exact)
                  or bf16 (fed as loaded); scale None: unscaled weights (the blocks' MMA
                  sums are added in block order)
    row0          uniform i32: the tile's first output row (a multiple of 16)
    k0, kb0       uniform i32: the job's first k, and its first scale-block column (k0 / 128;
                  any offset of the tile's scales in `scale` may be added)
    w_rows        static: weight rows that exist from row0 (None: all of the tile); rows of
                  the tile past them read row w_rows - 1 (their outputs: the caller masks)
    blocks        static: 128-wide blocks of the job (its chunk = blocks * 128)
    lds           the staged activations (act_lds_words(T, chunk) u32 words)
    stage()       starts staging them (load_activations) and returns `finish()`, which
                  completes it (store_activations, then a CTA barrier); project calls stage()
                  before its first weight loads and finish() right after them. When a CTA
                  runs several jobs, stage() begins with a CTA barrier: the previous job's
                  waves are done reading `lds` and `red`
    emit(m, r, v, mask)  per run of C slots: per-lane output row m (i32), activation row r,
                  f32 vector v of consecutive rows m.., mask (r < R)
    red           f32 LDS of W * L * c_slots words when several waves share an m-tile
    loads_in_flight  16-byte weight loads a lane keeps in flight (the ring's depth in blocks
                  is this over a block's loads)
    straight      the ring unrolled in Python: block i's loads issued at block i - depth as
                  in the ring, but every block's registers named statically, so no copies
                  rotate the ring (the runtime ring's loop moves ~70 registers a block on
                  sm_90a: bench/NOTES.md v16)
    async_slots   LDS (async_slot_words(...) u32 words) or None: every block of the wave's
                  weights is copied into lane-private LDS slots by async copies (sm_90a
                  cp.async) BEFORE the first MMA, one copy group a block, and block i waits
                  for its own group only (async_wait of the groups after it). A register
                  ring holds only `depth` blocks in flight (Little's law: the front's
                  weight stream, latency-bound at 4 blocks a warp, bench/NOTES.md v21);
                  copies hold no registers, so the whole job's bytes are requested at once.
                  At most MAX_ASYNC_BLOCKS blocks a wave (the wait's 3-bit count)
    weights_first the first weight loads issued before stage()'s activation loads (NVIDIA:
                  ptxas hoists the staging's arithmetic above later loads, which holds the
                  weights back until the activations arrive; AMD retires loads in order, so
                  there the activations go first; in 16-warp builds the longer live ranges
                  spill: the front kind asks for it, bench/NOTES.md v21)
    rng           the f16 path's range table (range_lds_words; the caller's staging calls
                  clear_range in phase 1 and passes it to store_activations): each row's
                  sums are multiplied by its scale's inverse before `emit`
    """
    at = T.atom
    M, cs = at.m, at.c_slots
    if (at.a_dtype == f16) != (rng is not None):
        raise ValueError(f"mma_tile: {at.name} {'needs' if rng is None else 'takes no'} a range "
                         "table (rng)")
    if rng is not None:
        emit_scaled = emit

        def emit(m, r, v, mask):  # the row's sums back from its range scale (exact: 2^e)
            _, inv = range_scales(k, k.load(rng, k.min(r, T.rows - 1), u32))
            emit_scaled(m, r, v * inv, mask)
    sp = WaveSplit.of(tile_m, M, k.W)
    KP = sp.kparts
    if KP > 1 and red is None:
        raise ValueError("mma_tile: waves sharing an m-tile sum through `red` LDS")
    lane, wave = k.lane_id(), k.wave_id()
    stride = act_row_words(chunk)
    nbw = -(-blocks // KP)  # blocks per wave (the last part may have fewer)
    wb = w_dtype.bytes
    if wb not in (1, 2) or (wb == 2 and w_dtype != bf16):
        raise ValueError(f"mma_tile: weights of {w_dtype}; fp8 or bf16")
    per = T.loads_per_block_of(wb)
    epl = LOAD_BYTES // wb  # weight values a load
    nl = T.lane_k // epl  # loads a row a block
    clamp = w_rows is not None and w_rows < tile_m
    depth = max(1, min(nbw, loads_in_flight // per))
    kp = wave / sp.mtiles if KP > 1 else None
    count = (blocks - kp + KP - 1) / KP if KP > 1 and blocks % KP else nbw
    if async_slots is not None:
        _check_async_blocks(nbw, blocks, KP)
        if scale is None or wb != 1:
            raise ValueError("mma_tile: async weight slots are for fp8 weights with block scales")
    rows_l = [fn.emit(k, lane) for fn in T.a_rows]
    win = T.a_window.emit(k, lane) * T.lane_k
    bcol = T.b_col.emit(k, lane)
    bwin = T.b_window.emit(k, lane) * (T.lane_k // 2)
    zero = k.vec(*[k.const(0.0, f32)] * cs)

    def block_of(i):  # the job's block index of a wave's i-th block
        return i if KP == 1 else kp + i * KP

    def block_base(i):  # the lane's first k of block i
        return k0 + block_of(i) * BLOCK + win

    def weight_at(mrow0, base, h, u):
        """Element index of the lane's u-th 16-byte weight load of its row h from `base`."""
        row = row0 + k.min(mrow0 - row0 + rows_l[h], w_rows - 1) if clamp else mrow0 + rows_l[h]
        return row * w_stride + base + u * epl

    def scale_load(mrow0, i, m=None):
        return k.load(scale, (mrow0 / BLOCK) * scale_stride + kb0 + block_of(i), f32, mask=m)

    def loads(mrow0, i, masked=True):
        """The lane's 16-byte weight loads of its i-th block and the block's scale (per lane:
        masked like the weights), none past the wave's last block: issued `depth` blocks
        ahead, so neither the weights nor the scale is waited on in the block's own turn."""
        m = i < count if masked else None
        base = block_base(i)
        ws = [k.bitcast(k.load(w, weight_at(mrow0, base, h, u), w_dtype, epl, nontemporal=True,
                               mask=m), u32)
              for h in range(len(rows_l)) for u in range(nl)]
        return ws if scale is None else ws + [scale_load(mrow0, i, m)]

    nloads = len(rows_l) * nl  # 16-byte weight loads a lane a block

    load_words = LOAD_BYTES // u32.bytes

    def slot(i, q):  # u32 word of the lane's q-th 16-byte weight load of block i (async)
        return ((wave * nbw + i) * nloads + q) * k.L * load_words + lane * load_words

    def copies(mrow0, i):
        """Async mode: block i's weight bytes into the lane's slots (one copy group), and its
        scale as a register load (a word, issued with them)."""
        base = block_base(i)
        for h in range(len(rows_l)):
            for u in range(nl):
                k.async_copy(async_slots, slot(i, h * nl + u) * u32.bytes, w,
                             weight_at(mrow0, base, h, u), u8, LOAD_BYTES)
        k.async_commit()
        return [scale_load(mrow0, i)]

    def landed(i, sc):
        """Async mode: block i's weight words once its group has landed (the lane's own
        copies: no barrier), then its scale."""
        k.async_wait(nbw - 1 - i)
        return [k.load(async_slots, slot(i, q), u32, load_words) for q in range(nloads)] + sc

    def bwords(i):  # B: the lane's 16 words of its column in each pass, from LDS
        b = block_of(i)
        out = []
        for p in range(T.passes):
            f = bcol + p * at.n if p else bcol
            if T.passes * at.n > T.columns:  # columns past the staged ones: any valid data
                f = k.min(f, T.columns - 1)  # (they only feed C columns nobody reads)
            base = f * stride + b * (BLOCK // 2) + bwin
            ws = []
            for v in range(T.lane_k // 2 // 4):
                x = k.load(lds, base + 4 * v, u32, 4)
                ws += [x[j] for j in range(4)]
            out.append(ws)
        return out

    def block(i, cur, total):
        """One block: convert the weights, 'chunks' x 'passes' MMAs, scale, accumulate."""
        wwords = []
        for h in range(len(rows_l)):
            ws = []
            for u in range(nl):
                if wb == 2:  # bf16: the loaded words are the MMA's (low half first)
                    ws += [cur[h * nl + u][x] for x in range(4)]
                    continue
                w8 = k.bitcast(cur[h * nl + u], w_dtype, LOAD_BYTES)
                if at.a_dtype == f16:  # exact, two a cvt.rn.f16x2.e4m3x2
                    hw = k.bitcast(k.cast(w8, f16), u32, LOAD_BYTES // 2)
                    ws += [hw[x] for x in range(LOAD_BYTES // 2)]
                    continue
                ws += _pack_weights(k, k.cast(w8, f32))
            wwords.append(ws)
        bw = bwords(i)
        acc = zero
        for c in range(T.chunks):
            A = k.bitcast(k.vec(*[wwords[h][x] for h, x in T.a_words[c]]), at.a_dtype, at.a_slots)
            for p in range(T.passes):
                B = k.bitcast(k.vec(*[bw[p][x] for x in T.b_words[c]]), at.b_dtype, at.b_slots)
                acc = k.mma(at, A, B, acc)
        return acc + total if scale is None else k.fma(acc, cur[-1], total)

    weights_first = weights_first and async_slots is None
    for j in range(sp.per_wave):
        mt = wave % sp.mtiles if sp.per_wave == 1 else wave + j * k.W
        mrow0 = row0 + mt * M
        finish = stage() if j == 0 and not weights_first else None
        if async_slots is not None:
            # (a wave of several m-tiles copies each one's blocks when it starts it, into
            # the same slots: their earlier bytes were read, and their groups retired)
            scales = [copies(mrow0, k.const(i, i32)) for i in range(nbw)]
            if finish:
                k.opaque(0, i32)  # (as below: the copies stay above the staging's waits)
                finish()
            total = k.lane_var(zero)
            for i in range(nbw):
                total.set(block(i, landed(i, scales[i]), total.get()))
            _finish_tile(k, T, sp, mrow0, total.get(), red, wave, lane, cs, emit)
            continue
        unrolled = nbw <= depth or straight
        masked = not isinstance(count, int)
        if unrolled:
            # every block's loads fit in flight (or the ring is unrolled): issue the first
            # ones, then a straight-line body issuing each block's successor `depth` ahead
            pre = {i: loads(mrow0, k.const(i, i32), masked=masked) for i in range(min(nbw, depth))}
        else:
            ring = [[k.lane_var(x) for x in loads(mrow0, k.const(d, i32))] for d in range(depth)]
        if j == 0 and weights_first:
            finish = stage()
        if finish:
            # an empty side-effecting asm: LLVM's machine scheduler may not sink the weight
            # loads below it (into the staging's waits) nor hoist the LDS stores above it
            k.opaque(0, i32)
            finish()
        total = k.lane_var(zero)
        if unrolled:
            for i in range(nbw):
                if i + depth < nbw:
                    pre[i + depth] = loads(mrow0, k.const(i + depth, i32), masked=masked)
                if not masked:
                    total.set(block(i, pre.pop(i), total.get()))
                else:
                    cur = pre.pop(i)
                    with k.if_(k.const(i, i32) < count):
                        total.set(block(i, cur, total.get()))
        else:
            for i in k.range(count, unroll=False):
                cur = [x.get() for x in ring[0]]
                for d in range(depth - 1):
                    for a, b in zip(ring[d], ring[d + 1]):
                        a.set(b.get())
                for a, x in zip(ring[depth - 1], loads(mrow0, i + depth)):
                    a.set(x)
                total.set(block(i, cur, total.get()))
        _finish_tile(k, T, sp, mrow0, total.get(), red, wave, lane, cs, emit)


def _finish_tile(k, T, sp, mrow0, tot, red, wave, lane, cs, emit):
    """Sum the m-tile's K parts through `red` in part order (when waves share it), emit."""
    if sp.kparts > 1:
        k.store(red, (wave * k.L + lane) * cs, tot)
        k.barrier()
        with k.if_((wave / sp.mtiles).eq(0)):
            s = k.load(red, (wave * k.L + lane) * cs, f32, cs)
            for q in range(1, sp.kparts):
                s = s + k.load(red, ((q * sp.mtiles + wave) * k.L + lane) * cs, f32, cs)
            _emit(k, T, mrow0, s, emit)
    else:
        _emit(k, T, mrow0, tot, emit)


def _check_async_blocks(nbw: int, blocks: int, kparts: int):
    if nbw > MAX_ASYNC_BLOCKS or blocks % kparts:
        raise ValueError(f"mma_tile: async weight slots need at most {MAX_ASYNC_BLOCKS} blocks "
                         f"a wave and whole K parts; this tile has {nbw} blocks a wave "
                         f"({blocks} blocks over {kparts} K parts)")


def async_slot_words(T: ProjTiling, waves: int, blocks: int, tile_m: int) -> int:
    """u32 words of LDS `project(async_slots=...)` needs: every wave's blocks of 16-byte
    weight loads, a lane's each."""
    sp = WaveSplit.of(tile_m, T.atom.m, waves)
    nbw = -(-blocks // sp.kparts)
    _check_async_blocks(nbw, blocks, sp.kparts)
    return waves * nbw * T.loads_per_block * T.atom.group * LOAD_BYTES // 4


def _emit(k, T, mrow0, total, emit):
    """Join each row's hi and lo columns, then hand the runs of C slots to `emit`."""
    lane = k.lane_id()
    vals = [total[s] for s in range(total.n)]
    if T.join:  # value of the hi column + its lo column, from lane ^ d, slot sigma[s]
        d, sigma = T.join
        lo = {t: vals[t] if d == 0 else k.lane_swap(vals[t], d) for t in sorted(set(sigma))}
        vals = [v + lo[sigma[s]] for s, v in enumerate(vals)]
    crow = mrow0 + T.c_row.emit(k, lane)
    ccol = T.c_col.emit(k, lane)
    for s0, n in T.runs:
        r = ccol + T.c_col_off[s0] if T.c_col_off[s0] else ccol
        m = crow + T.c_row_off[s0] if T.c_row_off[s0] else crow
        v = vals[s0] if n == 1 else k.vec(*vals[s0:s0 + n])
        emit(m, r, v, r < T.rows)
