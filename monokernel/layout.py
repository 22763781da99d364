"""A small CuTe-style layout algebra.

A `Layout` is a pair of congruent integer tuples, a *shape* and a *stride*, that maps a
coordinate to an integer (an offset, a register slot, a flat matrix index...):

    Layout((4, 8), (1, 4))(i, j) = i*1 + j*4

Shapes may nest, `((2, 2), 8) : ((1, 16), 2)`: a mode can itself be a layout. Why bother:
the MMA atoms (monokernel/atoms) must say where each matrix element lives in each lane's
registers, and every vendor's table ("lane 16*(k//8)+i, byte k%8") is exactly such a
layout from (lane, slot) to a matrix index. Writing them as layouts lets one test and one
interpreter handle every chip, and lets tiling code compose/divide them instead of
hand-deriving index formulas.

Conventions (the same as CuTe's):

* Coordinates are *colexicographic*: the first mode varies fastest. A 1-D index `i` into
  shape (s0, s1, s2) is the coordinate (i % s0, (i // s0) % s1, i // (s0*s1)); a nested
  mode is itself addressed that way. `idx2crd`/`crd2idx` convert.
* A layout can be called with a full coordinate, with one int per top-level mode (each
  int a 1-D index into that mode), or with a single int (a 1-D index into the whole
  domain). All three give the same result for the same element.
* `make_layout(shape)` gives compact column-major strides (1, s0, s0*s1, ...).
* `size` = number of coordinates, `cosize` = 1 + largest value (for non-negative strides),
  i.e. the extent of the codomain the layout touches.
"""
from __future__ import annotations

import functools
from math import prod
from typing import Union

import numpy as np

IntTuple = Union[int, tuple]
# distinct layouts whose tables `tabulate` keeps: every atom's operand maps and shared-memory
# tilings of a build fit many times over (a few dozen)
TABULATE_CACHE_LAYOUTS = 1024


# ------------------------------------------------------------------------- int tuples

def is_int(x) -> bool:
    return isinstance(x, (int, np.integer))


def flatten(t: IntTuple) -> tuple:
    """All leaves of an int tuple, in order."""
    if is_int(t):
        return (int(t),)
    return tuple(x for m in t for x in flatten(m))


def size(x) -> int:
    """Number of coordinates of a shape or layout."""
    if isinstance(x, Layout):
        return x.size()
    return prod(flatten(x))


def congruent(a: IntTuple, b: IntTuple) -> bool:
    if is_int(a) or is_int(b):
        return is_int(a) and is_int(b)
    return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))


def compact_strides(shape: IntTuple, start: int = 1) -> IntTuple:
    """Column-major strides for `shape`: each leaf's stride is the product of the leaves
    before it."""
    if is_int(shape):
        return start
    out = []
    for m in shape:
        out.append(compact_strides(m, start))
        start *= size(m)
    return tuple(out)


def _unflatten(flat: list, profile: IntTuple) -> IntTuple:
    """Rebuild a tuple with `profile`'s nesting from an iterator over its leaves."""
    if is_int(profile):
        return flat.pop(0)
    return tuple(_unflatten(flat, m) for m in profile)


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """1-D index -> natural (fully nested) coordinate, colexicographic. As in CuTe, an
    index past size(shape) runs on along the last mode instead of wrapping."""
    leaves = flatten(shape)
    out = []
    for s in leaves[:-1]:
        out.append(idx % s)
        idx //= s
    out.append(idx)
    return _unflatten(out, shape)


def crd2idx(crd, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Coordinate -> inner product with `stride` (default: compact strides of `shape`, so
    the result is the colexicographic 1-D index). A coordinate may be coarser than the
    shape: an int where the shape has a tuple is a 1-D index into that mode."""
    if stride is None:
        stride = compact_strides(shape)
    if is_int(crd):
        if is_int(shape):
            return int(crd) * stride
        crd = idx2crd(int(crd), shape)
    if is_int(shape):
        raise ValueError(f"coordinate {crd} is deeper than shape {shape}")
    if len(crd) != len(shape):
        raise ValueError(f"coordinate {crd} does not match shape {shape}")
    return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))


# ------------------------------------------------------------------------- Layout

class Layout:
    """shape : stride. Immutable; equality is structural (same shape and stride)."""

    __slots__ = ("shape", "stride")

    def __init__(self, shape: IntTuple, stride: IntTuple | None = None):
        shape = _as_tuple(shape)
        stride = compact_strides(shape) if stride is None else _as_tuple(stride)
        if not congruent(shape, stride):
            raise ValueError(f"shape {shape} and stride {stride} are not congruent")
        if any(s < 1 for s in flatten(shape)):
            raise ValueError(f"shape {shape} has a mode of size < 1")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "stride", stride)

    def __setattr__(self, *_):
        raise AttributeError("Layout is immutable")

    # -- structure
    @property
    def rank(self) -> int:
        return 1 if is_int(self.shape) else len(self.shape)

    def __getitem__(self, i: int) -> "Layout":
        """Top-level mode i as a layout."""
        if is_int(self.shape):
            if i not in (0, -1):
                raise IndexError(i)
            return self
        return Layout(self.shape[i], self.stride[i])

    def modes(self) -> list:
        return [self[i] for i in range(self.rank)]

    def flat(self) -> "Layout":
        """Same map, all modes flattened to one level."""
        s, d = flatten(self.shape), flatten(self.stride)
        return Layout(s if len(s) > 1 else s[0], d if len(d) > 1 else d[0])

    def size(self) -> int:
        return size(self.shape)

    def cosize(self) -> int:
        """1 + the largest value the layout produces (non-negative strides)."""
        return sum((s - 1) * d for s, d in zip(flatten(self.shape), flatten(self.stride))) + 1

    # -- evaluation
    def __call__(self, *crd) -> int:
        if len(crd) == 1:
            crd = crd[0]
        if not is_int(crd) and not is_int(self.shape) and len(crd) != len(self.shape):
            raise ValueError(f"coordinate {crd} does not match layout {self}")
        return crd2idx(crd, self.shape, self.stride)

    def __eq__(self, other) -> bool:
        return isinstance(other, Layout) and self.shape == other.shape and self.stride == other.stride

    def __hash__(self) -> int:
        return hash((self.shape, self.stride))

    def __repr__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"


def _as_tuple(t):
    if is_int(t):
        return int(t)
    return tuple(_as_tuple(x) for x in t)


def _fmt(t) -> str:
    return str(t) if is_int(t) else "(" + ",".join(_fmt(x) for x in t) + ")"


def make_layout(shape: IntTuple, stride: IntTuple | None = None) -> Layout:
    """Layout with column-major (compact) strides unless `stride` is given."""
    return Layout(shape, stride)


def concat(*layouts: Layout) -> Layout:
    """A layout whose top-level modes are the given layouts, in order."""
    return Layout(tuple(l.shape for l in layouts), tuple(l.stride for l in layouts))


def _from_modes(modes: list) -> Layout:
    """Flat (shape, stride) pairs -> layout; one mode gives a rank-1 int layout."""
    modes = [(s, d) for s, d in modes] or [(1, 0)]
    if len(modes) == 1:
        return Layout(modes[0][0], modes[0][1])
    return Layout(tuple(s for s, _ in modes), tuple(d for _, d in modes))


# ------------------------------------------------------------------------- algebra

def coalesce(layout: Layout) -> Layout:
    """The same function of the 1-D index with the fewest modes: drops size-1 modes and
    merges neighbours where (s0:d0, s1:d1) has d1 == s0*d0."""
    out: list = []
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        if s == 1:
            continue
        if out and out[-1][1] * out[-1][0] == d:
            out[-1] = (out[-1][0] * s, out[-1][1])
        else:
            out.append((s, d))
    return _from_modes(out) if out else Layout(1, 0)


def composition(a: Layout, b) -> Layout:
    """R = A o B, R(c) = A(B(c)) for every coordinate c of B, so R has B's shape.

    `b` is a Layout, an int n (the layout n:1), or a tuple "tiler" applied to A's top-level
    modes one by one (entries Layout / int / None = keep that mode). Works when CuTe's
    divisibility conditions hold (each stride of B divides through A's shape, or A's shape
    through it); otherwise raises ValueError rather than guess.
    """
    if isinstance(b, tuple):
        return _by_mode(composition, a, b)
    if is_int(b):
        b = Layout(b, 1)
    if not is_int(b.shape):
        return Layout(*_zip_modes([composition(a, m) for m in b.modes()]))
    return _compose_1d(a, b.shape, b.stride)


def _by_mode(fn, a: Layout, tiler: tuple) -> Layout:
    if len(tiler) > a.rank:
        raise ValueError(f"tiler {tiler} has more modes than {a}")
    ms = [fn(a[i], t) if t is not None else a[i] for i, t in enumerate(tiler)]
    return concat(*ms, *[a[i] for i in range(len(tiler), a.rank)])


def _zip_modes(ms: list):
    return tuple(m.shape for m in ms), tuple(m.stride for m in ms)


def _compose_1d(a: Layout, s: int, d: int) -> Layout:
    """A o (s:d). Walk A's flat modes: first skip the leading d elements of A's domain
    ("divide" by d), then keep modes until s elements are covered ("mod" by s). The last
    mode of A is treated as unbounded, as in CuTe."""
    if d == 0 or s == 1:
        return Layout(s, 0)
    ca = coalesce(a)
    shapes, strides = list(flatten(ca.shape)), list(flatten(ca.stride))
    # divide by d
    rest = d
    i = 0
    while i < len(shapes) - 1 and rest > 1:
        if rest % shapes[i] == 0:
            rest //= shapes[i]
            i += 1
        elif shapes[i] % rest == 0:
            shapes[i] //= rest
            strides[i] *= rest
            rest = 1
        else:
            raise ValueError(f"stride {d} does not divide through {a}")
    strides[i] *= rest  # last mode is unbounded: step through it by `rest`
    if i == len(shapes) - 1:
        shapes[i] = max(1, -(-shapes[i] // rest))
    shapes, strides = shapes[i:], strides[i:]
    # mod by s
    out = []
    remaining = s
    for j, (sh, st) in enumerate(zip(shapes, strides)):
        last = j == len(shapes) - 1
        if last or remaining <= sh:
            if not last and sh % remaining != 0:
                raise ValueError(f"shape {s} does not divide through {a}")
            out.append((remaining, st))
            remaining = 1
            break
        if remaining % sh != 0:
            raise ValueError(f"shape {s} does not divide through {a}")
        out.append((sh, st))
        remaining //= sh
    return coalesce(_from_modes(out)) if len(out) > 1 else _from_modes(out)


def complement(a: Layout, cotarget: int | None = None) -> Layout:
    """The layout that enumerates, in order, the codomain points [0, cotarget) that A does
    not reach: concat(A, complement(A)) is a bijection onto [0, cotarget) (rounded up to a
    multiple of what A covers). A must be injective with strides that nest (each sorted
    stride a multiple of the previous extent)."""
    if cotarget is None:
        cotarget = a.cosize()
    modes = sorted((d, s) for s, d in zip(flatten(a.shape), flatten(a.stride)) if s != 1 and d != 0)
    out, cur = [], 1
    for d, s in modes:
        if d % cur != 0:
            raise ValueError(f"{a} has overlapping or non-nesting strides; no complement")
        out.append((d // cur, cur))
        cur = s * d
    out.append((max(1, -(-cotarget // cur)), cur))
    return coalesce(_from_modes(out))


def _as_layout(t) -> Layout:
    return Layout(t, 1) if is_int(t) else t


def logical_divide(a: Layout, tiler) -> Layout:
    """Split A's domain into tiles: result mode 0 = one tile (A composed with the tiler),
    mode 1 = which tile (A composed with the tiler's complement in size(A)). A tuple tiler
    divides A's top-level modes one by one, giving ((tile0, rest0), (tile1, rest1), ...)."""
    if isinstance(tiler, tuple):
        return _by_mode(logical_divide, a, tiler)
    b = _as_layout(tiler)
    return composition(a, concat(b, complement(b, a.size())))


def logical_product(a: Layout, b) -> Layout:
    """Repeat A as a tile B times: mode 0 = A, mode 1 = B's pattern laid out over copies of
    A's codomain (complement(A) composed with B)."""
    b = _as_layout(b)
    return concat(a, composition(complement(a, a.size() * b.cosize()), b))


def right_inverse(a: Layout) -> Layout:
    """R with A(R(i)) == i for every i < size(R); R is as large as possible (it covers the
    contiguous codomain prefix [0, n) that A reaches one-to-one). Turns "which matrix index
    does (lane, slot) hold" into "which (lane, slot) holds matrix index i" when A is a
    bijection."""
    flat_s, flat_d = flatten(a.shape), flatten(a.stride)
    idx_strides = flatten(compact_strides(a.shape))
    modes = sorted((d, s, p) for s, d, p in zip(flat_s, flat_d, idx_strides) if s != 1 and d != 0)
    out, cur = [], 1
    for d, s, p in modes:
        if d != cur:
            break
        out.append((s, p))
        cur *= s
    return coalesce(_from_modes(out)) if out else Layout(1, 0)


# ------------------------------------------------------------------------- tables

def tabulate(layout: Layout) -> np.ndarray:
    """numpy array T of the layout's values with T[c0, c1, ...] = layout(c0, c1, ...),
    one axis per top-level mode, each indexed by that mode's 1-D (colexicographic) index.
    Read-only and computed once a layout: the interpreter asks for an MMA atom's lane maps
    on every mma it runs (a tenth of a fused-index test's time before the cache)."""
    return _tabulated(layout)


@functools.lru_cache(maxsize=TABULATE_CACHE_LAYOUTS)
def _tabulated(layout: Layout) -> np.ndarray:
    n = layout.size()
    idx = np.arange(n, dtype=np.int64)
    val = np.zeros(n, dtype=np.int64)
    p = 1
    for s, d in zip(flatten(layout.shape), flatten(layout.stride)):
        val += ((idx // p) % s) * d
        p *= s
    dims = (size(layout.shape),) if is_int(layout.shape) else tuple(size(m) for m in layout.shape)
    table = val.reshape(dims, order="F")
    table.flags.writeable = False  # shared by every caller of the cache
    return table

