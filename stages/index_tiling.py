"""How the index scoring feeds one 128-byte indexer key (one head's K = 128) to an MMA atom.

Scoring multiplies keys (the atom's A operand, M = keys) with queries (B, N = heads, or on
Hopper (row, head) columns read from shared memory). An atom's K is 128 (gfx950
16x16x128 f8f6f4: one instruction a head) or 32 (gfx942 16x16x32, Hopper wgmma k32: four
chained instructions a head). A dot product over K may be taken in any order as long as A
and B use the same one, so the head's 128 bytes are PERMUTED onto the atom's K indices such
that every lane holds 32 CONTIGUOUS key bytes per key it holds (two 16-byte loads), and
every A (and register B) operand register is one aligned 4-byte word of those 32 bytes.

`KeyTiling.of(atom)` derives the permutation from the atom's own operand maps and checks
those properties (a map that does not have them is a build error, not a wrong score):

    perm[c * K_atom + kk] = key byte   for MMA chunk c (0 .. 128/K_atom - 1), atom K index kk
    holder(lane, key row) = rank of the lane among the lanes holding that A row: its 32 bytes
                            are key bytes [32 * holder, 32 * holder + 32), or with `piece`
                            bytes (16) its lane bytes [16 i, 16 i + 16) are key bytes
                            [64 i + 16 * holder, +16): the holders' first loads then cover
                            the key's first 64 bytes, whole 32-byte sectors, and the
                            second loads the rest (KeyTiling.key_byte)
    a_words[c][reg]       = (key slot, word) of A register `reg` of chunk c: `key slot` is the
                            lane's k-th distinct A row (0 on AMD; 0/1 on Hopper: rows g, g+8),
                            `word` the 4-byte word of its 32 bytes
    b_words[c][reg]       = word (of the 32 bytes [32 * holder, +32) of the query column) of B
                            register `reg` (register B only: AMD, 32-byte pieces)

The kernel forms lane numbers from these facts with the formulas the tests check against
the tables (AMD: key row = lane % 16, holder = lane // 16; Hopper: rows 16w + g + 8h,
holder t = lane % 4).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from monokernel.atoms import atom as get_atom

HEAD_DIM = 128
LANE_BYTES = 32  # key bytes a holder lane owns per key
VECTOR_BYTES = 16  # the widest load a lane issues (LDG.E.128 / global_load_dwordx4)
WORD_BYTES = 4  # one A register (and the narrowest load)
PIECES = (WORD_BYTES, VECTOR_BYTES, LANE_BYTES)  # contiguous key bytes a lane reads (key_byte)

# which atom scores on which chip; the interpreter runs any of them (the stage's `chip`)
SCORE_ATOMS = {"gfx950": "gfx950_mfma_f32_16x16x128_f8f6f4",
               "gfx942": "gfx942_mfma_f32_16x16x32_fp8"}
SM90 = "sm_90a"


@dataclass(frozen=True)
class KeyTiling:
    atom_name: str
    chunks: int  # MMAs per head (128 / K_atom)
    perm: tuple  # MMA K index -> key byte
    a_words: tuple  # [chunk][reg] -> (key slot, word)
    b_words: tuple  # [chunk][reg] -> word (register B), () for shared-memory B
    keys_per_lane: int
    piece: int = LANE_BYTES  # contiguous key bytes of a lane's load (key_byte)

    @property
    def atom(self):
        return get_atom(self.atom_name)

    @staticmethod
    def key_byte(holder: int, lane_byte: int, piece: int = LANE_BYTES) -> int:
        """The key byte a holder's lane byte (0 .. 31) is: its lane bytes are LANE_BYTES /
        piece loads of `piece` contiguous bytes, the holders' i-th loads adjacent (so with 16,
        one load instruction of a key's four holders reads 64 contiguous bytes: whole
        sectors, where 32-byte pieces read half of each of four)."""
        i, within = divmod(lane_byte, piece)
        return i * (HEAD_DIM // LANE_BYTES) * piece + holder * piece + within

    @staticmethod
    def of(atom, piece: int = LANE_BYTES) -> "KeyTiling":
        at = get_atom(atom) if isinstance(atom, str) else atom
        K = at.K
        if HEAD_DIM % K:
            raise ValueError(f"{at.name}: K = {K} does not divide the head's {HEAD_DIM}")
        if piece not in PIECES:
            raise ValueError(f"{at.name}: key pieces of {piece!r} bytes; one of {PIECES}")
        if piece != LANE_BYTES and at.b_source == "regs":
            raise ValueError(f"{at.name}: register-B atoms read a lane's query bytes in one "
                             f"32-byte window; key pieces of {piece} bytes split it")
        nc = HEAD_DIM // K
        rows, cols = at.a_rows(), at.a_cols()  # [lane, slot]
        lanes, slots = rows.shape
        perm = np.full(HEAD_DIM, -1, np.int64)
        a_words = [[None] * (slots // 4) for _ in range(nc)]
        klist = []
        for ln in range(lanes):
            krows = sorted(set(int(x) for x in rows[ln]))
            klist.append(len(krows))
            for h, key in enumerate(krows):
                holders = sorted(set(int(x) for x in np.nonzero((rows == key).any(1))[0]))
                q = holders.index(ln)
                mine = [s for s in range(slots) if rows[ln, s] == key]
                per = len(mine)
                if per * nc * len(holders) != HEAD_DIM or per * nc != LANE_BYTES:
                    raise ValueError(f"{at.name}: lane {ln} holds {per} x {nc} bytes of key row "
                                     f"{key} (of {len(holders)} lanes); 32-byte lanes are needed")
                for c in range(nc):
                    for j, s in enumerate(mine):
                        phys = KeyTiling.key_byte(q, c * per + j, piece)
                        kappa = c * K + int(cols[ln, s])
                        if perm[kappa] not in (-1, phys):
                            raise ValueError(f"{at.name}: K index {kappa} lands on key bytes "
                                             f"{perm[kappa]} and {phys}: no lane-independent "
                                             "permutation")
                        perm[kappa] = phys
                for c in range(nc):
                    for reg in range(slots // 4):
                        ss = range(4 * reg, 4 * reg + 4)
                        if rows[ln, ss[0]] != key:
                            continue
                        lb = [c * per + mine.index(s) for s in ss if rows[ln, s] == key]
                        ph = [KeyTiling.key_byte(q, b, piece) for b in lb]
                        if len(ph) != 4 or ph[0] % 4 or ph != list(range(ph[0], ph[0] + 4)):
                            raise ValueError(f"{at.name}: A register {reg} of lane {ln} is not "
                                             "one aligned key word")
                        w = lb[0] // 4
                        prev = a_words[c][reg]
                        if prev is not None and prev != (h, w):
                            raise ValueError(f"{at.name}: A register {reg} differs across lanes")
                        a_words[c][reg] = (h, w)
        if sorted(perm.tolist()) != list(range(HEAD_DIM)):
            raise ValueError(f"{at.name}: the key permutation is not a bijection")
        b_words = ()
        if at.b_source == "regs":
            br = at.b_rows()  # [lane, slot] -> kk
            bw = [[None] * (at.b_slots // 4) for _ in range(nc)]
            for ln in range(at.group):
                win = None
                for c in range(nc):
                    ph = [int(perm[c * K + int(br[ln, s])]) for s in range(at.b_slots)]
                    lo = min(ph) // LANE_BYTES * LANE_BYTES
                    win = lo if win is None else win
                    if lo != win or max(ph) >= win + LANE_BYTES:
                        raise ValueError(f"{at.name}: lane {ln}'s query bytes leave one 32-byte window")
                    for reg in range(at.b_slots // 4):
                        p4 = ph[4 * reg:4 * reg + 4]
                        if p4[0] % 4 or p4 != list(range(p4[0], p4[0] + 4)):
                            raise ValueError(f"{at.name}: B register {reg} is not one aligned word")
                        w = (p4[0] - win) // 4
                        if bw[c][reg] not in (None, w):
                            raise ValueError(f"{at.name}: B register {reg} differs across lanes")
                        bw[c][reg] = w
            b_words = tuple(tuple(x) for x in bw)
        return KeyTiling(at.name, nc, tuple(int(x) for x in perm),
                         tuple(tuple(x) for x in a_words), b_words, max(klist), piece)

    def holder_of_lane(self) -> np.ndarray:
        """[lane, key slot] -> the holder rank (32-byte window) of that lane (tests)."""
        at = self.atom
        rows = at.a_rows()
        out = np.zeros((at.group, self.keys_per_lane), np.int64)
        for ln in range(at.group):
            for h, key in enumerate(sorted(set(int(x) for x in rows[ln]))):
                holders = sorted(set(int(x) for x in np.nonzero((rows == key).any(1))[0]))
                out[ln, h] = holders.index(ln)
        return out

    def b_window_of_lane(self) -> np.ndarray:
        """[lane] -> the 32-byte query window of a register-B lane (tests)."""
        at = self.atom
        br = at.b_rows()
        return np.array([min(self.perm[int(x)] for x in br[ln]) // LANE_BYTES
                         for ln in range(at.group)])


_CACHE: dict = {}


def tiling(atom_name: str) -> KeyTiling:
    if atom_name not in _CACHE:
        _CACHE[atom_name] = KeyTiling.of(atom_name)
    return _CACHE[atom_name]
