"""Check the exact top-k selection on injected score distributions; dump output digests.

    python -m tools.check_topk [--config tiny] [--pos P1,P2,...] [--rows 2,4,8]
                               [--dist normal,ties,allequal,...] [--backend interp|cuda|hip]
                               [--chip gfx950] [--mode inorder|...|acquire_only] [--seed 0]
                               [--first-digits local|buffer|stage] [--max-slices S]
                               [--waves W] [--grid G] [--dump DIR]
                               [--through select|index] [--workload W1,W2]

For every rows R (--rows) it builds the `select` launch (stages/select.py) of the config for
the backend's target, and for every context position P (--pos) and distribution (--dist)
runs it on injected scores: the R rows of one request at consecutive positions (row j of R
sees keys 0 .. P - R + j), a shared block table of distinct random pages, positions past a
row's keys filled with +inf (a read past the bound would be selected). All (P, dist) cases of
one R run on ONE never-reset arena, one step each.

Each row's output is checked against an exact top-k computed by independent code
(layouts.scores.exact_topk_positions: a float64 sort by (-score, position), sharing nothing
with the kernel's key mapping): the same set, in ascending token position, as physical slots
page*64 + offset, -1 padding to K, and the diagnostic words (NaNs, keys selected, keys -inf
or NaN, visible keys).

Distributions (each row drawn separately):
    normal     standard normal
    few        five distinct values: ties everywhere (alias: ties)
    allequal   every key the same value
    above2047, above2048, above2049
               exactly 2047 / 2048 / 2049 distinct keys above a tie of all the others
               (1.0; a quarter of the rest below it)
    neginf     long runs of -inf (about 3/4 of the keys), normal elsewhere
    fewsel     all -inf but 100 keys (fewer selectable keys than K)
    nan        NaNs (several payloads, sign set or not) at random and in a run, normal elsewhere
    zeros      -0.0 / +0.0 / the smallest denormals: -0.0 == +0.0, ties by position
    extreme    +-inf, NaN, +-FLT_MAX, denormals, +-0 and normals mixed

`--through index` checks the selection end to end instead: launch kind `index` (front +
indexer + selection in one kernel) runs on its own seeded inputs with the request's last row
at each --pos (workloads --workload W1,W2), and each row's top-k is checked the same way
against an exact top-k of the scores the kernel itself wrote (its `scores` region): --dist
does not apply there (the scores are the indexer's), digests go to DIR/<config>/r<R>/index.json.

Digests: DIR/<config>/r<R>/select.json in check_layer's format ({"format":
"monokernel-digests/1", "launches": [{"launch", "digests": {"output/topk": sha256, ...}}]},
one launch record per (P, dist)), so two dumps compare with
`python -m tools.check_layer --compare A B` (e.g. --first-digits local against stage: the
same digests). Exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from layouts.scores import TOPK, exact_topk_positions
from monokernel.interp import MODES

FORMAT = "monokernel-digests/1"
F32_MAX = np.finfo(np.float32).max
DENORM = np.float32(1e-45)
# --through index default positions: a row within its first page, and a row with one key
# more than it selects (the interpreter's index cache holds a little over TOPK keys)
INDEX_POS = [64, TOPK + 1]


# ----------------------------------------------------------------------------- distributions

def _normal(rng, n, k):
    return rng.standard_normal(n).astype(np.float32)


def _few(rng, n, k):
    return (rng.integers(0, 5, n) * 0.5 - 1.0).astype(np.float32)


def _allequal(rng, n, k):
    return np.full(n, 0.75, np.float32)


def _above(m):
    def f(rng, n, k):
        s = np.ones(n, np.float32)
        below = rng.random(n) < 0.25
        s[below] = rng.random(int(below.sum())).astype(np.float32) * 0.5
        idx = rng.choice(n, min(m, n), replace=False)
        s[idx] = 2.0 + np.arange(idx.size, dtype=np.float32) / 4096  # distinct, above 1
        s[idx] = rng.permutation(s[idx])
        return s
    f.__name__ = f"above{m}"
    return f


def _neginf(rng, n, k):
    s = rng.standard_normal(n).astype(np.float32)
    covered = 0
    while covered < 3 * n // 4:
        a = int(rng.integers(0, n))
        ln = int(rng.integers(1, max(2, n // 6)))
        s[a:a + ln] = -np.inf
        covered = int(np.isneginf(s).sum())
    return s


def _fewsel(rng, n, k):
    s = np.full(n, -np.inf, np.float32)
    idx = rng.choice(n, min(100, n), replace=False)
    s[idx] = rng.standard_normal(idx.size).astype(np.float32)
    return s


NANS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FFFFFFF],
                np.uint32).view(np.float32)


def _nan(rng, n, k):
    s = rng.standard_normal(n).astype(np.float32)
    m = rng.random(n) < 0.2
    s[m] = rng.choice(NANS, int(m.sum()))
    a = int(rng.integers(0, n))
    s[a:a + n // 5] = NANS[0]
    return s


def _zeros(rng, n, k):
    vals = np.array([0.0, -0.0, DENORM, -DENORM, 2 * DENORM], np.float32)
    return rng.choice(vals, n).astype(np.float32)


def _extreme(rng, n, k):
    vals = np.array([np.inf, -np.inf, np.nan, F32_MAX, -F32_MAX, DENORM, -DENORM, 0.0, -0.0,
                     1.0, -1.0, np.float32(1.17549435e-38)], np.float32)
    s = rng.standard_normal(n).astype(np.float32)
    m = rng.random(n) < 0.5
    s[m] = rng.choice(vals, int(m.sum()))
    return s


DISTS = {f.__name__.lstrip("_"): f for f in (
    _normal, _few, _allequal, _above(2047), _above(2048), _above(2049), _neginf, _fewsel, _nan,
    _zeros, _extreme)}


def scores_for(dist: str, rng, n_keys, capacity: int, k: int = TOPK) -> np.ndarray:
    """[rows, capacity] f32: each row's first n_keys[r] scores from the distribution, the
    rest +inf (never to be read)."""
    f = DISTS[dist]
    out = np.full((len(n_keys), capacity), np.inf, np.float32)
    for r, n in enumerate(n_keys):
        if int(n) > 0:
            out[r, :int(n)] = f(rng, int(n), k)
    return out


# ----------------------------------------------------------------------------- checking

def check_rows(scores, n_keys, block_table, out, diag, k: int = TOPK) -> list[str]:
    """Problems of a selection against layouts.scores.exact_topk_positions (empty: exact)."""
    from stages.select import PAGE
    problems = []
    for r in range(len(n_keys)):
        n = int(n_keys[r])
        row = scores[r, :n]
        want = exact_topk_positions(row, k)
        bt = np.asarray(block_table[r], np.int64)
        want_slots = bt[want // PAGE] * PAGE + want % PAGE
        got = np.asarray(out[r], np.int64)
        cnt = int((got != -1).sum())
        live = got[:want.size]
        tag = f"row {r} (n={n})"
        if not np.array_equal(live, want_slots) or (got[want.size:] != -1).any():
            inv = {int(s): i for i, s in enumerate(bt)}
            pos = np.array([inv.get(int(s) // PAGE, -10**9) * PAGE + int(s) % PAGE
                            for s in got if s >= 0], np.int64)
            extra = np.setdiff1d(pos, want)
            missing = np.setdiff1d(want, pos)
            order = bool((np.diff(pos) > 0).all()) if pos.size > 1 else True
            problems.append(f"{tag}: {cnt} slots vs {want.size} expected; {missing.size} "
                            f"missing (first {missing[:5].tolist()}), {extra.size} extra (first "
                            f"{extra[:5].tolist()}); ascending {order}; padding ok "
                            f"{bool((got[cnt:] == -1).all())}")
        nans = int(np.isnan(row).sum())
        want_diag = (nans, want.size, int((np.isnan(row) | np.isneginf(row)).sum()), n)
        got_diag = tuple(int(x) for x in diag[r])
        if got_diag != want_diag:
            problems.append(f"{tag}: diagnostic (NaNs, selected, -inf or NaN, visible) "
                            f"{got_diag} != {want_diag}")
    return problems


def sha(a) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# ----------------------------------------------------------------------------- running

def _csv_ints(s):
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a comma list of integers") from None


ALIASES = {"ties": "few", "equal": "allequal", "inf": "neginf"}


def _dists(s):
    out = [ALIASES.get(x, x) for x in s.split(",") if x]
    bad = [x for x in out if x not in DISTS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown distribution(s) {bad}; known: "
                                         f"{', '.join(DISTS)}")
    return out


def _parser():
    ap = argparse.ArgumentParser(prog="python -m tools.check_topk", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="tiny", help="model config (default tiny)")
    ap.add_argument("--kv", default="fp8", help="MLA cache kind of the spec (the selection "
                    "does not depend on it; default fp8)")
    ap.add_argument("--pos", type=_csv_ints, default=None,
                    help="comma list of context positions (default 1,64,2048,2049 and, for "
                    "the interpreter, 8447; on a GPU also the capacity's last position)")
    ap.add_argument("--rows", type=_csv_ints, default=[2, 4, 8], help="row widths (default 2,4,8)")
    ap.add_argument("--dist", type=_dists, default=list(DISTS),
                    help=f"comma list of distributions (default all: {','.join(DISTS)})")
    ap.add_argument("--backend", choices=("interp", "cuda", "hip"), default="interp")
    ap.add_argument("--chip", choices=("gfx950", "gfx942"), default="gfx950",
                    help="with --backend hip: the code object's chip")
    ap.add_argument("--mode", choices=MODES, default="inorder",
                    help="with --backend interp: the memory mode (default inorder)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first-digits", choices=("local", "buffer", "stage"), default="local",
                    help="first digits from a local pass (default), from a score_hist input "
                    "buffer, or from a producer stage publishing score_hist pairs as the scoring "
                    "does: all give the same digests")
    ap.add_argument("--max-slices", type=int, default=None,
                    help="slice jobs per row (default: the kind's: 4 in the interpreter, "
                    "CTAs / rows up to 64 on a GPU)")
    ap.add_argument("--waves", type=int, default=None, help="waves per CTA (default the kind's)")
    ap.add_argument("--grid", type=int, default=None, help="CTAs (default the kind's)")
    ap.add_argument("--dump", default="topk_digests", help="output folder")
    ap.add_argument("--through", choices=("select", "index"), default="select",
                    help="select (default): the selection launch on injected distributions; "
                    "index: end to end through launch kind index, on the kernel's own scores")
    from tools import common
    common.add_tune_option(ap, "set a stage's tunable (its class's TUNABLES, e.g. "
                               "ix_score.ss_keys=1 with --through index) or the selection's "
                               "radix plan (launch.select_digits=6-9-9-8); repeatable or a "
                               "comma list")
    ap.add_argument("--workload", type=common.workload_list, default=["W1"],
                    help="with --through index: comma list of W1, W2 (default W1)")
    return ap


def build(config, rows, target, *, kv="fp8", first_digits="local", max_slices=None,
          waves=None, grid=None, tunes=()):
    """The selection launch of one row width; `tunes` as --tune (stage tunables and the
    config_for keywords below as launch.ATTR; the CTA size is --waves here)."""
    from spec import BuildSpec
    from stages import select as sel
    from tools import common
    spec = BuildSpec.make(config, None, rows, kv, target)
    # the launch tunables that are config_for keywords here
    config_kw = {"select_digits": "digits", "lean_lists": "lean_lists",
                 "finish_max": "finish_max", "tail_finish": "tail_finish",
                 "tail_per_slice": "tail_per_slice", "tail_min_keys": "tail_min_keys",
                 "cta_publish": "cta_publish", "fold_first_digits": "fold_first_digits",
                 "lean_spans": "lean_spans", "fine_digits": "fine_digits",
                 "group_max": "group_skip"}
    kw = {}
    stage_tunes = []
    for stage_name, attr, text in tunes:
        if stage_name == "launch" and attr in config_kw:
            kw[config_kw[attr]] = common.launch_tune_value(attr, text)
        elif stage_name == "launch":
            raise ValueError(f"--tune launch.{attr}: check_topk's selection launch takes "
                             f"launch.{', launch.'.join(config_kw)} (its CTA size is "
                             "--waves)")
        else:
            stage_tunes.append((stage_name, attr, text))
    if first_digits == "buffer":  # the select_hist kind's choices where not given
        kw["fine_digits"], tail, kw["group_skip"] = sel.select_hist_choices(
            spec, group_max=kw.get("group_skip"),
            **{n: kw.get(n) for n in ("fine_digits", "tail_finish", "tail_per_slice",
                                      "tail_min_keys", "finish_max", "lean_spans")})
        if tail is not None:
            kw["tail_finish"] = tail
    if kw.get("fine_digits"):
        if first_digits != "buffer":
            raise ValueError("--tune launch.fine_digits=1 refines the scoring's first digits: "
                             "it needs --first-digits buffer")
        kw["fine_parts"] = grid or sel._grid_for(spec)  # (the scoring's jobs: one a CTA)
    if kw.get("group_skip") and first_digits != "buffer":
        raise ValueError("--tune launch.group_max=1 gives sel_h1 the scoring's group maxima "
                         "as an input, as select_hist takes its first digits: it needs "
                         "--first-digits buffer")
    cfg = sel.config_for(spec, max_slices=max_slices, first_digits_given=first_digits == "buffer",
                         **kw)
    hist = {"local": None, "buffer": "buffer", "stage": "stage"}[first_digits]
    L = sel.select_launch(cfg, grid=grid or sel._grid_for(spec),
                          waves=waves or sel._waves_for(spec), hist=hist)
    return spec, cfg, common.apply_tunes(L, stage_tunes)


def _backend(args):
    """The runner of --backend, or None after saying why there is none (a missing GPU stack)."""
    from tools import common
    try:
        return common.backend(args.backend, chip=args.chip, mode=args.mode, seed=args.seed)
    except Exception as e:  # noqa: BLE001 - say which and stop
        print(f"error: {e}", file=sys.stderr)
        return None


def run(args, ap) -> int:
    from stages import select as sel
    be = _backend(args)
    if be is None:
        return 2
    root = Path(args.dump)
    bad = 0
    lines = []
    for R in args.rows:
        spec, cfg, L = build(args.config, R, be.target, kv=args.kv,
                             first_digits=args.first_digits, max_slices=args.max_slices,
                             waves=args.waves, grid=args.grid, tunes=args.tune)
        pos = args.pos
        if pos is None:
            pos = [1, 64, 2048, 2049] + ([8447] if be.name == "interp" else [cfg.capacity - 1])
        arena = be.new_arena(L)
        records = []
        step = 0
        for P in pos:
            if P < R - 1:
                print(f"r{R} pos {P:>7}: skipped (a request of {R} rows needs a position >= "
                      f"{R - 1})", flush=True)
                continue
            for dist in args.dist:
                rng = np.random.default_rng([args.seed, P, R, list(DISTS).index(dist)])
                n = sel.request_positions(P, R)
                if (n > cfg.capacity).any():
                    print(f"error: position {P} is past the capacity {cfg.capacity} of "
                          f"{args.config}", file=sys.stderr)
                    return 2
                scores = scores_for(dist, rng, n, cfg.capacity, cfg.topk)
                bt = sel.random_block_table(cfg, rng)
                sel.validate_inputs(cfg, scores, n, bt)
                inputs = sel.make_inputs(cfg, scores, n, bt, hist=L.select_mode["hist"])
                prepared = be.prepare(inputs)
                t0 = time.time()
                res = be.run(L, prepared, arena, step)
                secs = time.time() - t0
                outs = be.outputs(L, res, prepared, inputs)
                out, diag = outs[cfg.names.out], outs[cfg.names.diag]
                problems = check_rows(scores, n, bt, out, diag, cfg.topk)
                bad += bool(problems)
                records.append(dict(launch=step, step=step, tag=int(res.tag), pos=P, dist=dist,
                                    seconds=round(secs, 3), exact=not problems,
                                    problems=problems[:8],
                                    digests={f"output/{nm}": sha(v) for nm, v in
                                             sorted(outs.items())}))
                status = "exact" if not problems else "WRONG: " + problems[0]
                lines.append(f"r{R} pos {P:>7} {dist:<10} {secs:8.2f}s  "
                             f"{records[-1]['digests']['output/' + cfg.names.out][:16]}  {status}")
                print(lines[-1], flush=True)
                step += 1
        path = root / args.config / f"r{R}" / "select.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(format=FORMAT, kind="select", spec=spec.to_json(),
                                        backend=be.name, seed=args.seed,
                                        first_digits=args.first_digits,
                                        slices=cfg.max_slices, digits=list(cfg.digits),
                                        launches=records), indent=1, sort_keys=True) + "\n")
    print(f"\n{len(lines) - bad} of {len(lines)} cases exact; digests in {root.resolve()}/")
    return 1 if bad else 0


def run_index(args, ap) -> int:
    """--through index: the fused launch's top-k on the scores it computed (module doc)."""
    from stages import kinds
    from tools import common
    be = _backend(args)
    if be is None:
        return 2
    workloads = args.workload
    kind = kinds.kind("index")
    root = Path(args.dump)
    bad, lines = 0, []
    for R in args.rows:
        spec = common.make_spec(args.config, common.resolve_tp(ap, args.config, None), R,
                                args.kv, be.target)
        L = common.launch_for(kind, spec, args.tune)
        if be.target != "interp":
            common.warn_inert_tunes(kind, spec, args.tune, L, be.target)
        c = L.select_cfg
        arena = be.new_arena(L)
        records = []
        for step, (P, wl) in enumerate((P, wl) for P in (args.pos or INDEX_POS)
                                       for wl in workloads):
            try:
                inputs, _ = common.workload_inputs(kind, L, spec,
                                                   np.random.default_rng([args.seed, P, R]), P, wl)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            prepared = be.prepare(inputs)
            t0 = time.time()
            res = be.run(L, prepared, arena, step)
            secs = time.time() - t0
            outs = be.outputs(L, res, prepared, inputs)
            n = c.n_of(np.asarray(inputs[c.names.n_keys]).reshape(-1))
            bt = np.asarray(inputs[c.names.block_table]).reshape(R, -1)
            scores = np.asarray(res.regions[c.names.scores], np.float32)
            problems = check_rows(scores, n, bt, outs[c.names.out], outs[c.names.diag], c.topk)
            bad += bool(problems)
            records.append(dict(launch=step, step=step, tag=int(res.tag), pos=P, workload=wl,
                                seconds=round(secs, 3), exact=not problems,
                                problems=problems[:8],
                                digests={f"output/{nm}": sha(v) for nm, v in sorted(outs.items())}))
            status = "exact" if not problems else "WRONG: " + problems[0]
            lines.append(f"index r{R} pos {P:>7} {wl} {secs:8.2f}s  "
                         f"{records[-1]['digests']['output/' + c.names.out][:16]}  {status}")
            print(lines[-1], flush=True)
        path = root / args.config / f"r{R}" / "index.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dict(format=FORMAT, kind="index", spec=spec.to_json(),
                                        backend=be.name, seed=args.seed, launches=records),
                                   indent=1, sort_keys=True) + "\n")
    print(f"\n{len(lines) - bad} of {len(lines)} cases exact; digests in {root.resolve()}/")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    from tools import common
    try:  # a bad launch --tune is a usage error naming the value, before any launch
        for stage, attr, text in args.tune:
            if stage == "launch":
                common.launch_tune_value(attr, text)
    except ValueError as e:
        ap.error(str(e))
    if args.through == "index":
        return run_index(args, ap)
    return run(args, ap)


if __name__ == "__main__":
    sys.exit(main())
