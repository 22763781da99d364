"""The selection's stages and launches, inputs for tests and tools, and the select /
select_hist launch kinds."""
from __future__ import annotations

import numpy as np

from layouts.scores import GROUP_MAX_REGION, MAX_SLICES, ScoresLayout
from monokernel.targets import SM90A

from ..launch import Launch
from .config import (DEFAULT_DIGITS, DIAG_WORDS, FINE_DIGITS, SELECT_KIND_DIGITS,
                     SELECT_KIND_DIGITS_WIDE, TAIL_EXCHANGED, SelectConfig, WIDE_ROW_SLICES)
from .passes import SelectPass
from .producers import ScoreHistStage, ScoresFeed, ScoringModel
from .reference import fine_histograms, group_maxima, segment_histograms
from .sources import (BufferScores, FineBuffer, FinePlain, GroupMaxBuffer, GroupMaxPlain,
                      HistBuffer, HistPlain, HistRegion, RegionScores, score_done_ready)


# ----------------------------------------------------------------------------- composition

def select_stages(cfg: SelectConfig, *, scores="buffer", hist=None, ready=None,
                  fine=None, gmax=None, **fences) -> list:
    """The selection's stages (sel_h0 .. sel_out). `scores`: "buffer" (input [rows,
    capacity] f32), "region" (an arena BulkBuffer of that shape written earlier in the
    launch) or a source object; `hist`: None (local first pass), "buffer" (input [rows,
    segments, 64] u32) or "region" (the scoring's tagged pairs); `fine` (with
    cfg.fine_digits): "buffer" (input score_fine [fine_parts, rows, 1024] u32) or "plain"
    (the scoring's region); `gmax` (with cfg.group_skip): the 16-key group maxima, "buffer"
    (input score_gmax, +inf where a group holds an unselectable score) or "plain" (the
    fused scoring's region, which needs fine_digits to find such rows)."""
    if scores == "buffer":
        scores = BufferScores(cfg)
    elif scores == "region":
        scores = RegionScores(cfg)
    elif scores == "plain":
        scores = RegionScores(cfg, bulk=False)
    if hist == "buffer":
        hist = HistBuffer(cfg)
    elif hist == "region":
        hist = HistRegion(cfg)
    elif hist == "plain":
        hist = HistPlain(cfg)
    elif hist is not None and not hasattr(hist, "read"):
        raise ValueError(f"hist {hist!r}: None, 'buffer', 'region' or 'plain'")
    if fine == "buffer":
        fine = FineBuffer(cfg)
    elif fine == "plain":
        fine = FinePlain(cfg)
    elif fine is not None:
        raise ValueError(f"fine {fine!r}: None, 'buffer' or 'plain'")
    if cfg.row_parts and not hasattr(fine, "read_rows4"):
        raise ValueError("row_parts: sel_h1 sums the scoring's per-job first digits "
                         "(`score_rows`), which only the fused index's scoring writes (fine "
                         "'plain')")
    if cfg.fine_digits and hist is None:
        raise ValueError("fine_digits refines the scoring's first digits: it needs hist "
                         "'buffer', 'region' or 'plain' (not a local first pass)")
    if cfg.fold_first_digits and not hasattr(hist, "read4"):
        raise ValueError(f"fold_first_digits: sel_h1 sums a row's first digits with plain "
                         f"16-byte loads (hist 'buffer' or 'plain'), not from {hist!r}")
    if gmax == "plain":
        gmax = GroupMaxPlain(cfg)
    elif gmax == "buffer":
        gmax = GroupMaxBuffer(cfg)
    elif gmax is not None:
        raise ValueError(f"gmax {gmax!r}: None, 'buffer' or 'plain'")
    if cfg.group_skip and gmax is None:
        raise ValueError("group_skip: sel_h1 reads group maxima: the fused index's scoring's "
                         "(gmax 'plain') or an input (gmax 'buffer', the select_hist kind)")
    if cfg.group_skip and not gmax.marks_unselectable and not cfg.fine_digits:
        raise ValueError("group_skip: a row holding a NaN or -inf score scans every group, "
                         "which sel_h1 learns from the refined first digits' bin 0 where the "
                         "maxima do not show them (gmax 'plain'): it needs fine_digits")
    return [SelectPass(cfg, q, scores, hist, ready=ready, fine=fine, gmax=gmax, **fences)
            for q in range(cfg.first_pass, cfg.passes + 1)]


def select_launch(cfg: SelectConfig, *, grid: int, waves: int = 1, hist=None, scores="buffer",
                  name: str = "select", release=True, acquire=True, **kw) -> Launch:
    """A standalone selection launch.
    scores: "buffer" (the input `scores`), "stage" (a producer copies the input `scores_in`
            into an arena BulkBuffer first) or "scoring" (a producer follows the index
            launch's protocol: plain `scores` and `score_hist` behind `score_done` pairs);
    hist:   None (a local first pass), "buffer" (score_hist an input), "stage" (a producer
            publishes score_hist as tagged pairs) or "scoring" (with scores="scoring": the
            producer's plain score_hist)."""
    pre = []
    ready = None
    if scores == "stage":
        pre.append(ScoresFeed(cfg))
        src = RegionScores(cfg)
    elif scores == "buffer":
        src = BufferScores(cfg)
    elif scores == "scoring":
        pre.append(ScoringModel(cfg))
        src = RegionScores(cfg, bulk=False)
        ready = score_done_ready(cfg, cfg.rows)
    else:
        raise ValueError(f"scores {scores!r}: 'buffer', 'stage' or 'scoring'")
    if hist == "stage":
        pre.append(ScoreHistStage(cfg, src))
        h = "region"
    elif hist == "scoring":
        if scores != "scoring":
            raise ValueError("hist='scoring' needs scores='scoring' (its producer writes both)")
        h = "plain"
    elif hist in (None, "buffer"):
        h = hist
    else:
        raise ValueError(f"hist {hist!r}: None, 'buffer', 'stage' or 'scoring'")
    fine = None
    if cfg.fine_digits:
        if hist != "buffer":
            raise ValueError(f"fine_digits: a standalone selection takes score_fine as an "
                             f"input with hist='buffer', not hist={hist!r}")
        fine = "buffer"
    # (group_skip: the maxima an input, as the first digits are; `group_maxima`)
    gmax = "buffer" if cfg.group_skip else None
    L = Launch(name, pre + select_stages(cfg, scores=src, hist=h, ready=ready, fine=fine,
                                         gmax=gmax, release=release, acquire=acquire),
               grid=grid, waves=waves, **kw)
    L.select_cfg = cfg
    L.select_mode = dict(hist=hist, scores=scores)
    return L


def make_inputs(cfg: SelectConfig, scores, n_keys, block_table, *, hist=None,
                scores_in_stage=False) -> dict:
    """The launch's input dict from visible key counts (stored as positions, n - 1, with
    cfg.positions); outputs pre-filled with a sentinel the kernel must overwrite (-2 in
    every slot, all-ones diagnostics); `scores_in_stage`: the scores go to `scores_in`, the
    input of a producer stage."""
    nm = cfg.names
    counts = np.asarray(n_keys, np.int64) - (1 if cfg.positions else 0)
    d = {nm.n_keys: counts.astype(np.int32),
         nm.block_table: np.asarray(block_table, np.int32).copy(),
         nm.out: np.full((cfg.rows, cfg.topk), -2, np.int32),
         nm.diag: np.full((cfg.rows, DIAG_WORDS), 0xFFFFFFFF, np.uint32)}
    d["scores_in" if scores_in_stage else nm.scores] = np.asarray(scores, np.float32).copy()
    if hist == "buffer":
        d[nm.score_hist] = segment_histograms(cfg, np.asarray(scores, np.float32), n_keys)
        if cfg.fine_digits:
            d[nm.score_fine] = fine_histograms(cfg, np.asarray(scores, np.float32), n_keys)
    if cfg.group_skip:
        d[GROUP_MAX_REGION] = group_maxima(cfg, np.asarray(scores, np.float32), n_keys)
    return d


def request_positions(pos: int, rows: int) -> np.ndarray:
    """n_keys of the rows of one request at context position P: row j of n sees keys
    0 .. P - n + j (so n_keys = P - n + j + 1)."""
    n = np.array([pos - rows + j + 1 for j in range(rows)], np.int64)
    if (n < 0).any():
        raise ValueError(f"position {pos} leaves row(s) with no keys for {rows} rows")
    return n


def random_block_table(cfg: SelectConfig, rng, *, shared: bool = True) -> np.ndarray:
    """Distinct random pages (rows of one request share one table when `shared`)."""
    pages = cfg.bt_width
    if shared:
        row = rng.permutation(pages * 3)[:pages].astype(np.int32)
        return np.tile(row, (cfg.rows, 1))
    return np.stack([rng.permutation(pages * 3)[:pages] for _ in range(cfg.rows)]).astype(np.int32)


# ----------------------------------------------------------------------------- launch kinds

# the SelectConfig options measured faster on the H200 (bench/NOTES.md v7, v8) and left off
# on AMD, where each costs registers (the fused AMD kernel sits at its SGPR ceiling) and is
# unmeasured: every builder of a config sets them through measured_options
MEASURED_ON_NVIDIA = ("batched_append", "prefetch", "defer_fat_bins", "rare_specials",
                      "count_from_list", "early_loads", "wide_segment_sums", "list_bases",
                      "one_wait", "lean_scan")


def measured_options(on: bool) -> dict:
    """SelectConfig keywords: the NVIDIA-measured options all on (NVIDIA, the interpreter)
    or all off (AMD)."""
    return {name: on for name in MEASURED_ON_NVIDIA}


def config_for(spec, *, max_slices: int | None = None, digits=None,
               lean_lists: bool | None = None, finish_max: int | None = None,
               tail_finish: bool | None = None, tail_per_slice: int | None = None,
               tail_min_keys: int | None = None, cta_publish: bool | None = None,
               fold_first_digits: bool | None = None, lean_spans: bool | None = None,
               first_digits_given: bool = False, fine_digits: bool = False,
               fine_parts: int = 0, group_skip: bool = False) -> SelectConfig:
    """The selection of a build spec: capacity = the config's context limit (512K keys for
    GLM-5.x), segments of 1024 keys (512 below 256K), slices per row = CTAs / rows (<= 64;
    4 in the interpreter), the radix plan `digits` (None: SELECT_KIND_DIGITS, or
    SELECT_KIND_DIGITS_WIDE past WIDE_ROW_SLICES slices a row; DEFAULT_DIGITS on AMD,
    unmeasured there), `lean_lists` (None: on off AMD), `finish_max` (None or 0: no row
    finish), `tail_finish` (None: on off AMD for rows of more than WIDE_ROW_SLICES slices,
    rows 2 and 4 on the H200, where summing a round's messages costs most; SelectConfig.
    tail_finish), `tail_per_slice` (None or 0: off; N: the tail finish or the rounds chosen
    per row, SelectConfig.tail_max_per_slice = N, which replaces tail_finish's default),
    `tail_min_keys` (None or 0: off; N: the tail finish for rows of at least N keys, the
    rounds for the others, SelectConfig.tail_min_keys, which also replaces that default),
    `cta_publish` (None: SelectConfig's default), `fold_first_digits` (None: on
    off AMD where the first digits are given as a plain buffer, `first_digits_given`: the
    select_hist kind; SelectConfig.fold_first_digits), `lean_spans` (None: SelectConfig's
    default), `fine_digits` (refined first digits from `fine_parts` partial histograms a
    row: SelectConfig.fine_digits; its plan FINE_DIGITS unless `digits` is given, no deferred
    lists, no tail finish unless `tail_finish` says so), `group_skip` (sel_h1 lists only the
    16-key groups whose given maximum reaches its threshold: SelectConfig.group_skip, with
    lean_spans unless that is given as off)."""
    cap = spec.config.max_context
    seg = 1024 if cap >= (1 << 18) else 512
    if max_slices is None:
        if spec.target == "interp":
            max_slices = 4
        else:
            max_slices = max(1, min(MAX_SLICES, spec.target_info.num_ctas // spec.rows))
    amd = spec.target != "interp" and spec.target_info.is_amd
    wide = max_slices > WIDE_ROW_SLICES
    digits = digits or (FINE_DIGITS if fine_digits else DEFAULT_DIGITS if amd
                        else SELECT_KIND_DIGITS_WIDE if wide else SELECT_KIND_DIGITS)
    if tail_finish is None:  # (not with a row finish, nor a plan of two digits, nor chosen
        # per row)
        tail_finish = not (tail_per_slice or tail_min_keys) and not amd and wide \
            and not finish_max and len(digits) > TAIL_EXCHANGED and not fine_digits
    if fold_first_digits is None:
        fold_first_digits = first_digits_given and not amd
    if group_skip and lean_spans is None:
        lean_spans = True
    more = {name: bool(v) for name, v in (("cta_publish", cta_publish),
                                          ("lean_spans", lean_spans)) if v is not None}
    options = measured_options(not amd)
    if fine_digits:  # (every row lists: none is crowded at 10 bits; its X_ABOVE is the list's)
        options.update(defer_fat_bins=False, count_from_list=True)
        more.update(fine_digits=True, fine_parts=fine_parts)
    return SelectConfig(ScoresLayout(spec.rows, cap, seg), max_slices=max_slices,
                        topk=spec.config.index_topk, digits=digits, **options,
                        lean_lists=(not amd) if lean_lists is None else bool(lean_lists),
                        finish_max=finish_max or None, tail_finish=bool(tail_finish),
                        tail_max_per_slice=tail_per_slice or None,
                        tail_min_keys=tail_min_keys or None,
                        fold_first_digits=bool(fold_first_digits),
                        group_skip=bool(group_skip), **more)


def _waves_for(spec) -> int:
    if spec.target == "interp":
        return 1
    return 4 if spec.target_info.is_amd else 8


def _grid_for(spec) -> int:
    return 8 if spec.target == "interp" else spec.target_info.num_ctas


# select_hist on sm_90a at rows SELECT_HIST_TAIL_MIN_ROWS and more: the scoring's refined
# first digits (10-bit counts), the tail finish after them and sel_h1's group skip over the
# scoring's group maxima (the kind's inputs then: all three are the scoring's by-products, as
# the fused index has them). H100, one process each (bench/NOTES.md v50b, v51), r8 at 32K /
# 64K / 128K / 256K / 512K keys: 17.57 / 18.02 / 19.29 / 21.42 / 24.80 -> 15.10 / 15.54 /
# 15.88 / 18.10 / 20.84 us; r4 at 64K / 512K 17.62 / 19.75 -> 16.50 / 19.55; with sel_h1's
# 16-wide fold too r2 1.158 / 1.034 (rows 2 keep the coarse plan's tail: 64 slices a row);
# check_topk exact with these defaults on every distribution at rows 2 / 4 / 8 (36 of 36, the
# old defaults' digests). Launch tunables (fine_digits=0: the old defaults, tail_finish and
# group_max then follow).
SELECT_HIST_TAIL_ON_NVIDIA = True
SELECT_HIST_TAIL_MIN_ROWS = 4


def select_hist_choices(spec, *, fine_digits=None, tail_finish=None, group_max=None,
                        tail_per_slice=None, tail_min_keys=None, finish_max=None,
                        lean_spans=None) -> tuple:
    """(fine_digits, tail_finish, group_max) of a selection given the scoring's first digits
    (the select_hist kind, check_topk --first-digits buffer): each None is the chip's default
    (SELECT_HIST_TAIL_ON_NVIDIA), the refined digits only where the caller chose nothing they
    exclude (tail_per_slice, finish_max), the tail only where the caller chose no other
    finish (those, or tail_min_keys), the skip only over lean spans (unless `lean_spans`
    turned them off); a tail_finish None left None is config_for's to choose."""
    nv_tail = (spec.target == SM90A.name and SELECT_HIST_TAIL_ON_NVIDIA
               and spec.rows >= SELECT_HIST_TAIL_MIN_ROWS)
    if fine_digits is None:
        fine_digits = nv_tail and not (tail_per_slice or finish_max)
    if tail_finish is None and fine_digits and not (tail_per_slice or tail_min_keys
                                                    or finish_max):
        tail_finish = nv_tail
    if group_max is None:
        group_max = nv_tail and bool(fine_digits) and (lean_spans is None or bool(lean_spans))
    return fine_digits, tail_finish, group_max


def _kind_launch(spec, hist=None, *, select_digits=None, waves=None, lean_lists=None,
                 finish_max=None, tail_finish=None, tail_per_slice=None, tail_min_keys=None,
                 cta_publish=None,
                 fold_first_digits=None, lean_spans=None, fine_digits=None, group_max=None):
    if hist == "buffer":
        fine_digits, tail_finish, group_max = select_hist_choices(
            spec, fine_digits=fine_digits, tail_finish=tail_finish, group_max=group_max,
            tail_per_slice=tail_per_slice, tail_min_keys=tail_min_keys, finish_max=finish_max,
            lean_spans=lean_spans)
    if fine_digits and hist != "buffer":
        raise ValueError("fine_digits: the select kind has no scoring's first digits to refine "
                         "(select_hist has)")
    if group_max and hist != "buffer":
        raise ValueError("group_max: the select kind takes no scoring's aids (select_hist "
                         "takes its group maxima as an input)")
    cfg = config_for(spec, digits=select_digits, lean_lists=lean_lists, finish_max=finish_max,
                     tail_finish=tail_finish, tail_per_slice=tail_per_slice,
                     tail_min_keys=tail_min_keys,
                     cta_publish=cta_publish,
                     fold_first_digits=fold_first_digits, lean_spans=lean_spans,
                     first_digits_given=hist == "buffer", fine_digits=bool(fine_digits),
                     fine_parts=_grid_for(spec), group_skip=bool(group_max))
    return select_launch(cfg, grid=_grid_for(spec), waves=waves or _waves_for(spec), hist=hist,
                         name="select_hist" if hist else "select")


def _kind_inputs(launch, spec, rng, pos=None):
    """Normal scores; the rows of one request at position `pos` (default: the last one the
    capacity holds); one shared block table of distinct random pages."""
    cfg = launch.select_cfg
    n = request_positions(cfg.capacity - 1 if pos is None else pos, cfg.rows)
    scores = rng.standard_normal((cfg.rows, cfg.capacity)).astype(np.float32)
    return make_inputs(cfg, scores, n, random_block_table(cfg, rng),
                       hist=launch.select_mode["hist"])


from ..kinds import Kind, register  # noqa: E402

register(Kind("select", "exact top-k selection of injected scores (scores, n_keys, "
              "block_table -> topk slots, topk_diag)", _kind_launch, _kind_inputs,
              launch_tunables=("waves", "select_digits", "lean_lists", "finish_max",
                               "tail_finish", "tail_per_slice", "tail_min_keys",
                               "cta_publish", "lean_spans")))
register(Kind("select_hist", "the selection with first digits given (score_hist [rows, "
              "segments, 64] u32, as the scoring publishes them)",
              lambda spec, **kw: _kind_launch(spec, hist="buffer", **kw), _kind_inputs,
              default=False, launch_tunables=("waves", "select_digits", "lean_lists", "finish_max",
                                              "tail_finish", "tail_per_slice",
                                              "tail_min_keys", "cta_publish",
                                              "fold_first_digits", "lean_spans",
                                              "fine_digits", "group_max")))
