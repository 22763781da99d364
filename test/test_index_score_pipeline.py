"""The Hopper scoring's software-pipelined paths (stages/index_score.py, both off by
default, measured slower on the H200): `_pipeline_halves`, the N = 2 x pairs x heads chain
split in two halves whose wgmmas run while the other half's epilogue runs, and
`_pipeline_alternate` (rows 2: step s's chain issued before step s-1's epilogue; bit-identical
scores, its PTX checked as the halves'); and the keys-in-shared-memory path (`ss_keys`, off
until measured: the SS wgmma on keys staged a page a step, within the float64 checks).

  * interpreter: at 8 rows (4 pairs) the scores and first-digit histograms are bit-identical
    to the unpipelined one-chain path (`pipeline_min_pairs = None`) and within the float64
    checks of test_index; an accumulator read before the wait that retires it is an
    interpreter error, so reading a half early fails here, and mixing the halves changes
    bits;
  * the interpreter's rule for a pending wgmma result carried through a variable (the
    pipeline carries half B's accumulator to the next step): readable after this wave's
    wait retired it, an error before;
  * sm_90a PTX: the wgmma / commit / wait sequence of the pipelined loop, no instruction
    touching (reading or writing) an accumulator or A-operand register of a wgmma whose
    group is not yet retired (the PTX ISA's rule for wgmma.mma_async), and, where ptxas is
    installed, no serialization advisory (C7514) and no spills.
"""
import re
from dataclasses import replace

import numpy as np
import pytest

from monokernel import interp
from spec import BuildSpec
from spec.catalogue import TINY
from stages.index import index_scoring_launch
from stages.index_ref import make_inputs
from stages.index_plan import DEPTH
from stages.index_score import ALT_SLOTS, IndexScore, _record_parts

from conftest import INDEX_JOB_LOOP_SPILL_BYTES, check_job_loop_spills, ptxas_report
from test_index import SENTINEL, _rel, _run, check_launch  # noqa: F401  (shared checks)

CAP, PAGES = 4096, 80


def _cases(cases, ids, slow=()):
    """pytest params of `cases` with their ids, those named in `slow` marked slow: the longer
    interpreter variants of an alternative measured and kept off, run by `pytest -m slow`
    (the default run keeps at least one case of each)."""
    unknown = set(slow) - set(ids)
    assert not unknown, unknown
    return [pytest.param(*c, id=i, marks=[pytest.mark.slow] if i in slow else [])
            for c, i in zip(cases, ids)]


def _launch(cfg, rows, pipelined, **kw):
    extra = {} if isinstance(cfg, str) else {"tp": 1}
    spec = BuildSpec.make(cfg, rows=rows, target="interp", **extra)
    L = index_scoring_launch(spec, chip="sm_90a", **kw)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    # the pipelined halves are off by default (measured slower on the H200): asked for here
    st.pipeline_min_pairs = IndexScore.PIPELINE_MIN_PAIRS if pipelined else None
    # the halves, the alternation and the SS path sum heads with FMAs: so does the plain
    # path they are compared with (Hopper's default is the bf16 head sum, tested below)
    st.head_sum = "fma"
    return L, st


def _same_bits_on_and_off(build, attr, requests, mode, seed, rng_seed, built=None, value=True,
                          off=False):
    """Run the launch `build()` returns ((L, its IndexScore)) with the stage's `attr` on
    (`value`) and `off` on the same inputs: each within the float64 checks
    (test_index.check_launch), and the scores and first-digit histograms bit-identical.
    `built(L, on)` checks the kernel built."""
    out = {}
    for on in (True, False):
        L, st = build()
        setattr(st, attr, value if on else off)
        if built is not None:
            built(L, on)
        inp = make_inputs(st.p, np.random.default_rng(rng_seed), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=seed)
        check_launch(L, inp, res)
        out[on] = (res.regions["scores"].view(np.uint32).copy(),
                   res.regions["score_hist"].copy())
    assert np.array_equal(out[True][0], out[False][0]), f"{attr}: scores differ"
    assert np.array_equal(out[True][1], out[False][1]), f"{attr}: histograms differ"


def _wgmma_atoms(L):
    return sorted({op.attrs["atom"].n for op in L.kernel("interp", 32).walk()
                   if op.opcode == "wgmma"})


TINY32 = replace(TINY, name="tiny32", index_heads=32, q_lora_rank=128, hidden=256)

CASES = [
    ("tiny", [(8, 700)], "random"),                 # one group of 8 rows: every step pipelined
    ("tiny", [(7, 1500), (1, 64)], "inorder"),      # 7 rows (odd: 4 pairs) + a 1-row group
    ("tiny32", [(8, 120)], "relaxed"),              # 32 heads: the halves are m64n128k32
]


@pytest.mark.parametrize("cfg,requests,mode", _cases(
    CASES, [f"{c[0]}-{c[2]}" for c in CASES],
    slow=("tiny32-relaxed",)))
def test_pipelined_scores_are_bit_identical_to_the_one_chain_path(cfg, requests, mode):
    cfgv = TINY32 if cfg == "tiny32" else "tiny"
    kw = dict(capacity=1024, cache_pages=16, k_splits=1) if cfg == "tiny32" else \
        dict(capacity=CAP, cache_pages=PAGES)
    out = {}
    for pipelined in (True, False):
        L, st = _launch(cfgv, 8, pipelined, **kw)
        p = st.p
        wide, half = 2 * p.pairs * p.heads_pad, p.pairs * p.heads_pad
        atoms = _wgmma_atoms(L)
        # the path under test is the one built: halves when pipelined, one chain otherwise
        assert (half in atoms) == pipelined and (wide in atoms) != pipelined, atoms
        inp = make_inputs(p, np.random.default_rng(3 + len(requests)), requests,
                          cache_pages=kw["cache_pages"])
        res = _run(L, inp, mode=mode, seed=7)
        check_launch(L, inp, res)  # float64 reference, bounds, histograms, cache
        out[pipelined] = (res.regions["scores"].view(np.uint32).copy(),
                          res.regions["score_hist"].copy())
    assert np.array_equal(out[True][0], out[False][0]), "scores differ from the one-chain path"
    assert np.array_equal(out[True][1], out[False][1]), "histograms differ"


def test_fewer_rows_keep_the_one_chain_path():
    """4 rows (2 pairs): halves would be N = 2 x heads chains, at the narrow rate: not split."""
    L, st = _launch("tiny", 4, True, capacity=CAP, cache_pages=PAGES)
    assert 2 * st.p.pairs * st.p.heads_pad in _wgmma_atoms(L)
    assert st._half_atom() is None


# ------------------------------------------------------ the alternating one-pair pipeline

ONE_PAIR_CASES = [
    ([(2, 700)], "random"),                 # one request of 2 rows: 11 steps, ring wraps
    ([(1, 1500), (1, 63)], "inorder"),      # two 1-row groups: a long and a one-step one
    ([(2, 130)], "relaxed"),                # fewer steps than a ring's turn
]


@pytest.mark.parametrize("requests,mode", ONE_PAIR_CASES, ids=[c[1] for c in ONE_PAIR_CASES])
def test_one_pair_alternating_scores_are_bit_identical_to_chain_wait_epilogue(requests, mode):
    """Rows 2 (one pair): step s's chain issued before step s-1's epilogue
    (`_pipeline_alternate`, its result carried through a variable, the keys from a ring of
    ALT_SLOTS steps) gives the same bits as chain, wait, epilogue, within the float64 checks."""
    def built(L, alternate):  # the path under test is the one built
        chains = sum(op.opcode == "wgmma" for op in L.kernel("interp", 32).walk()) // 4
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        assert chains == (ALT_SLOTS if alternate else DEPTH * st.narrow_pages), chains
    _same_bits_on_and_off(lambda: _launch("tiny", 2, False, capacity=CAP, cache_pages=PAGES),
                          "alternate_one_pair", requests, mode, 5, 11 + len(requests), built)


def test_sm90a_one_pair_alternating_ptx():
    """The rows-2 build's loop with the alternating pipeline: wait(0), then the next chain (fence, 4 wgmmas, commit) before
    the previous step's epilogue, ALT_SLOTS steps unrolled; nothing touches an in-flight
    accumulator or A operand; ptxas (where installed) neither serializes nor spills."""
    from monokernel.build import build_many
    L = index_scoring_launch(BuildSpec.make("glm5", rows=2, target="sm_90a"))
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.alternate_one_pair = True  # off by default (measured slower): asked for here
    (art,) = build_many([L.kernel("sm_90a")])
    ptx = art.data.decode()
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3") == 4 * ALT_SLOTS
    check_wgmma_schedule(ptx, " ".join(["W F M M M M C"] * ALT_SLOTS), r"mma_async")


# ------------------------------------------------------ keys in shared memory (ss_keys)

SS_CASES = [
    (8, 4, [(8, 2045)], "inorder"),           # one warpgroup: all 4 pairs a chain, 32 pages
    (8, 8, [(8, 2045)], "inorder"),           # two warpgroups: 2 pairs each on one page
    (8, 8, [(7, 1500), (1, 64)], "relaxed"),  # odd group (4 pairs) + a 1-row group (a page a wg)
    (8, 8, [(2, 700), (2, 650), (2, 129), (2, 64)], "random"),  # W2-like: one-pair groups
    (4, 8, [(4, 700)], "random"),             # 2 pairs, one a warpgroup
    (4, 4, [(1, 1), (3, 130)], "random"),     # a one-key group, a short one
    (2, 8, [(2, 1000)], "relaxed"),           # rows 2: a page a warpgroup
]


@pytest.mark.parametrize("rows,waves,requests,mode", _cases(
    SS_CASES, [f"r{c[0]}w{c[1]}-{c[3]}" for c in SS_CASES],
    slow=("r8w8-inorder", "r8w8-relaxed", "r8w8-random")))
def test_keys_in_shared_memory_score_as_the_register_path(rows, waves, requests, mode):
    """IndexScore.ss_keys: keys staged in shared memory for the SS wgmma (two slots, one CTA
    barrier a step), each warpgroup's chain overlapped with its previous step's epilogue;
    groups of all the plan's pairs split the pairs over the warpgroups, one-pair groups
    take a page a warpgroup. Within the float64 checks of test_index, and within f32
    rounding of the register path (the K chunks are summed in another order); the
    interpreter reports a wave reading a slot another wave already refilled (it did: the
    key scales are now read right after the barrier that publishes them)."""
    out = {}
    for ss in (True, False):
        L, st = _launch("tiny", rows, False, capacity=CAP, cache_pages=PAGES, waves=waves)
        st.ss_keys = ss
        n_ss = sum(op.opcode == "wgmma" and op.attrs["atom"].a_smem is not None
                   for op in L.kernel("interp", 32).walk())
        assert (n_ss > 0) == ss, n_ss  # the path under test is the one built
        inp = make_inputs(st.p, np.random.default_rng(3 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=7)
        check_launch(L, inp, res)
        out[ss] = res.regions["scores"].astype(np.float64)
    both = ~np.isnan(out[True]) & ~np.isnan(out[False])
    assert np.array_equal(np.isnan(out[True]), np.isnan(out[False]))
    scale = np.abs(out[False][both]).max()
    assert np.abs(out[True][both] - out[False][both]).max() <= 1e-5 * scale


@pytest.mark.parametrize("kind,rows,n", [("index_scoring", 8, 128), ("index", 8, 128),
                                         ("index", 4, 64), ("index_scoring", 2, 64)])
def test_sm90a_keys_in_shared_memory_ptx(kind, rows, n):
    """glm5 builds with ss_keys: SS wgmmas (A and B descriptors; N = 128 at 8 rows: two
    warpgroups, two pairs each; N = 64 for one-pair groups), only wait(0), no in-flight
    register touched, and ptxas (where installed) neither serializes nor spills (the fused
    kernel at 8 rows did, before the SS descriptors were built in the loop from one opaque
    value each)."""
    from monokernel.build import build_many
    from stages.index import index_launch
    mk = index_scoring_launch if kind == "index_scoring" else index_launch
    L = mk(BuildSpec.make("glm5", rows=rows, target="sm_90a"))
    next(s for s in L.stages if isinstance(s, IndexScore)).ss_keys = True
    (art,) = build_many([L.kernel("sm_90a")])
    ptx = art.data.decode()
    ss = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n%dk32\.f32\.e4m3\.e4m3 \{[^}]*\}, %%rd"
                    % n, ptx)
    assert len(ss) >= 2 * 4, len(ss)  # two steps unrolled, 4 K chunks
    check_wgmma_schedule(ptx, "F M M M M C", r"mma_async\S*m64n%d" % n)


# ------------------------------------------------------------ interpreter: pending in a variable

def _carried_kernel(read_early: bool):
    """A wgmma result set into a variable in one loop iteration, read through it in the next
    after (or, `read_early`, before) the wait that retires it."""
    from monokernel.atoms import atom
    from monokernel.dsl import build_kernel
    from monokernel.proofs import mma
    at = atom("sm90_wgmma_m64n64k32_e4m3")

    def body(k):
        a = k.args
        lane = k.wave_id() * k.L + k.lane_id()
        A, C, desc = mma.wg_operands(k, at)
        acc = k.lane_var(C)
        for it in k.range(2):
            with k.if_(it.eq(1)):
                if not read_early:
                    k.wgmma_wait(0)
                D = acc.get()
                for s in range(at.c_slots):
                    k.store(a.d, k.load(a.c_idx, lane * at.c_slots + s, mma.i32), D[s])
            with k.if_(it.eq(0)):
                k.wgmma_fence()
                acc.set(k.wgmma(at, A, desc, acc.get()))
                k.wgmma_commit()
        k.wgmma_wait(0)
    return build_kernel("carried", body, abi=mma.abi(at), target="interp", waves=4,
                        wave_size=32), at


def test_pending_result_through_a_variable_reads_after_its_wait():
    from monokernel.proofs import mma
    rng = np.random.default_rng(0)
    kern, at = _carried_kernel(read_early=False)
    inp = mma.make_inputs(rng, at.name)
    ref = mma.reference(inp, at.name)
    interp.run(kern, inp, grid=1, mode="random", seed=1)
    assert mma.check(inp, ref, at.name) <= mma.tolerance(at.name)


def test_pending_result_through_a_variable_read_before_its_wait_is_an_error():
    from monokernel.proofs import mma
    kern, at = _carried_kernel(read_early=True)
    with pytest.raises(interp.InterpError, match="read before wgmma_wait"):
        interp.run(kern, mma.make_inputs(np.random.default_rng(0), at.name), grid=1)


# ------------------------------------------------------------------------------ sm_90a PTX

_REG = re.compile(r"%[a-z]+\d+")


def inflight_violations(ptx: str) -> list:
    """Instructions other than wgmma.mma_async that read or write a register that is the
    accumulator or A operand of a wgmma whose commit group no wait_group has retired yet
    (forward dataflow over the PTX's control-flow graph; states merged by union, the
    pending groups aligned at the newest)."""
    lines = [s.strip() for s in ptx.splitlines()]
    lines = [s for s in lines if s and not s.startswith("//") and not s.startswith(".reg")]
    m = re.search(r"\.branchtargets([^;]*);", ptx)
    brx = re.findall(r"\$L__\w+", m.group(1)) if m else []
    blocks, order = {"": []}, [""]
    for s in lines:
        lab = re.match(r"^(\$L__\w+):$", s)
        if lab:
            order.append(lab.group(1))
            blocks[lab.group(1)] = []
            continue
        blocks[order[-1]].append(s)
        if re.search(r"\b(bra|brx)(\.\w+)*\s", s):  # a branch ends a block
            order.append(f"#{len(order)}")
            blocks[order[-1]] = []
    succ = {}
    for i, b in enumerate(order):
        out, fall = [], True
        for s in blocks[b]:
            t = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", s)
            if t:
                out.append(t.group(1))
                fall = fall and s.startswith("@")
            if "brx.idx" in s:
                out += brx
            if s.startswith(("ret", "exit")):
                fall = False
        succ[b] = out + ([order[i + 1]] if fall and i + 1 < len(order) else [])

    def run(state, b, report):
        groups, open_ = state
        for s in blocks[b]:
            if "wgmma.mma_async" in s:
                # D's registers, then A's ({...}: registers; an SS wgmma's A is a descriptor)
                d, a = re.search(r"wgmma\.mma_async[^{]*\{([^}]*)\},\s*(\{[^}]*\}|%rd\d+)", s).groups()
                open_ = open_ | set(_REG.findall(d)) | (set(_REG.findall(a)) if a[0] == "{" else set())
            elif "wgmma.commit_group" in s:
                groups, open_ = groups + (frozenset(open_),), frozenset()
            elif "wgmma.wait_group" in s:
                n = int(re.search(r"wait_group\.sync\.aligned\s+(\d+)", s).group(1))
                groups = groups[-n:] if n else ()
            elif "wgmma.fence" not in s:
                busy = set(open_).union(*groups)
                hit = busy & set(_REG.findall(s))
                if hit and report is not None:
                    report.append((b, s, sorted(hit)))
        return groups, frozenset(open_)

    def merge(x, y):
        if x is None:
            return y
        n = max(len(x[0]), len(y[0]))
        gx = (frozenset(),) * (n - len(x[0])) + x[0]
        gy = (frozenset(),) * (n - len(y[0])) + y[0]
        return tuple(p | q for p, q in zip(gx, gy)), x[1] | y[1]

    state = {b: None for b in order}
    state[""] = ((), frozenset())
    work = [""]
    while work:
        b = work.pop()
        out = run(state[b], b, None)
        for t in succ[b]:
            new = merge(state[t], out)
            if new != state[t]:
                state[t] = new
                work.append(t)
    report = []
    for b in order:
        if state[b] is not None:
            run(state[b], b, report)
    return report


@pytest.fixture(scope="module")
def ptx_r8():
    from monokernel.build import build_many
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.pipeline_min_pairs = IndexScore.PIPELINE_MIN_PAIRS  # off by default: asked for here
    # on the plain plan: the pipelined chains (measured slower, off) with share_pages (the
    # sm_90a default) spill 172 bytes (ptxas 13); this test is of the pipeline's schedule
    st.share_pages = False
    (art,) = build_many([L.kernel("sm_90a")])
    return art.data.decode()


def test_checker_sees_an_accumulator_read_before_its_wait(ptx_r8):
    """The checker itself: a copy of an accumulator right after a commit is reported."""
    i = ptx_r8.index("wgmma.commit_group.sync.aligned;")
    acc = _REG.findall(ptx_r8[:i].rsplit("wgmma.mma_async", 1)[1].split("}")[0])[0]
    bad = ptx_r8[:i] + f"wgmma.commit_group.sync.aligned;\n\tmov.b32 \t%r0, {acc};" + \
        ptx_r8[i + len("wgmma.commit_group.sync.aligned;"):]
    assert inflight_violations(bad)


def test_sm90a_pipelined_ptx(ptx_r8):
    ptx = ptx_r8
    # glm5: 32 heads, 8 rows: the halves are m64n128k32 (4 K-chunks a chain); the prologue
    # has none, the loop body 2 steps x 2 halves x 4 chunks; the narrow chains stay m64n64
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3") == 16
    assert "m64n256k32" not in ptx
    # per step: wait 0 | fence, 4 wgmma (A), commit | wait 0 | fence, 4 wgmma (B), commit
    check_wgmma_schedule(ptx, " ".join(["W F M M M M C"] * 4), r"mma_async\S*m64n128")


def check_wgmma_schedule(ptx: str, pattern: str, mma: str):
    """A software-pipelined wgmma loop's PTX: only wait(0) (module doc); the sequence of
    waits (W), fences (F), wgmmas matching `mma` (M) and commits (C) holds `pattern`; no
    instruction touches an in-flight wgmma's registers; ptxas (where installed) neither
    serializes the wgmmas (advisory C7514) nor spills."""
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx
    seq = re.findall(r"wgmma\.(wait_group\.sync\.aligned \d|fence|commit_group|" + mma + ")", ptx)
    s = " ".join("W" if x.startswith("wait") else "F" if x == "fence" else "C"
                 if x == "commit_group" else "M" for x in seq)
    assert pattern in s, s
    bad = inflight_violations(ptx)
    assert not bad, bad[:5]
    report = ptxas_report(ptx)
    if report is not None:
        assert "C7514" not in report and "serialized" not in report, report
        assert "0 bytes spill stores" in report, report


# ------------------------------------------------ block-table entries loaded a ring ahead

PREFETCH_CASES = [
    ("sm_90a", 8, [(8, 700)], "random"),            # all pairs in one chain, many steps
    ("sm_90a", 2, [(1, 1500), (1, 63)], "inorder"),  # one-pair groups: a long and a 1-step one
    ("gfx950", 4, [(3, 900), (1, 130)], "relaxed"),  # the MFMA path's 16-key steps
    ("gfx942", 2, [(2, 64)], "random"),              # one page: every lookahead past the end
]


@pytest.mark.parametrize("chip,rows,requests,mode", PREFETCH_CASES,
                         ids=[f"{c[0]}-r{c[1]}-{c[3]}" for c in PREFETCH_CASES])
def test_prefetched_pages_give_the_same_bits(chip, rows, requests, mode):
    """IndexScore.prefetch_pages: the key loop's block-table entries load DEPTH steps before
    the key loads that use them (past the end: the last page again). Within the float64
    checks (a page taken from the wrong step scores the wrong keys) and bit-identical to
    the loop that looks each page up just before its loads, pages shuffled in the table."""
    def build():  # two scoring jobs: each loops over many steps (the default split: 1-2)
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"), chip=chip,
                                 capacity=CAP, cache_pages=PAGES, score_jobs=2)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))
    _same_bits_on_and_off(build, "prefetch_pages", requests, mode, 9, 17 + rows)


NARROW_CASES = [
    (4, [(2, 1500), (1, 130), (1, 63)], "random", "narrow_prefetch", 1),  # one entry ahead
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "relaxed", "narrow_prefetch", True),  # W2
    (4, [(2, 1500), (1, 200), (1, 5)], "random", "narrow_depth", 3),  # a deeper key ring
    (4, [(2, 1500), (1, 130), (1, 63)], "relaxed", "async_keys", True),  # copies into LDS
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "random", "async_keys", True),  # W2
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "relaxed", "late_loads", "narrow"),  # W2
]


@pytest.mark.parametrize("rows,requests,mode,attr,value", _cases(
    NARROW_CASES, [f"r{c[0]}-{c[3]}-{c[4]}-{c[2]}" for c in NARROW_CASES],
    slow=("r8-async_keys-True-random",)))  # async_keys (off) keeps its rows-4 case
def test_one_pair_chains_own_prefetch_and_depth(rows, requests, mode, attr, value):
    """IndexScore.narrow_prefetch / narrow_depth: the one-page steps of groups of fewer
    pairs than the plan (workload W2's requests in a rows-4 / rows-8 build) look their
    block-table entries up 1 or DEPTH steps ahead of their key loads, or keep a deeper key
    ring; within the float64 checks (a page of the wrong step scores the wrong keys) and
    bit-identical to the default loop, pages shuffled in the table, lookaheads past the end
    of short groups."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))
    off = {"narrow_prefetch": False, "async_keys": False, "late_loads": "off"}.get(attr)
    _same_bits_on_and_off(build, attr, requests, mode, 9, 31 + rows, value=value, off=off)


KEY_LOAD_CASES = [
    (8, [(8, 700)], "random", "key_piece", 16),          # the all-pairs chain
    (8, [(2, 700), (2, 700), (2, 130), (2, 64)], "relaxed", "key_piece", 4),  # one-pair chains
    (4, [(2, 900), (1, 130), (1, 63)], "inorder", "key_piece", 16),
    (8, [(8, 700)], "random", "late_loads", "all"),       # every loop refilled after its step
]


@pytest.mark.parametrize("rows,requests,mode,attr,value", _cases(
    KEY_LOAD_CASES, [f"r{c[0]}-{c[3]}-{c[4]}-{c[2]}" for c in KEY_LOAD_CASES],
    slow=["r4-key_piece-16-inorder", "r8-key_piece-4-relaxed", "r8-late_loads-all-random"]))
def test_key_loads_in_pieces_or_late_give_the_same_bits(rows, requests, mode, attr, value):
    """IndexScore.key_piece (the lane's 32 key bytes in loads of 16 or 4 contiguous bytes,
    the queries staged in the same K order) and late_loads "all" (every register pipeline
    refills a ring slot after its step): within the float64 checks and bit-identical to the
    default, pages shuffled in the table (a wrong permutation scores the wrong dot
    products; a slot refilled too early, the wrong keys)."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))
    off = {"key_piece": IndexScore.key_piece, "late_loads": "off"}[attr]
    _same_bits_on_and_off(build, attr, requests, mode, 9, 53 + rows, value=value, off=off)


def test_key_load_tunables_are_checked():
    """A late_loads value it does not know, a key piece of no tiling, and async copies of
    pieces narrower than their 16-byte vectors are errors naming them."""
    for attr, value, match in [("late_loads", "early", "late_loads 'early'"),
                               ("key_piece", 8, "key pieces of 8 bytes")]:
        L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                                 capacity=CAP, cache_pages=PAGES, score_jobs=2)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        setattr(st, attr, value)
        with pytest.raises(ValueError, match=match):
            L.kernel("interp", 32)
    L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                             capacity=CAP, cache_pages=PAGES, score_jobs=2)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.async_keys, st.key_piece = True, 4
    with pytest.raises(ValueError, match="async_keys copies 16-byte vectors"):
        L.kernel("interp", 32)


def test_block_table_prefetch_must_divide_the_ring():
    """A prefetch distance the ring cannot hold (past its depth, or not dividing it) and the
    one-page tunables in a two-pages-a-step build are errors naming what they take."""
    L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                             capacity=CAP, cache_pages=PAGES, score_jobs=2)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.narrow_prefetch = 3
    with pytest.raises(ValueError, match="prefetch 3 steps ahead"):
        L.kernel("interp", 32)
    L, st = _head_sum_launch("tiny", 2, 8, "auto")
    st.narrow_prefetch = 1
    with pytest.raises(ValueError, match="narrow_depth / narrow_prefetch"):
        L.kernel("interp", 32)


# ------------------------------------------------ warpgroups taking turns at the tensor cores

TURN_CASES = [
    (8, [(8, 700)], "random"),               # all pairs in one chain (N = 256 at glm5)
    (8, [(3, 900), (4, 300), (1, 64)], "inorder"),  # groups of fewer pairs: P chains a step
    (2, [(1, 1500), (1, 63)], "random"),     # one-pair groups; a 1-step group: wg 1 idles
    (4, [(4, 64)], "relaxed"),               # one page: warpgroup 1 has no step of its own
]


@pytest.mark.parametrize("rows,requests,mode", _cases(
    TURN_CASES, [f"r{c[0]}-{c[2]}-{len(c[1])}req" for c in TURN_CASES],
    slow=("r8-inorder-3req",)))
def test_warpgroup_turns_give_the_same_bits(rows, requests, mode):
    """IndexScore.turns (two warpgroups alternate their chains through named barriers; a
    warpgroup with fewer steps takes its turns idle): within the float64 checks and
    bit-identical to the plain pipeline; the interpreter reports a turn protocol that
    deadlocks or leaves arrivals behind, so every group shape here also proves it balanced."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=3,
                                 waves=8)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))

    def built(L, turns):
        named = sum(op.opcode == "named_barrier" for op in L.kernel("interp", 32).walk())
        assert (named > 0) == turns, named
    _same_bits_on_and_off(build, "turns", requests, mode, 4, 23 + rows, built)


SPLIT_TURN_CASES = [
    (8, [(8, 700)], "random", 1),                # the all-pairs chain every step
    (8, [(3, 900), (4, 300), (1, 64)], "inorder", 2),  # and groups of fewer pairs between
    (4, [(4, 64)], "relaxed", 3),                # one page: warpgroup 1 idles its 3 turns
]


@pytest.mark.parametrize("rows,requests,mode,split", _cases(
    SPLIT_TURN_CASES, [f"r{c[0]}-{c[2]}-split{c[3]}" for c in SPLIT_TURN_CASES],
    slow=("r8-inorder-split2",)))
def test_split_turns_give_the_same_bits(rows, requests, mode, split):
    """IndexScore.turn_split (the all-pairs chain in two turns, the head sum in a third,
    warpgroup 1 a turn behind): bit-identical to one turn a chain, within the float64
    checks; the interpreter's barrier accounting proves the shifted turns balanced (a
    missing idle turn deadlocks or leaves an arrival behind). Three turns a step: the
    kernel holds more named-barrier ops than with one."""
    counts = {}

    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=3,
                                 waves=8)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.turns = True
        return L, st

    def built(L, on):
        counts[on] = sum(op.opcode == "named_barrier" for op in L.kernel("interp", 32).walk())
    _same_bits_on_and_off(build, "turn_split", requests, mode, 4, 29 + rows, built,
                          value=split, off=None)
    assert counts[True] > counts[False] > 0, counts


@pytest.mark.parametrize("attrs,match", [
    (dict(turn_split=1), "turn_split takes turns"),
    (dict(turns=True, turn_split=4), "turn_split 4; the K chunks of a chain's first turn, 1 .. 3"),
    (dict(turns=True, turn_split=0), "turn_split 0"),
    (dict(turns=True, turn_split=1, sum_mma="sync"), "turn_split takes the head sum on wgmma"),
])
def test_bad_turn_splits_are_refused(attrs, match):
    L = index_scoring_launch(BuildSpec.make("tiny", rows=8, target="interp"), chip="sm_90a",
                             capacity=CAP, cache_pages=PAGES, waves=8)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    for a, v in attrs.items():
        setattr(st, a, v)
    with pytest.raises(ValueError, match=match):
        L.kernel("interp", 32)


def test_turns_refuse_the_other_pipelines():
    spec = BuildSpec.make("tiny", rows=8, target="interp")
    L = index_scoring_launch(spec, chip="sm_90a", capacity=CAP, cache_pages=PAGES, waves=8)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.turns, st.ss_keys = True, True
    with pytest.raises(ValueError, match="turns take the plain pipeline"):
        L.kernel("interp", 32)


def test_a_key_ring_of_no_step_is_refused():
    L, st = _launch("tiny", 8, False, capacity=CAP, cache_pages=PAGES)
    st.depth = 0
    with pytest.raises(ValueError, match="depth 0; the key ring holds at least 1 step"):
        L.kernel("interp", 32)


# ------------------------------------ four warpgroups, each page's pairs split over two

SPLIT_CASES = [
    (8, [(8, 700)], "random"),                       # every step split (N = 2 x 2 x heads)
    (8, [(3, 900), (4, 300), (1, 64)], "inorder"),   # groups of fewer pairs: 4 page streams
    (4, [(4, 1100)], "relaxed"),                     # 2 pairs: one a warpgroup
]


@pytest.mark.parametrize("rows,requests,mode", _cases(
    SPLIT_CASES, [f"r{c[0]}-{c[2]}-{len(c[1])}req" for c in SPLIT_CASES],
    slow=("r8-inorder-3req",)))
def test_split_pairs_on_four_warpgroups_give_the_same_bits(rows, requests, mode):
    """IndexScore.split_pairs (16 warps: two page streams, a page's row pairs split over a
    warpgroup pair, N = pairs x heads each) with a one-step key ring (depth 1, what fits 128
    registers): within the float64 checks and bit-identical to four warpgroups each taking
    its own pages with every pair in one chain (the split build has no such chain)."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2,
                                 waves=16)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.depth = 1
        return L, st

    def built(L, split):  # the all-pairs chain (N = 2 x pairs x heads) only without split
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        wide = 2 * st.p.pairs * st.p.heads_pad
        assert (wide in _wgmma_atoms(L)) != split, _wgmma_atoms(L)
    _same_bits_on_and_off(build, "split_pairs", requests, mode, 6, 29 + rows, built)


def test_sm90a_split_pairs_at_depth_1_fit_128_registers():
    """The split build (16 warps: at most 128 registers a thread) of the glm5 rows-8 scoring:
    the m64n128k32 chains in its PTX, and where ptxas is installed, no spill."""
    from monokernel.build import build_many
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"), waves=16)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.split_pairs, st.depth = True, 1
    (art,) = build_many([L.kernel("sm_90a")])
    ptx = art.data.decode()
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx
    rep = ptxas_report(ptx)
    if rep is not None:
        assert "0 bytes spill stores" in rep, rep


# ------------------------------------ the bf16 head sum on the tensor cores (head_sum "mma")

HEAD_SUM_CASES = [
    ("tiny", 8, 8, [(8, 2043)], "relaxed"),                       # one group: every chain wide
    ("tiny", 8, 8, [(1, 0), (2, 63), (4, 2045), (1, 100)], "random"),  # one-pair chains (FMAs)
    ("tiny", 2, 8, [(2, 1000)], "inorder"),                       # a rows-2 build: FMAs only
    ("tiny32", 8, 8, [(7, 700), (1, 64)], "inorder"),             # 32 heads, an odd group
    ("tiny", 8, 16, [(8, 700)], "random"),                        # 16 warps, pairs split
]


def _head_sum_launch(cfg, rows, waves, head_sum):
    cfg = TINY32 if cfg == "tiny32" else cfg
    extra = {} if isinstance(cfg, str) else {"tp": 1}
    L = index_scoring_launch(BuildSpec.make(cfg, rows=rows, target="interp", **extra),
                             chip="sm_90a", capacity=CAP, cache_pages=PAGES, waves=waves)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.head_sum = head_sum
    if waves == 16:
        st.split_pairs, st.depth = True, 1
    return L, st


@pytest.mark.parametrize("cfg,rows,waves,requests,mode", _cases(
    HEAD_SUM_CASES, [f"{c[0]}-r{c[1]}-w{c[2]}-{c[4]}-{len(c[3])}req" for c in HEAD_SUM_CASES],
    slow=("tiny32-r8-w8-inorder-2req", "tiny-r8-w16-random-1req")))
def test_bf16_head_sum_scores_within_their_precision(cfg, rows, waves, requests, mode):
    """head_sum "mma": relu(q . k) and w rounded to bf16, the head sums of chains of several
    pairs on a bf16 wgmma (FMAs on the same values for one-pair chains): within 1e-5 of the
    float64 reference that models those roundings (test_index.check_launch), within the
    end-to-end bound of the model's float64 scores, first-digit histograms exact; and
    measurably NOT the FMA path's f32 sums (the reference's rounding is not vacuous)."""
    out = {}
    for head_sum in ("mma", "fma"):
        L, st = _head_sum_launch(cfg, rows, waves, head_sum)
        inp = make_inputs(st.p, np.random.default_rng(17 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=4)
        check_launch(L, inp, res)
        out[head_sum] = res.regions["scores"].copy()
        if head_sum == "mma":
            chains = _wgmma_atoms(L)
            sums = sorted({op.attrs["atom"].name for op in L.kernel("interp", 32).walk()
                           if op.opcode == "wgmma" and op.attrs["atom"].k == 16})
            assert sums == (["sm90_wgmma_m64n8k16_bf16"] if st.p.pairs > 1 else []), (chains, sums)
    pos = inp["positions"]
    rel = max(_rel(out["mma"][r, :pos[r] + 1].astype(np.float64),
                   out["fma"][r, :pos[r] + 1].astype(np.float64)) for r in range(rows))
    assert 2.0 ** -14 < rel < 2.0 ** -6, f"max-norm distance of the two head sums: {rel}"


SUM_ACCS_CASES = [
    ("tiny32", 8, 8, [(7, 300), (1, 64)], "inorder", 4),  # 32 heads: two K chunks a row
    ("tiny", 8, 8, [(8, 700)], "relaxed", 3),         # 4 heads: two rows a K chunk
    ("tiny", 8, 16, [(4, 300), (4, 900)], "random", 2),  # 16 warps, pairs split
]


@pytest.mark.parametrize("cfg,rows,waves,requests,mode,naccs", _cases(
    SUM_ACCS_CASES, [f"{c[0]}-r{c[1]}-w{c[2]}-{c[4]}-acc{c[5]}" for c in SUM_ACCS_CASES],
    slow=("tiny32-r8-w8-inorder-acc4", "tiny-r8-w16-random-acc2")))
def test_head_sum_accumulators_give_the_same_bits(cfg, rows, waves, requests, mode, naccs):
    """IndexScore.sum_accs: the head-sum wgmmas spread over independent accumulators (a
    row's K chunks in one of them), added after the wait: scores and histograms bit-identical
    to one accumulator, within the float64 checks; the build issues the same wgmmas."""
    out = {}
    for n in (naccs, 1):
        L, st = _head_sum_launch(cfg, rows, waves, "mma")
        st.sum_accs = n
        inp = make_inputs(st.p, np.random.default_rng(5 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=3)
        check_launch(L, inp, res)
        ops = [op for op in L.kernel("interp", 32).walk() if op.opcode == "wgmma"]
        out[n] = (res.regions["scores"].view(np.uint32).copy(),
                  res.regions["score_hist"].copy(), len(ops))
    assert np.array_equal(out[1][0], out[naccs][0]), "scores differ"
    assert np.array_equal(out[1][1], out[naccs][1]), "histograms differ"
    assert out[1][2] == out[naccs][2], "a different number of wgmmas"


@pytest.mark.parametrize("head_sum,rows,requests,mode", _cases(
    [("mma", 8, [(8, 700)], "relaxed"), ("mma", 4, [(3, 300), (1, 64)], "random"),
     ("fma", 2, [(2, 900)], "inorder")], ["mma-r8", "mma-r4", "fma-r2"],
    slow=("mma-r8",)))
def test_grouped_first_digit_counts_give_the_same_histograms(head_sum, rows, requests, mode):
    """IndexScore.grouped_hist: the stored scores' first digits counted once a distinct digit
    a wave (match_any) give the histograms of a count a lane, bit for bit, with the same
    scores (float64 checks and poison: check_launch)."""
    out = {}
    for on in (True, False):
        L, st = _head_sum_launch("tiny", rows, 8, head_sum)
        st.grouped_hist = on
        inp = make_inputs(st.p, np.random.default_rng(11 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=4)
        check_launch(L, inp, res)
        ops = [op.opcode for op in L.kernel("interp", 32).walk()]
        out[on] = (res.regions["scores"].view(np.uint32).copy(),
                   res.regions["score_hist"].copy(), ops.count("match_any"))
    assert out[True][2] > 0 and out[False][2] == 0, "the grouped count was not built"
    assert out[True][1].any(), "nothing was counted"
    assert np.array_equal(out[True][0], out[False][0]), "scores differ"
    assert np.array_equal(out[True][1], out[False][1]), "histograms differ"


DEFER_CASES = [
    ("tiny", 8, [(8, 700)], "inorder"),                  # one group: every step deferred
    ("tiny", 8, [(7, 700), (1, 64)], "relaxed"),         # an odd group: one-pair chains too
    ("tiny", 4, [(4, 129)], "inorder"),                  # 3 pages: a warpgroup's one step
    ("tiny", 8, [(8, 0)], "random"),                     # one key: a warpgroup with no step
]


@pytest.mark.parametrize("cfg,rows,requests,mode", _cases(
    DEFER_CASES, [f"{c[0]}-r{c[1]}-{c[3]}-{len(c[2])}req" for c in DEFER_CASES],
    slow=("tiny-r8-inorder-1req", "tiny-r8-relaxed-2req")))
def test_deferred_stores_give_the_same_bits(cfg, rows, requests, mode):
    """IndexScore.defer_stores: step t - 1's scores stored while step t's chain runs, the
    last step's after the loop: scores and histograms bit-identical to storing each step's
    own, within the float64 checks (every key scored once: check_launch's poison)."""
    out = {}
    for on in (True, False):
        L, st = _head_sum_launch(cfg, rows, 8, "mma")
        st.defer_stores = on
        inp = make_inputs(st.p, np.random.default_rng(7 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=5)
        check_launch(L, inp, res)
        out[on] = (res.regions["scores"].view(np.uint32).copy(), res.regions["score_hist"].copy(),
                   sum(1 for _ in L.kernel("interp", 32).walk()))
    assert out[True][2] > out[False][2], "the deferred path was not built"
    assert np.array_equal(out[True][0], out[False][0]), "scores differ"
    assert np.array_equal(out[True][1], out[False][1]), "histograms differ"


def test_sm90a_deferred_stores_ptx():
    """glm5 rows 8, defer_stores: no instruction touches a wgmma's registers in flight, and
    (where ptxas is installed) no wait injected: the carried values are the scaled scores
    (an FMA's registers), not the head-sum D's (carrying D drew advisory C7517)."""
    from monokernel.build import build_many
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.defer_stores = True
    (art,) = build_many([L.kernel("sm_90a")])
    ptx = art.data.decode()
    assert not inflight_violations(ptx)
    rep = ptxas_report(ptx)
    if rep is not None:
        assert "C751" not in rep, rep


SYNC_CASES = [
    ("tiny32", 8, [(8, 500)], "inorder", 1),      # 32 heads: two K chunks a row
    ("tiny", 8, [(7, 300), (1, 64)], "relaxed", 2),
    ("tiny", 8, [(8, 700)], "inorder", 1),         # 4 heads: two rows a K chunk
    ("tiny", 4, [(4, 300)], "random", 2),
]


@pytest.mark.parametrize("cfg,rows,requests,mode,naccs", _cases(
    SYNC_CASES, [f"{c[0]}-r{c[1]}-{c[3]}-acc{c[4]}" for c in SYNC_CASES],
    slow=("tiny32-r8-inorder-acc1", "tiny-r8-relaxed-acc2")))
def test_head_sum_on_mma_sync_gives_the_same_bits(cfg, rows, requests, mode, naccs):
    """IndexScore.sum_mma "sync": each warp's mma.sync m16n8k16 on the packed A chunks,
    B fragments read from the staged weights: scores and histograms bit-identical to the
    head-sum wgmmas (the interpreter sums each K chunk the same way), within the float64
    checks; the build issues mma.sync for the sums and no m64n8k16 wgmma."""
    out = {}
    for mm in ("sync", "wgmma"):
        L, st = _head_sum_launch(cfg, rows, 8, "mma")
        st.sum_mma, st.sum_accs = mm, naccs
        inp = make_inputs(st.p, np.random.default_rng(11 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=6)
        check_launch(L, inp, res)
        ops = list(L.kernel("interp", 32).walk())
        sums = sum(1 for op in ops if op.opcode == "wgmma" and op.attrs["atom"].k == 16)
        syncs = sum(1 for op in ops if op.opcode == "mma"
                    and op.attrs["atom"].name == "sm90_mma_m16n8k16_bf16")
        out[mm] = (res.regions["scores"].view(np.uint32).copy(),
                   res.regions["score_hist"].copy(), sums, syncs)
    assert out["sync"][2] == 0 and out["wgmma"][2] > 0
    assert out["sync"][3] - out["wgmma"][3] == out["wgmma"][2], "one mma.sync a K chunk"
    assert np.array_equal(out["sync"][0], out["wgmma"][0]), "scores differ"
    assert np.array_equal(out["sync"][1], out["wgmma"][1]), "histograms differ"


def test_sm90a_head_sum_on_mma_sync_ptx():
    """glm5 rows 8, sum_mma "sync": the sums are mma.sync (no m64n8k16 wgmma) and, where
    ptxas is installed, the scoring builds without spills, the fused index (its group
    maxima's carried registers) within its job loop's allowance, none in a loop."""
    from monokernel.build import build_many
    from stages.index import index_launch
    for make in (index_scoring_launch, index_launch):
        L = make(BuildSpec.make("glm5", rows=8, target="sm_90a"))
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.sum_mma = "sync"
        (art,) = build_many([L.kernel("sm_90a")])
        ptx = art.data.decode()
        assert "m64n8k16" not in ptx and "mma.sync.aligned.m16n8k16.row.col.f32.bf16" in ptx
        assert not inflight_violations(ptx)
        rep = ptxas_report(ptx)
        if rep is not None:
            assert "C751" not in rep, rep
            if make is index_launch:
                check_job_loop_spills(rep, ptx, INDEX_JOB_LOOP_SPILL_BYTES)
            else:
                assert "0 bytes spill stores" in rep, rep


def test_sum_mma_bad_value_is_named():
    L, st = _head_sum_launch("tiny", 8, 8, "mma")
    st.sum_mma = "hmma"
    with pytest.raises(ValueError, match="sum_mma 'hmma'"):
        L.kernel("interp", 32)


def test_head_sum_accumulators_bad_values_are_named():
    for bad in (0, -1, 1.5, True):
        L, st = _head_sum_launch("tiny", 8, 8, "mma")
        st.sum_accs = bad
        with pytest.raises(ValueError, match="sum_accs"):
            L.kernel("interp", 32)


def test_sm90a_head_sum_accumulators_ptx():
    """glm5 rows 8, sum_accs 2 / 4: the head-sum wgmmas write that many distinct accumulators
    a step (the chain is no longer one), nothing touched in flight, and (where ptxas is
    installed) no spill or injected wait."""
    from monokernel.build import build_many
    for naccs in (2, 4):
        L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.sum_accs = naccs
        (art,) = build_many([L.kernel("sm_90a")])
        ptx = art.data.decode()
        dests = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n8k16\.f32\.bf16\.bf16\s+"
                           r"\{([^}]*)\}", ptx)
        assert dests and len({d.replace(" ", "") for d in dests}) >= naccs, dests[:4]
        assert not inflight_violations(ptx)
        rep = ptxas_report(ptx)
        if rep is not None:
            assert "C751" not in rep, rep
            check_job_loop_spills(rep, ptx)  # IndexScore.narrow_prefetch


def test_bf16_head_sum_is_refused_off_hopper_and_bad_values_are_named():
    spec = BuildSpec.make("tiny", rows=4, target="interp")
    L = index_scoring_launch(spec, chip="gfx950", capacity=CAP, cache_pages=PAGES)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.head_sum = "mma"
    with pytest.raises(ValueError, match="head_sum 'mma' is the Hopper"):
        L.kernel("interp", 64)
    st.head_sum = "auto"
    assert not st.bf16_head_sum  # AMD's default: FMAs
    L, st = _head_sum_launch("tiny", 4, 8, "auto")
    assert st.bf16_head_sum  # Hopper's default
    st.ss_keys = True
    assert not st.bf16_head_sum  # ... but not on the measured-slower SS path
    L, st = _head_sum_launch("tiny", 4, 8, "tensor")
    with pytest.raises(ValueError, match="head_sum 'tensor'; one of"):
        L.kernel("interp", 32)
    L, st = _head_sum_launch("tiny", 8, 8, "mma")
    st.alternate_one_pair = True
    st.pipeline_min_pairs = IndexScore.PIPELINE_MIN_PAIRS
    with pytest.raises(ValueError, match="head_sum 'mma' takes the plain"):
        L.kernel("interp", 32)


def test_sm90a_bf16_head_sum_ptx():
    """glm5 rows 8 with the bf16 head sum: the wide chain's relu pairs (cvt.rn.relu.bf16x2)
    feed 16 m64n8k16 bf16 wgmmas a step (K = 256 (row, head) columns) whose registers no
    instruction touches while in flight (inflight_violations); where ptxas is installed, no
    spill at 8 warps and no C7514 / C7517 advisory (a serialized wgmma, a warpgroup.wait
    ptxas injected: v11 saw the latter for stores moved under a chain in flight)."""
    from monokernel.build import build_many
    L = index_scoring_launch(BuildSpec.make("glm5", rows=8, target="sm_90a"))
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.head_sum = "mma"
    (art,) = build_many([L.kernel("sm_90a")])
    ptx = art.data.decode()
    sums = len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n8k16\.f32\.bf16\.bf16", ptx))
    wide = len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n256k32\.f32\.e4m3", ptx))
    assert wide and sums == wide * 2 * st.p.pairs * st.p.heads_pad // 16 // st.t.chunks, \
        (sums, wide)
    assert "cvt.rn.relu.bf16x2.f32" in ptx
    assert not inflight_violations(ptx)
    rep = ptxas_report(ptx)
    if rep is not None:  # no spill in a key loop, no wait ptxas injects, no serialization
        assert "C751" not in rep, rep
        check_job_loop_spills(rep, ptx)  # IndexScore.narrow_prefetch


# ------------------------------------ two pages a step for groups of fewer pairs

TWO_PAGE_CASES = [
    (8, "auto", [(1, 0), (2, 63), (4, 2045), (1, 100)], "random"),  # fewer-pair groups
    (8, "fma", [(2, 1100), (2, 1100), (2, 1100), (2, 1100)], "relaxed"),  # W2's shape
    (2, "auto", [(2, 700)], "inorder"),   # a rows-2 build: odd page counts a warpgroup
    (4, "auto", [(1, 129), (3, 64)], "random"),
]


@pytest.mark.parametrize("rows,head_sum,requests,mode", _cases(
    TWO_PAGE_CASES, [f"r{c[0]}-{c[1]}-{len(c[2])}req-{c[3]}" for c in TWO_PAGE_CASES],
    slow=("r8-fma-4req-relaxed",)))  # rows 8 keep the fewer-pair groups' case
def test_two_pages_a_step_give_the_same_bits(rows, head_sum, requests, mode):
    """IndexScore.pages_per_step = 2 (groups of fewer pairs issue two pages' chains before
    one wait): bit-identical scores and histograms to a page a step, within the float64
    checks; a warpgroup's odd last page is scored once (its second, repeated load masked)."""
    out = {}
    for pps in (2, 1):
        L, st = _head_sum_launch("tiny", rows, 8, head_sum)
        st.pages_per_step = pps
        inp = make_inputs(st.p, np.random.default_rng(41 + rows), requests, cache_pages=PAGES)
        res = _run(L, inp, mode=mode, seed=9)
        check_launch(L, inp, res)
        out[pps] = (res.regions["scores"].view(np.uint32).copy(), res.regions["score_hist"].copy())
    assert np.array_equal(out[1][0], out[2][0]), "scores differ"
    assert np.array_equal(out[1][1], out[2][1]), "histograms differ"


def test_two_pages_a_step_refuse_what_they_do_not_take():
    for attr, val in (("prefetch_pages", True), ("pages_per_step", 3)):
        L, st = _head_sum_launch("tiny", 2, 8, "auto")
        st.pages_per_step = 2
        setattr(st, attr, val)
        with pytest.raises(ValueError, match="pages_per_step"):
            L.kernel("interp", 32)


# ------------------------------------------------ keys through TMA into LDS slots (SS wgmma)

TMA_CASES = [
    (4, [(2, 1500), (1, 130), (1, 63)], "random", dict(tma_slots=2)),     # overlapped, 2 slots
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "relaxed", dict(tma_slots=3)),  # W2
    (2, [(1, 1500), (1, 63)], "inorder", dict(tma_slots=4)),              # every group narrow
    (4, [(2, 1500), (1, 130), (1, 63)], "relaxed", dict(tma_overlap=False)),  # in turn
    (8, [(3, 900), (4, 300), (1, 64)], "random", dict(tma_slots=2)),      # groups of 2 pairs
]


@pytest.mark.parametrize("rows,requests,mode,extra", _cases(
    TMA_CASES, [f"r{c[0]}-{c[2]}-" + "-".join(f"{a}{v}" for a, v in c[3].items())
                for c in TMA_CASES],
    slow=["r8-random-tma_slots2", "r2-inorder-tma_slots4", "r8-relaxed-tma_slots3"]))
def test_keys_through_tma_give_the_same_bits(rows, requests, mode, extra):
    """IndexScore.tma_keys: the narrow groups' pages copied by TMA (keys and scales, 128B
    swizzled) into LDS slots and scored by SS wgmma, with the chain of step s running under
    step s - 1's epilogue (tma_overlap) or in turn; the queries staged in key-byte order.
    Within the float64 checks and bit-identical to the register path, pages shuffled in the
    table, slots reused across several phases, groups shorter than the ring. The register
    path with the fix-up too (cached_new_keys off): TMA's loads are not ordered by ix_nb's
    generic acquire, so the launch's new keys are rescored by the fix-up's f32 dot products
    there, whose bits the key loop's tensor-core sums need not match (one ulp at the 65-key
    row's last key in the r8 case, where the sm_90a default keeps the loop's score)."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.cached_new_keys = False
        for attr, v in extra.items():
            setattr(st, attr, v)
        return L, st
    _same_bits_on_and_off(build, "tma_keys", requests, mode, 9, 71 + rows)


def test_tma_keys_are_checked():
    """tma_keys with two pages a step or async copies, and a ring of no or too many slots,
    are errors naming them; the build declares the cache's tensor map, derived by the
    launchers (not an argument a caller passes)."""
    def launch(**kw):
        L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                                 capacity=CAP, cache_pages=PAGES, score_jobs=2)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        st.tma_keys = True
        for a, v in kw.items():
            setattr(st, a, v)
        return L
    for kw, match in [(dict(pages_per_step=2), "tma_keys takes the one-page steps"),
                      (dict(async_keys=True), "tma_keys takes the one-page steps"),
                      (dict(tma_slots=1), "tma_slots 1"), (dict(tma_slots=9), "tma_slots 9")]:
        with pytest.raises(ValueError, match=match):
            launch(**kw).kernel("interp", 32)
    from monokernel.ir import TensorMap
    kern = launch().kernel("interp", 32)
    tm = kern.abi[IndexScore.TMA_MAP].kind
    assert isinstance(tm, TensorMap) and (tm.of, tm.row_bytes, tm.swizzle) == ("index_cache", 128, 128)


# ------------------------------------------------ key pages warmed in the L2 ahead of the ring

def _pages_warmed(build, attr, value, rows, requests, mode, rng_seed):
    """Run `build()`'s launch with its IndexScore's `attr` = value and check its L2
    prefetches: every byte in the index cache (the interpreter faults on a range outside its
    buffer), every page asked for whole (four warps' quarters: a page offset in words, or a
    warp's share misplaced, leaves bytes unasked or asks another page's), every page one some
    row reads. Returns (launch, stage, warmed pages, read pages, block table)."""
    L, st = build()
    setattr(st, attr, value)
    inp = make_inputs(st.p, np.random.default_rng(rng_seed), requests, cache_pages=PAGES)
    seen = {}
    L.run_interp({n: v.copy() if isinstance(v, np.ndarray) else v for n, v in inp.items()},
                 step=0, mode=mode, seed=9, prefetched=seen)
    assert set(seen) == {"index_cache"}, set(seen)
    per_page = seen["index_cache"].reshape(PAGES, -1)
    warmed = np.flatnonzero(per_page.any(axis=1))
    assert (per_page[warmed] > 0).all(), "a warmed page asked for in part"
    pos, bt = inp["positions"], inp["block_table"]
    read = {int(bt[r, i]) for r in range(rows) for i in range(int(pos[r]) // 64 + 1)}
    warmed = set(warmed.tolist())
    assert warmed <= read, sorted(warmed - read)
    return L, st, warmed, read, bt


L2_AHEAD_CASES = [
    (8, [(8, 1500)], "random", 2),                        # the all-pairs chain
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "relaxed", 3),  # W2: one-pair chains
    (2, [(1, 1500), (1, 63)], "inorder", 1),              # rows 2: two pages a step
]


@pytest.mark.parametrize("rows,requests,mode,ahead", L2_AHEAD_CASES,
                         ids=[f"r{c[0]}-{c[2]}-ahead{c[3]}" for c in L2_AHEAD_CASES])
def test_l2_ahead_warms_the_pages_the_loops_read(rows, requests, mode, ahead):
    """IndexScore.l2_ahead: the register-key loops ask the L2 for whole pages a few steps
    before their loads. The scores and histograms are bit-identical to the loop without it
    (a hint changes no value), every prefetched byte lies in the index cache (the
    interpreter faults on a range outside its buffer), every warmed page is a page some row
    reads, asked for whole (four warps' quarters: a page offset in words, or a warp's share
    misplaced, leaves bytes unasked or asks another page's), and the warmed pages cover the
    read pages but the first `depth` steps of each key loop."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))
    _same_bits_on_and_off(build, "l2_ahead", requests, mode, 9, 61 + rows, value=ahead, off=0)
    L, st, warmed, read, _ = _pages_warmed(build, "l2_ahead", ahead, rows, requests, mode,
                                           61 + rows)
    # a loop a (scoring job, request, warpgroup): its first DEPTH steps are loaded unwarmed
    loops = st.p.score_jobs * len(requests) * (L.waves // 4)
    pages_per_step = 2 if rows == 2 else 1
    assert len(warmed) >= len(read) - loops * DEPTH * pages_per_step, (len(warmed), len(read))


def test_l2_ahead_is_checked():
    """A negative or non-integer l2_ahead is an error naming it."""
    for bad in (-1, 1.5, True):
        L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                                 capacity=CAP, cache_pages=PAGES, score_jobs=2)
        next(s for s in L.stages if isinstance(s, IndexScore)).l2_ahead = bad
        with pytest.raises(ValueError, match=f"l2_ahead {bad!r}"):
            L.kernel("interp", 32)


E4M3_NAN_BYTE = 0x7F  # S.1111.111: e4m3fn's NaN

QUERY_RECORD_CASES = [
    (8, [(8, 700)], "random", {}),                                   # R + 1 = 9 columns a head
    (2, [(1, 1500), (1, 63)], "inorder", {}),                       # one pair, odd groups
    (4, [(2, 1500), (1, 130), (1, 63)], "relaxed", dict(tma_keys=True)),  # both B layouts
    (8, [(8, 300)], "inorder", dict(cfg=TINY32)),  # GLM's 32 heads: no padding, 2 rounds
]


@pytest.mark.parametrize("rows,requests,mode,extra", _cases(
    QUERY_RECORD_CASES, [f"r{c[0]}-{c[2]}" + "".join(f"-{a}" for a in c[3] if a != "cfg")
                         + ("-32heads" if "cfg" in c[3] else "") for c in QUERY_RECORD_CASES]))
def test_query_records_give_the_same_bits(rows, requests, mode, extra, monkeypatch):
    """IndexScore.query_records (the queries staged into wgmma B a (head, row) record a
    thread, by 16-byte loads, each core-matrix row assembled in registers; the blank
    columns zeroed apart): bit-identical to the word-by-word staging and within the float64
    checks, tiny's padding heads and the odd groups' zero row included, and with tma_keys the
    key-byte-order copy staged from the same loads. LDS starts as e4m3 NaNs here (on
    hardware it holds an earlier job's bytes): a blank column left unwritten makes its
    products NaN, which the head sum's zero weights do not cancel."""
    monkeypatch.setattr(interp, "LDS_POISON", E4M3_NAN_BYTE)
    extra = dict(extra)
    cfg = extra.pop("cfg", "tiny")

    def build():
        spec = BuildSpec.make(cfg, rows=rows, target="interp",
                              **({} if isinstance(cfg, str) else {"tp": 1}))
        L = index_scoring_launch(spec, chip="sm_90a", capacity=CAP, cache_pages=PAGES,
                                 score_jobs=2)
        st = next(s for s in L.stages if isinstance(s, IndexScore))
        # tiny pads its 4 heads (blank columns); 32 heads x 8 rows take the 128 threads twice
        assert (st.p.heads < st.p.heads_pad) == (cfg == "tiny"), (st.p.heads, st.p.heads_pad)
        assert cfg == "tiny" or st.p.heads * rows > L.waves * 32
        for attr, v in extra.items():
            setattr(st, attr, v)
        return L, st
    _same_bits_on_and_off(build, "query_records", requests, mode, 7, 41 + rows)


def test_record_parts_split_stores_by_shared_loads():
    """_record_parts: stores reading words of a common 16-byte load share a part (the
    tiling's permutation puts words j, j + 8, j + 16, j + 24 in one B row, so a record's
    rows fall in two parts); a layout in record order adds no part; a store reading every
    load makes one part."""
    perm_words = [(w % 4) * 8 + w // 4 for w in range(32)]  # B word -> record word
    rows = [perm_words[4 * r:4 * r + 4] for r in range(8)]
    parts = _record_parts([rows], 4)
    assert [[r for _, r, _ in part] for part in parts] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    ordered = [list(range(4 * r, 4 * r + 4)) for r in range(8)]
    assert len(_record_parts([rows, ordered], 4)) == 2
    assert len(_record_parts([ordered], 4)) == 8
    assert len(_record_parts([rows + [[0, 4, 8, 12]]], 4)) == 1


WARM_FIRST_CASES = [
    (8, [(8, 1500)], "random", 4),                                # the all-pairs chain
    (8, [(2, 700), (2, 700), (2, 700), (2, 65)], "relaxed", 2),  # W2: shared pages
    (2, [(1, 1500), (1, 63)], "inorder", 32),                     # more than a group's pages
]


@pytest.mark.parametrize("rows,requests,mode,pages", WARM_FIRST_CASES,
                         ids=[f"r{c[0]}-{c[2]}-warm{c[3]}" for c in WARM_FIRST_CASES])
def test_warm_first_asks_for_the_first_pages_read(rows, requests, mode, pages):
    """IndexScore.warm_first: before the queries' wait each scored entry's first pages are
    asked of the L2. Bit-identical to the kernel without it (a hint changes no value), every
    warmed page asked for whole and read by some row, and every row's first page among
    them (the first page a job scores of each entry is warmed)."""
    def build():
        L = index_scoring_launch(BuildSpec.make("tiny", rows=rows, target="interp"),
                                 chip="sm_90a", capacity=CAP, cache_pages=PAGES, score_jobs=2)
        return L, next(s for s in L.stages if isinstance(s, IndexScore))
    _same_bits_on_and_off(build, "warm_first", requests, mode, 9, 67 + rows, value=pages,
                          off=0)
    *_, warmed, _, bt = _pages_warmed(build, "warm_first", pages, rows, requests, mode,
                                      67 + rows)
    assert {int(bt[r, 0]) for r in range(rows)} <= warmed


@pytest.mark.parametrize("pages", [-1, 33, True, 2.0])
def test_bad_warm_first_is_refused(pages):
    L = index_scoring_launch(BuildSpec.make("tiny", rows=4, target="interp"), chip="sm_90a",
                             capacity=CAP, cache_pages=PAGES)
    st = next(s for s in L.stages if isinstance(s, IndexScore))
    st.warm_first = pages
    with pytest.raises(ValueError, match=f"warm_first {pages!r}; pages an entry, 0 .. 32"):
        L.kernel("interp", 32)
