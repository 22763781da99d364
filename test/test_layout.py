"""Layout algebra: CuTe's documented examples, and properties over random layouts."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from monokernel.layout import (Layout, coalesce, complement, composition, concat, crd2idx, flatten,
                               idx2crd, logical_divide, logical_product, make_layout, right_inverse,
                               size, tabulate)

FAST = settings(max_examples=60, deadline=None)


# ---------------------------------------------------------------- strategies

def shapes(max_leaves=4, max_leaf=5):
    leaf = st.integers(1, max_leaf)
    return st.recursive(leaf, lambda ch: st.tuples(ch, ch) | st.tuples(ch, ch, ch), max_leaves=max_leaves)


@st.composite
def pow2_bijections(draw, max_modes=5):
    """A flat layout that is a bijection onto [0, size): power-of-two modes whose compact
    strides are handed out in a random order."""
    exps = draw(st.lists(st.integers(0, 3), min_size=1, max_size=max_modes))
    while sum(exps) > 8 and len(exps) > 1:  # keep sizes <= 256: checks are per element
        exps.pop()
    sh = [1 << e for e in exps]
    perm = draw(st.permutations(range(len(sh))))
    strides, acc = [0] * len(sh), 1
    for i in perm:
        strides[i] = acc
        acc *= sh[i]
    return Layout(tuple(sh), tuple(strides)) if len(sh) > 1 else Layout(sh[0], strides[0])


@st.composite
def sub_layouts(draw):
    """(A, n): A injective into [0, n), built from a subset of a bijection's modes."""
    full = draw(pow2_bijections())
    modes = list(zip(flatten(full.shape), flatten(full.stride)))
    keep = draw(st.lists(st.booleans(), min_size=len(modes), max_size=len(modes)))
    kept = [m for m, k in zip(modes, keep) if k] or [modes[0]]
    a = Layout(tuple(s for s, _ in kept), tuple(d for _, d in kept)) if len(kept) > 1 else Layout(*kept[0])
    return a, full.size()


def values(layout):
    return [layout(i) for i in range(layout.size())]


# ---------------------------------------------------------------- basics

def test_column_major_default_and_calls():
    a = make_layout((4, (2, 3)))
    assert a.stride == (1, (4, 8)) and a.size() == 24 and a.cosize() == 24
    assert a(3, (1, 2)) == 3 + 4 + 16 == a(3, 5) == a(23)
    assert a[1] == Layout((2, 3), (4, 8))
    assert np.array_equal(tabulate(Layout((2, 3), (3, 1))), [[0, 1, 2], [3, 4, 5]])
    assert repr(Layout((2, (2, 2)), (4, (1, 2)))) == "(2,(2,2)):(4,(1,2))"
    with pytest.raises(ValueError):
        Layout((2, 2), 1)


@FAST
@given(shapes(), st.data())
def test_idx2crd_crd2idx_inverse(shape, data):
    i = data.draw(st.integers(0, size(shape) - 1))
    assert crd2idx(idx2crd(i, shape), shape) == i
    assert make_layout(shape)(i) == i


@FAST
@given(shapes())
def test_compact_layout_enumerates_colexicographically(shape):
    lay = make_layout(shape)
    assert values(lay) == list(range(size(shape)))
    flat = tabulate(lay).reshape(-1, order="F")
    assert list(flat) == list(range(size(shape)))


@FAST
@given(shapes(), st.data())
def test_tabulate_matches_calls(shape, data):
    strides = data.draw(st.lists(st.integers(0, 7), min_size=len(flatten(shape)), max_size=len(flatten(shape))))
    it = iter(strides)
    stride = _rebuild(shape, it)
    lay = Layout(shape, stride)
    tab = tabulate(lay)
    for i in range(lay.size()):
        crd = idx2crd(i, lay.shape if lay.rank > 1 else lay.shape)
        top = (i,) if lay.rank == 1 else tuple(np.unravel_index(i, tab.shape, order="F"))
        assert tab[top] == lay(i) == lay(crd)


def _rebuild(shape, it):
    return next(it) if isinstance(shape, int) else tuple(_rebuild(s, it) for s in shape)


# ---------------------------------------------------------------- CuTe documentation examples

def test_cute_doc_examples():
    assert composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))) == Layout(((2, 2), 3), ((24, 2), 8))
    assert composition(Layout(20, 2), Layout((5, 4), (4, 1))) == Layout((5, 4), (8, 2))
    assert complement(Layout(4, 2), 24) == Layout((2, 3), (1, 8))
    assert complement(Layout((2, 2), (1, 6)), 24) == Layout((3, 2), (2, 12))
    assert logical_divide(Layout(24, 1), Layout(4, 2)) == Layout((4, (2, 3)), (2, (1, 8)))
    assert logical_product(Layout((2, 2), (4, 1)), Layout(6, 1)) == Layout(((2, 2), (2, 3)), ((4, 1), (2, 8)))
    assert logical_product(Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3))) == \
        Layout(((2, 5), (3, 4)), ((5, 1), (10, 30)))
    assert coalesce(Layout((2, (1, 6)), (1, (6, 2)))) == Layout(12, 1)
    assert right_inverse(Layout((4, 8), (8, 1))) == Layout((8, 4), (4, 1))


def test_by_mode_tiler():
    a = make_layout((8, 8))
    d = logical_divide(a, (2, 4))
    assert d == Layout(((2, 4), (4, 2)), ((1, 2), (8, 32)))
    assert composition(a, (2, None)) == Layout((2, 8), (1, 8))


# ---------------------------------------------------------------- properties

@FAST
@given(shapes(), st.data())
def test_coalesce_preserves_function(shape, data):
    strides = data.draw(st.lists(st.integers(0, 9), min_size=len(flatten(shape)), max_size=len(flatten(shape))))
    lay = Layout(shape, _rebuild(shape, iter(strides)))
    c = coalesce(lay)
    assert c.size() == lay.size() and values(c) == values(lay)
    assert len(flatten(c.shape)) <= len(flatten(lay.shape))


@FAST
@given(pow2_bijections())
def test_composition_identity(a):
    n = a.size()
    assert values(composition(a, make_layout(n))) == values(a)
    assert values(composition(make_layout(n), a)) == values(a)


@FAST
@given(pow2_bijections(), pow2_bijections(), st.data())
def test_composition_is_function_composition(a, b0, data):
    # B: a random layout whose codomain stays inside A's domain
    b_modes = list(zip(flatten(b0.shape), flatten(b0.stride)))
    scale = data.draw(st.sampled_from([1, 2, 4]))
    b = Layout(tuple(s for s, _ in b_modes), tuple(d * scale for _, d in b_modes)) if len(b_modes) > 1 \
        else Layout(b_modes[0][0], b_modes[0][1] * scale)
    if b.cosize() > a.size():
        return
    r = composition(a, b)
    assert r.size() == b.size()
    assert values(r) == [a(b(i)) for i in range(b.size())]


@FAST
@given(sub_layouts())
def test_complement_completes_a_bijection(an):
    a, n = an
    c = complement(a, n)
    whole = concat(a, c)
    assert sorted(values(whole)) == list(range(n))
    assert values(c) == sorted(values(c))  # the complement is ordered


@FAST
@given(pow2_bijections(), st.data())
def test_logical_divide_sizes_and_function(a, data):
    n = a.size()
    t = data.draw(st.sampled_from([d for d in (1, 2, 4, 8) if n % d == 0]))
    tile = Layout(t, 1)
    d = logical_divide(a, tile)
    assert d.size() == n and d[0].size() == t and d[1].size() == n // t
    assert values(d) == [a(i) for i in values(concat(tile, complement(tile, n)))]
    assert sorted(values(d)) == sorted(values(a))


@FAST
@given(sub_layouts(), st.sampled_from([1, 2, 4]))
def test_logical_product_sizes(an, reps):
    a, _ = an
    p = logical_product(a, Layout(reps, 1))
    assert p.size() == a.size() * reps and p[0] == a
    assert len(set(values(p))) == p.size()  # copies of an injective tile do not overlap


@FAST
@given(pow2_bijections())
def test_right_inverse_of_bijection(a):
    r = right_inverse(a)
    assert r.size() == a.size()
    assert [a(r(i)) for i in range(a.size())] == list(range(a.size()))


@FAST
@given(sub_layouts())
def test_right_inverse_prefix(an):
    a, _ = an
    r = right_inverse(a)
    assert [a(r(i)) for i in range(r.size())] == list(range(r.size()))


def test_tabulated_tables_are_shared_and_read_only():
    """tabulate keeps one table a layout (the interpreter asks for an atom's lane maps on
    every mma): equal layouts share it, and no caller can write into it."""
    a, b = Layout((4, 8), (1, 4)), Layout((4, 8), (1, 4))
    t = tabulate(a)
    assert tabulate(b) is t and t.tolist() == [[i + 4 * j for j in range(8)] for i in range(4)]
    with pytest.raises(ValueError, match="read-only"):
        t[0, 0] = 1
