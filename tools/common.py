"""What the CLIs share: option parsing with clear errors, the kinds a tool runs by default,
specs, tables, progress lines, seeded inputs and the backends that run a launch."""
from __future__ import annotations

import argparse
import re
import hashlib
import inspect
import sys
import time

import numpy as np

from spec import KV_KINDS, ROWS, TPS, BuildSpec, SpecError
from spec.catalogue import CONFIGS

BUILD_TARGETS = ("gfx950", "gfx942", "sm_90a")


# ------------------------------------------------------------------------------ option types

def csv(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _choices(what, allowed, convert=str):
    def parse(s):
        out = []
        for x in csv(s):
            try:
                v = convert(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{what} {x!r} is not a number") from None
            if v not in allowed:
                raise argparse.ArgumentTypeError(
                    f"{what} {x} is not built; choose from {', '.join(map(str, allowed))}")
            if v not in out:
                out.append(v)
        if not out:
            raise argparse.ArgumentTypeError(f"no {what} given")
        return out
    parse.__name__ = what
    return parse


rows_list = _choices("rows", ROWS, int)
kv_list = _choices("kv cache kind", KV_KINDS)
target_list = _choices("target", BUILD_TARGETS)


def config_name(s: str) -> str:
    if s not in CONFIGS:
        raise argparse.ArgumentTypeError(f"unknown config {s!r}; choose from {', '.join(CONFIGS)}")
    return s


def tp_value(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"TP {s!r} is not a number") from None
    if v not in TPS:
        raise argparse.ArgumentTypeError(f"TP {v} is not built; choose from {', '.join(map(str, TPS))}")
    return v


def pos_list(s: str) -> list[int]:
    out = []
    for x in csv(s):
        try:
            v = int(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"position {x!r} is not a number") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"position {v} must be >= 0")
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError("no position given")
    return out


WORKLOADS = ("W1", "W2")  # DESIGN.md section 8


def workload_list(s: str) -> list[str]:
    out = []
    for x in csv(s):
        if x.upper() not in WORKLOADS:
            raise argparse.ArgumentTypeError(
                f"unknown workload {x!r}; choose from {', '.join(WORKLOADS)} (DESIGN.md "
                "section 8: W1 one request of R rows, W2 R/2 requests of 2 rows on shared pages)")
        if x.upper() not in out:
            out.append(x.upper())
    if not out:
        raise argparse.ArgumentTypeError("no workload given")
    return out


def kind_list(s: str) -> list[str]:
    from stages import kinds
    out = []
    for x in csv(s):
        try:
            kinds.kind(x)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        out.append(x)
    if not out:
        raise argparse.ArgumentTypeError("no launch kind given")
    return out


def default_kinds(fallback: str = "synthetic") -> list[str]:
    """Every registered kind but test-only ones; `fallback` when none is registered yet."""
    from stages import kinds
    names = kinds.default_names()
    return names or [fallback]


def preferred_kind(name: str = "front", fallback: str = "synthetic") -> list[str]:
    from stages import kinds
    return [name] if name in kinds.names() else [fallback]


def resolve_tp(ap: argparse.ArgumentParser, config: str, tp: int | None) -> int:
    tp = (1 if config == "tiny" else 8) if tp is None else tp
    try:
        BuildSpec.make(config, tp, ROWS[0], KV_KINDS[0], "interp")
    except SpecError as e:
        ap.error(str(e))
    return tp


def make_spec(config, tp, rows, kv, target) -> BuildSpec:
    return BuildSpec.make(config, tp, rows, kv, target)


# ---------------------------------------------------------------------------------- printing

def table(rows: list[dict], columns) -> str:
    """Columns: names, or (name, header) pairs; numbers right-aligned."""
    cols = [(c, c) if isinstance(c, str) else c for c in columns]

    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1e-2 or abs(v) >= 1e5 else f"{v:.2f}"
        return str(v)
    cells = [[cell(r.get(c)) for c, _ in cols] for r in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, (_, h) in enumerate(cols)]
    num = [bool(rows) and all(isinstance(r.get(c), (int, float)) or r.get(c) is None
                              for r in rows) for c, _ in cols]

    def line(vals):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, num)).rstrip()
    return "\n".join([line([h for _, h in cols])] + [line(r) for r in cells])


class Progress:
    """Progress of `total` items: tqdm or rich if installed, else one plain line per item."""

    def __init__(self, total: int, desc: str, stream=None):
        self.total, self.desc, self.n = total, desc, 0
        self.stream = stream or sys.stdout
        self.t0 = time.time()
        self._bar = self._rich = None
        try:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, file=self.stream, leave=False)
            return
        except ImportError:
            pass
        try:
            from rich.progress import Progress as RichProgress
            self._rich = RichProgress(transient=True)
            self._rich.start()
            self._task = self._rich.add_task(desc, total=total)
        except ImportError:
            pass

    def update(self, item: str):
        self.n += 1
        if self._bar is not None:
            self._bar.set_postfix_str(item, refresh=False)
            self._bar.update(1)
        elif self._rich is not None:
            self._rich.update(self._task, advance=1, description=f"{self.desc}: {item}")
        else:
            print(f"  [{self.n}/{self.total}] {self.desc}: {item} ({time.time() - self.t0:.1f} s)",
                  file=self.stream, flush=True)

    def close(self):
        if self._bar is not None:
            self._bar.close()
        if self._rich is not None:
            self._rich.stop()


# ------------------------------------------------------------------------------------ inputs

def kind_inputs(kind, launch, spec, rng, pos: int | None = None) -> tuple[dict, bool]:
    """The kind's seeded inputs (a fresh copy); passes `pos` where the kind's inputs function
    takes it. Returns (inputs, whether pos was used)."""
    takes_pos = "pos" in inspect.signature(kind.inputs).parameters
    if takes_pos and pos is not None:
        inp = kind.inputs(launch, spec, rng, pos=pos)
    else:
        inp = kind.inputs(launch, spec, rng)
    return {n: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v)
            for n, v in inp.items()}, takes_pos and pos is not None


KEY_CACHE = "index_cache"  # the paged key cache a kind with an indexer reads and appends to


def has_key_cache(launch) -> bool:
    """Whether the launch scores a paged key cache (the kinds workloads W1/W2 apply to)."""
    return KEY_CACHE in launch.buffer_specs() and hasattr(launch, "plan")


def w2_requests(rows: int, pos: int) -> list:
    """Workload W2 at context pos + 1: rows / 2 requests of 2 rows at positions pos - 1, pos."""
    if rows % 2 or pos < 1:
        raise ValueError(f"workload W2 takes requests of 2 rows at positions pos - 1, pos: "
                         f"{rows} rows at pos {pos} do not fit")
    return [(2, pos - 1)] * (rows // 2)


def workload_inputs(kind, launch, spec, rng, pos: int | None, workload: str = "W1"):
    """The kind's seeded inputs for a workload (DESIGN.md section 8). W1: the kind's own
    (one request of R rows, the last at `pos`). W2 (kinds with a key cache only): the kind's
    inputs at the smallest context, then positions, block table and key cache replaced by
    R/2 requests of 2 rows at pos - 1, pos whose tables map the same physical pages for every
    page they only read (stages.index_ref.request_layout(shared=True): each request writes
    its own last page). `pos` None: random, as the kind draws it (under 512 keys in the
    interpreter, 8192 on a GPU). Returns (inputs, whether pos applies)."""
    if workload not in (*WORKLOADS, "-"):
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}")
    if workload != "W2" or not has_key_cache(launch):  # "-": a kind without a key cache
        return kind_inputs(kind, launch, spec, rng, pos)
    from stages.index_ref import make_inputs, request_layout
    p = launch.plan
    if pos is None:
        top = 512 if p.target == "interp" else min(p.capacity, 8192)
        pos = int(rng.integers(1, top))
    if not 1 <= pos < p.capacity:
        raise ValueError(f"workload W2: pos {pos} must be in [1, {p.capacity})")
    req = w2_requests(p.rows, pos)
    inp, _ = kind_inputs(kind, launch, spec, rng, p.rows - 1)
    layout = request_layout(p, rng, req, shared=True)
    ix = make_inputs(p, rng, req, layout=layout)
    inp.update({n: ix[n] for n in ("positions", "block_table", KEY_CACHE)})
    return inp, True


MANTISSA_BITS = {"f64": 52, "f32": 23, "f16": 10, "bf16": 7, "fp8e4m3fn": 3, "fp8e4m3fnuz": 3}


def perturb_target(launch) -> tuple[str, int, int]:
    """The bit `--perturb` flips: element 0 of the first floating-point INPUT buffer of the
    launch (in ABI order, outputs excluded), its most significant mantissa bit (f32 bit 22,
    bf16 bit 6, e4m3 bit 2): a change of a quarter to a half of the value, which every kind
    carries to its outputs. Returns (buffer, element, bit)."""
    specs = launch.buffer_specs()  # in stage order: the ABI's order after the linker's args
    for name, b in specs.items():
        if not b.output and b.dtype.name in MANTISSA_BITS:
            return name, 0, MANTISSA_BITS[b.dtype.name] - 1
    for name, b in specs.items():  # no float input: bit 0 of an integer
        if not b.output:
            return name, 0, 0
    raise ValueError(f"launch {launch.name} has no input buffer to perturb")


def flip_bit(inputs: dict, name: str, element: int, bit: int):
    a = inputs[name]
    raw = a.reshape(-1).view(np.dtype(f"u{a.dtype.itemsize}"))
    raw[element] ^= raw.dtype.type(1 << bit)


# ----------------------------------------------------------------------------------- digests

def sha(arr) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def region_bytes(launch, arena: np.ndarray, name: str) -> np.ndarray:
    p = launch.arena[name]
    return arena[p.offset:p.offset + p.span]


def as_f64(arr, dtype) -> np.ndarray:
    from monokernel import numerics
    from monokernel.types import STORAGE_ONLY
    a = np.asarray(arr)
    if dtype in STORAGE_ONLY:
        return numerics.to_f64(a, dtype)
    return a.astype(np.float64)


def rel_err(got, ref) -> float:
    """Max-norm relative error against the float64 reference (inf for NaN or a shape change)."""
    got = np.asarray(got, np.float64).reshape(-1)
    ref = np.asarray(ref, np.float64).reshape(-1)
    if got.size != ref.size:
        return float("inf")
    if got.size == 0:
        return 0.0
    d = np.abs(got - ref)
    if np.isnan(d).any():
        return float("inf")
    return float(d.max() / max(np.abs(ref).max(), 1e-30))


def reference_errors(launch, inputs: dict, outputs: dict, regions: dict, ref=None) -> dict:
    """{name: {rel_err, tol, ok}} of every output buffer and region the stages' float64
    references compute, against what the run produced, and the scores of kinds with a key
    cache (score_errors: their references are quantities of their own names); `ref`:
    Launch.reference(inputs) computed elsewhere (bench/index_h200.py: in worker processes)."""
    ref = launch.reference(inputs) if ref is None else ref
    specs = launch.buffer_specs()
    owner_tol, dtypes = {}, {}
    for st in launch.stages:
        for r in st.regions():
            owner_tol[r.name] = st.rel_tol
            dtypes[r.name] = getattr(r, "value_dtype", None) or getattr(r, "dtype", None)
        for n, b in st.buffers().items():
            if b.output:
                owner_tol[n] = st.rel_tol
                dtypes[n] = b.dtype
    out = {}
    for name, r in ref.items():
        if name in outputs and name in specs:
            got = outputs[name]
        elif name in regions:
            got = regions[name]
            got = getattr(got, "data", got)
        else:
            continue
        e = rel_err(as_f64(got, dtypes.get(name)), r)
        tol = owner_tol.get(name, 1e-5)
        out[name] = dict(rel_err=e, tol=tol, ok=bool(e <= tol))
    out.update(score_errors(launch, inputs, outputs, regions, ref))
    return out


# end to end, a q or k value on an FP8 rounding boundary may round one way in the kernel's f32
# and the other in float64 (test/test_index.py's bound); from the kernel's own FP8 operands the
# scores are exact products summed in f32 (the scoring stage's own tolerance)
SCORES_E2E_TOL = 2e-2
SCORES_OWN_TOL = 1e-5
# ... except on Hopper's FP8 tensor cores (wgmma, and torch's _scaled_mm on them), which sum a
# chain's products with about 14 mantissa bits (DeepSeek-V3 report, section 3.3.2: "limited to
# retaining around 14 bits"): measured on the H200, the wgmma scores sit 1.9e-4 .. 4.0e-4 (max
# norm) from the exact sums of the same FP8 products, and so does _scaled_mm
HOPPER_FP8_ACC_TOL = 1e-3
# ... and with the bf16 head sum (IndexScore.head_sum "mma") those ~14-bit sums may move a
# relu'd value across a bf16 rounding boundary the reference rounds the other way: its term
# then differs by one bf16 ulp, up to 2**-7 of the value (7 stored mantissa bits, at the
# bottom of a binade; 2**-8 until v36, when the H100's index r8 at 128K keys, W2, scored
# 5.1e-3 from its own operands). A max-norm bound for terms up to the row's largest score:
# where head weights of both signs make a score's terms cancel, a flip can exceed it
# (test_workloads' simulation shows both)
BF16_ULP_REL = 2.0 ** -7
BF16_HEAD_SUM_TOL = HOPPER_FP8_ACC_TOL + BF16_ULP_REL
REF_SCORES = "ix_ref_scores"  # stages/index.py's float64 reference of the scores


def _score_device():
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def bf16_head_sum(launch) -> bool:
    """Whether the launch's scoring rounds relu(q . k) and w to bf16 (ix_score head_sum "mma"):
    the own-operands references and the torch peer's comparison follow it."""
    from stages.index_score import IndexScore
    return any(s.bf16_head_sum for s in launch.stages if isinstance(s, IndexScore))


def score_errors(launch, inputs: dict, outputs: dict, regions: dict, ref: dict) -> dict:
    """Kinds with a key cache: {name: {rel_err, tol, ok}} of the kernel's scores of every
    visible key (row r, positions 0 .. pos[r]; max-norm over the row, worst row) against
    "scores vs float64": the float64 reference end to end (`ref`'s ix_ref_scores), and
    "scores vs own operands": float64 scores from the kernel's own FP8 queries, head weights
    (ix_qb, ix_nb) and the cache it wrote, each row from its own block-table row
    (tools.peers.index_scores' float path, on the GPU where there is one). {} otherwise."""
    if not has_key_cache(launch) or "scores" not in regions:
        return {}
    from stages.index_ref import kernel_operands
    from tools import peers
    p = launch.plan
    got = np.asarray(getattr(regions["scores"], "data", regions["scores"]), np.float64)
    pos = np.asarray(inputs["positions"]).astype(np.int64).reshape(-1)
    bt = np.asarray(inputs["block_table"]).reshape(len(pos), -1)
    out = {}
    if ref is not None and REF_SCORES in ref:
        e = max(rel_err(got[r, :x + 1], ref[REF_SCORES][r, :x + 1]) for r, x in enumerate(pos))
        out["scores vs float64"] = dict(rel_err=e, tol=SCORES_E2E_TOL, ok=bool(e <= SCORES_E2E_TOL))
    q8, _, _, _, w = kernel_operands(p, regions)
    bf16_sum = bf16_head_sum(launch)
    dev = _score_device()
    cache = peers.as_tensor(np.asarray(outputs[KEY_CACHE]), dev)
    tables: dict = {}  # rows of one table row (a request's rows) share one gather
    for r in range(len(pos)):
        tables.setdefault(bt[r].tobytes(), []).append(r)
    worst = 0.0
    for rows in tables.values():
        n = int(pos[rows].max()) + 1
        keys, scale = peers.gather_keys(cache, bt[rows[0]], n)
        own = peers.index_scores(q8[rows], w[rows], keys, scale, pos[rows], fmt=p.fp8.name,
                                 fp8_mm=False, dtype=_f64(),
                                 bf16_head_sum=bf16_sum).cpu().numpy()
        for i, r in enumerate(rows):
            worst = max(worst, rel_err(got[r, :pos[r] + 1], own[i, :pos[r] + 1]))
    tol = BF16_HEAD_SUM_TOL if bf16_sum else HOPPER_FP8_ACC_TOL if p.wgmma else SCORES_OWN_TOL
    out["scores vs own operands"] = dict(rel_err=worst, tol=tol, ok=bool(worst <= tol))
    return out


def _f64():
    import torch
    return torch.float64


# ----------------------------------------------------------------------------------- backends

class Backend:
    """Runs a launch: `target` (the spec's), `prepare(inputs)` -> what run takes, `run(L,
    prepared, arena, step, timeline)` -> Result with numpy outputs, `new_arena(L)`."""
    name = ""
    target = ""

    def new_arena(self, L):
        return L.new_arena()

    def prepare(self, inputs: dict) -> dict:
        return inputs

    def outputs(self, L, result, prepared, inputs) -> dict:
        return {n: np.asarray(v) for n, v in result.outputs.items()}


class InterpBackend(Backend):
    name, target = "interp", "interp"

    def __init__(self, mode: str = "inorder", seed: int = 0):
        self.mode, self.seed = mode, seed

    def run(self, L, prepared, arena, step, timeline=None):
        return L.run_interp(prepared, arena=arena, step=step, mode=self.mode, seed=self.seed,
                            timeline=timeline)


def to_device(a: np.ndarray, device: str = "cuda"):
    """A device copy of the array, its shape and dtype kept (launches may validate inputs
    on the host copy of a tensor); unsigned 16/32/64-bit data (bf16 bits, ...) travels as the
    signed integer of its width (same bits: torch supports those everywhere)."""
    import torch
    a = np.ascontiguousarray(a).copy()
    if a.dtype.kind == "u" and a.dtype.itemsize > 1:
        a = a.view(np.dtype(f"i{a.dtype.itemsize}"))
    return torch.from_numpy(a).to(device)


def from_device(t, like: np.ndarray) -> np.ndarray:
    return t.cpu().numpy().view(like.dtype).reshape(like.shape)


class _GpuBackend(Backend):
    def new_arena(self, L):
        import torch
        return torch.zeros(L.arena.total_bytes, dtype=torch.uint8, device="cuda")

    def prepare(self, inputs):
        return {n: to_device(v) for n, v in inputs.items() if isinstance(v, np.ndarray)}

    def outputs(self, L, result, prepared, inputs):
        return {n: from_device(t, inputs[n]) for n, t in result.outputs.items()}


class CudaBackend(_GpuBackend):
    name, target = "cuda", "sm_90a"

    def __init__(self):
        from monokernel.launch import cuda
        if not cuda.available():
            raise RuntimeError("--backend cuda needs an NVIDIA GPU, a CUDA build of torch and "
                               "cuda-bindings; this machine has not all of them")

    def run(self, L, prepared, arena, step, timeline=None):
        return L.run_cuda(prepared, arena=arena, step=step, timeline=timeline)


class HipBackend(_GpuBackend):
    name = "hip"

    def __init__(self, target: str = "gfx950"):
        from monokernel.launch import hip
        hip.library()  # HipUnavailable with a clear message on a machine without ROCm
        self.target = target

    def run(self, L, prepared, arena, step, timeline=None):
        return L.run_hip(prepared, arena=arena, step=step, target=self.target, timeline=timeline)


def backend(name: str, *, chip: str = "gfx950", mode: str = "inorder", seed: int = 0) -> Backend:
    if name == "interp":
        return InterpBackend(mode, seed)
    if name == "cuda":
        return CudaBackend()
    if name == "hip":
        return HipBackend(chip)
    raise ValueError(f"unknown backend {name!r}")


def tune_list(s: str) -> list[tuple]:
    """--tune STAGE.ATTR=VALUE[,...] -> [(stage, attr, value text)]; a malformed item is an
    argparse error naming it (the stage and attribute are checked against the launch)."""
    out = []
    for item in csv(s):
        lhs, eq, val = item.partition("=")
        stage, dot, attr = lhs.partition(".")
        if not (eq and dot and stage and attr and val):
            raise argparse.ArgumentTypeError(f"--tune {item!r}: expected STAGE.ATTR=VALUE, "
                                             "e.g. ix_score.ss_keys=1")
        out.append((stage.strip(), attr.strip(), val.strip()))
    return out


class TuneAction(argparse.Action):
    """--tune given several times adds up (each a comma list, `tune_list`): one flag a
    tunable reads as well as one comma list. The same STAGE.ATTR set twice to different
    values is an error naming it (it was last-wins, which silently dropped the earlier
    flag's setting from an A/B run)."""

    def __call__(self, parser, namespace, values, option_string=None):
        have = list(getattr(namespace, self.dest, None) or [])
        seen = {(s, a): v for s, a, v in have}
        for s, a, v in values:
            if (s, a) in seen and seen[(s, a)] != v:
                parser.error(f"{option_string or '--tune'} {s}.{a} given twice: "
                             f"{seen[(s, a)]} and {v}")
            seen[(s, a)] = v
            if (s, a, v) not in have:
                have.append((s, a, v))
        setattr(namespace, self.dest, have)


def add_tune_option(ap, help_text: str):
    """The tools' --tune (repeatable: TuneAction)."""
    ap.add_argument("--tune", type=tune_list, action=TuneAction, default=[],
                    metavar="STAGE.ATTR=VALUE", help=help_text)


def inert_tunes(kind, spec, tunes, tuned, target: str) -> bool:
    """Whether `tunes` leave launch `tuned`'s kernel code as the defaults' (the same LLVM IR
    for `target`): a tunable inert in this build (e.g. ix_score.tma_slots without tma_keys,
    a one-page setting in a two-pages-a-step build) would make an A/B measure the default
    twice. Builds the default launch's kernel once more; False without tunes."""
    if not tunes:
        return False
    return same_code(launch_for(kind, spec, []), tuned, target)


def same_code(a, b, target: str) -> bool:
    """Whether launches `a` and `b` build the same kernel code for `target` (their LLVM IR,
    value numbers aside) and place the jobs alike (their schedule tables: a placement
    tunable, launch.profile or launch.lead_alone, changes only the table)."""
    from monokernel.build import emit_llvm
    return np.array_equal(a.table.data, b.table.data) and \
        _canonical_ir(emit_llvm(a.kernel(target), target)) == \
        _canonical_ir(emit_llvm(b.kernel(target), target))


def _canonical_ir(text: str) -> str:
    """LLVM IR with its numbered local names renumbered in order of first use: the builder's
    value counters run on across the kernels one process builds, so two builds of the same
    code differ only in those numbers."""
    names: dict = {}

    def rename(m):
        return names.setdefault(m.group(0), f"%n{len(names)}")
    return re.sub(r"%[A-Za-z_.]*\d[\w.]*", rename, text)


def warn_inert_tunes(kind, spec, tunes, tuned, target: str):
    """Print a warning where `inert_tunes` (the tools' A/B runs: time_layers, check_topk)."""
    if inert_tunes(kind, spec, tunes, tuned, target):
        names = ",".join(f"{s}.{a}={v}" for s, a, v in tunes)
        print(f"  WARNING: --tune {names} leaves {kind.name} {spec.path}'s {target} code as the "
              "defaults' (same LLVM IR): an inert setting in this build measures the default",
              flush=True)


def _tune_value(stage, attr: str, text: str):
    """`text` as the type of the tunable's current value (bool, int, int-or-None, or one of
    the names a string tunable's class lists in CHOICES)."""
    cur = getattr(stage, attr)
    t = text.lower()
    if isinstance(cur, str):
        choices = getattr(type(stage), "CHOICES", {}).get(attr, ())
        if t not in choices:
            raise ValueError(f"--tune {stage.name}.{attr}={text}: expected one of "
                             f"{', '.join(choices)}")
        return t
    if isinstance(cur, bool):
        if t in ("1", "true", "on", "yes"):
            return True
        if t in ("0", "false", "off", "no"):
            return False
        raise ValueError(f"--tune {stage.name}.{attr}={text}: expected a boolean (1/0, on/off)")
    if t == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--tune {stage.name}.{attr}={text}: expected an integer or none") from None


def apply_tunes(launch, tunes):
    """Set each (stage, attr, value) on the launch's stages of that name: only attributes
    a stage class lists in TUNABLES (its measured alternatives), before any kernel is built.
    Unknown stages, attributes or values are errors naming them. Returns the launch."""
    for stage_name, attr, text in tunes:
        stages = [st for st in launch.stages if st.name == stage_name]
        if not stages:
            raise ValueError(f"--tune: launch {launch.name} has no stage {stage_name!r}; its "
                             f"stages: {', '.join(dict.fromkeys(st.name for st in launch.stages))}")
        for st in stages:
            allowed = getattr(type(st), "TUNABLES", ())
            if attr not in allowed:
                raise ValueError(f"--tune: {attr!r} is not a tunable of stage {stage_name} "
                                 f"(tunables: {', '.join(allowed) or 'none'})")
            setattr(st, attr, _tune_value(st, attr, text))
    return launch


# --tune launch.ATTR=VALUE: passed to the kind's launch as a keyword (kinds whose launch
# takes it): waves = N waves a CTA; select_digits = the selection's radix plan, bits from the
# top joined by "-" (e.g. 6-9-9-8; stages.select.SelectConfig.digits); q_splits = the index
# q projection's split of q_lora (stages.index_plan.proj_splits; a value that does not divide
# its 128-blocks or does not fit the loads is an error naming it); k_splits = the index key
# projection's split of hidden (its W_k / W_w jobs; the same rule); lean_lists = 1 / 0, the
# select kinds' SelectConfig.lean_lists (every pass of the selection must agree on it)
# tail_finish = 1 / 0, the select kinds' SelectConfig.tail_finish (sel_out finishes a row
# after two exchanged digits); tail_per_slice = N, the select kinds' SelectConfig.
# tail_max_per_slice (the tail finish or the rounds chosen per row: a row takes the tail when
# its first digit's threshold bin holds at most N keys a slice; 0: off); tail_min_keys = N,
# the select kinds' SelectConfig.tail_min_keys (the tail finish for rows of at least N keys,
# the rounds for shorter ones; 0: off), the select kinds and index; cta_publish = 1 / 0, SelectConfig.cta_publish (the rounds'
# messages' cum sums by every wave), the select kinds and index; fold_first_digits = 1 / 0,
# SelectConfig.fold_first_digits (sel_h1 sums its row's first digits: no sel_h0), select_hist
# and index; lean_spans = 1 / 0, SelectConfig.lean_spans (the lean loop's waves list their
# own spans, no barrier in the loop), the select kinds and index; row_parts = 1 / 0,
# SelectConfig.row_parts (the fold sums the scoring's per-job first digits), index;
# group_max = 1 / 0, IndexPlan.group_max (sm_90a: the scoring also writes each row's 16-key
# group maxima, score_gmax, and the fused index's sel_h1 skips the groups below its
# threshold; on by default in the fused index on sm_90a at rows 8), index and index_scoring;
# select_hist: the maxima an input beside the first digits (SelectConfig.group_skip);
# tagged_parts = 0 / 1 / 2, FrontPlan.tagged_parts (the front's partial sums as tagged pairs
# that its post jobs poll, no job flags; 2: a probe word first), front and index
LAUNCH_TUNABLES = ("waves", "select_digits", "q_splits", "k_splits", "lean_lists", "finish_max",
                   "tail_finish", "tail_per_slice", "tail_min_keys", "cta_publish", "fold_first_digits",
                   "lean_spans", "fine_digits", "row_parts", "group_max", "tagged_parts")
# --tune launch.ATTR=VALUE set on the built Launch of any kind (how it is linked, not what it
# computes): pdl = 1, programmatic dependent launch (stages.launch.Launch.pdl);
# lds_overlay = 1, the stages' LDS in one shared range (stages.launch.Launch.lds_overlay);
# prefetch_next = 1, each job asks the L2 for the next job's constant inputs
# (stages.launch.Launch.prefetch_next); poll_backoff = N, the pause between every wait's polls
# in the chip's shortest, 1 .. monokernel.dsl.MAX_POLL_BACKOFF (stages.launch.Launch.
# poll_backoff; 1: 64 ns on sm_90a, 64 clocks on AMD)
LINK_TUNABLES = ("pdl", "lds_overlay", "prefetch_next", "poll_backoff")
LINK_INT_TUNABLES = ("poll_backoff",)  # the others are switches, 0 / 1
# --tune launch.ATTR=VALUE that place the jobs anew (what each job computes is unchanged;
# bench/NOTES.md v38): profile = FILE.csv, the job durations a timeline of the same build
# measured (`time_layers --timeline --jobs-csv FILE.csv`; monokernel.profile) in the cost
# model's place; lead_alone = 1, nothing queued behind a lead job on its CTA
# (monokernel.schedule.list_schedule)
PROFILE_TUNE = "profile"
SCHEDULE_TUNABLES = (PROFILE_TUNE, "lead_alone")


def launch_tune_value(attr: str, text: str):
    """The value of --tune launch.ATTR=TEXT (ATTR one of LAUNCH_TUNABLES)."""
    try:
        if attr == "select_digits":
            digits = tuple(int(x) for x in text.split("-"))
        else:
            return int(text)
    except ValueError:
        form = "bit counts joined by '-', e.g. 6-9-9-8" if attr == "select_digits" else \
            "an integer"
        raise ValueError(f"--tune launch.{attr}={text}: expected {form}") from None
    from stages.select import KEY_BITS, check_digits
    # a plan the selection cannot run: an error naming it (a plan short of 32 bits by the
    # fine digit's is one for launch.fine_digits=1, which the built config then checks)
    return check_digits(digits, fine=sum(digits) != KEY_BITS)


def _link_int(attr: str, text: str) -> int:
    """The value of --tune launch.ATTR=TEXT for ATTR in LINK_INT_TUNABLES (the DSL's own
    check_poll_backoff decides what is valid)."""
    from monokernel.dsl import MAX_POLL_BACKOFF, DSLError, check_poll_backoff
    try:
        return check_poll_backoff(int(text), f"--tune launch.{attr}")
    except (ValueError, DSLError):
        raise ValueError(f"--tune launch.{attr}={text}: expected an int in 1 .. "
                         f"{MAX_POLL_BACKOFF}") from None


def launch_for(kind, spec, tunes=()):
    """kind.launch(spec) with the --tune settings applied: `launch.ATTR=VALUE` (one of
    LAUNCH_TUNABLES) builds the launch with that keyword, the others set stage tunables."""
    kw, link, rest, place = {}, {}, [], {}
    for stage_name, attr, text in tunes:
        if stage_name != "launch":
            rest.append((stage_name, attr, text))
            continue
        if attr in SCHEDULE_TUNABLES:
            if attr != PROFILE_TUNE and text not in ("0", "1"):
                raise ValueError(f"--tune launch.{attr}={text}: expected 0 or 1")
            place[attr] = text
            continue
        if attr in LINK_INT_TUNABLES:
            link[attr] = _link_int(attr, text)
            continue
        if attr in LINK_TUNABLES:
            if text not in ("0", "1"):
                raise ValueError(f"--tune launch.{attr}={text}: expected 0 or 1")
            link[attr] = text == "1"
            continue
        if attr not in LAUNCH_TUNABLES:
            raise ValueError(f"--tune launch.{attr}: the launch's tunables are "
                             f"{', '.join(LAUNCH_TUNABLES + LINK_TUNABLES + SCHEDULE_TUNABLES)}")
        kw[attr] = launch_tune_value(attr, text)
    for attr in kw:
        if attr not in kind.launch_tunables:
            raise ValueError(f"--tune launch.{attr}: kind {kind.name} builds that part of its "
                             f"launch itself (its launch tunables: "
                             f"{', '.join(kind.launch_tunables) or 'none'})")
    launch = apply_tunes(kind.launch(spec, **kw), rest)
    for attr, value in link.items():
        setattr(launch, attr, value)
    if place:
        return _place_anew(launch, place)
    return launch


def _place_anew(launch, place: dict):
    """The launch placed anew by SCHEDULE_TUNABLES' settings {attr: text}."""
    cost = launch.schedule.cost_model
    if "lead_alone" in place:
        launch.lead_alone = place["lead_alone"] == "1"
    profile = place.get(PROFILE_TUNE)
    if profile is not None:
        from monokernel.profile import profiled_cost
        try:
            cost = profiled_cost(launch.graph, profile, cost)
        except ValueError as e:
            raise ValueError(f"--tune launch.{PROFILE_TUNE}={profile}: {e}") from None
    return launch.reschedule(cost)


def add_spec_options(ap, *, config: str, kv: list, kind_help: str):
    """The build-matrix options every tool shares (--kind --config --tp --rows --kv --tune),
    with the tool's own defaults for config and kv."""
    add_tune_option(ap, "set a stage's tunable for this run (its class's TUNABLES, e.g. "
                        "ix_score.ss_keys=1; launch.waves=N: the CTA size in waves); repeatable "
                        "or a comma list; the build manifest records it")
    ap.add_argument("--kind", type=kind_list, default=None, help=kind_help)
    ap.add_argument("--config", type=config_name, default=config,
                    help=f"model config (default {config})")
    ap.add_argument("--tp", type=tp_value, default=None,
                    help="tensor-parallel size (default 1 for tiny, 8 for GLM configs)")
    ap.add_argument("--rows", type=rows_list, default=[2, 4, 8],
                    help="comma list of row widths (default 2,4,8)")
    ap.add_argument("--kv", type=kv_list, default=list(kv),
                    help=f"comma list of MLA cache kinds: fp8, bf16 (default {','.join(kv)})")


def add_workload_option(ap):
    """--workload W1,W2 (DESIGN.md section 8) for kinds with a key cache."""
    ap.add_argument("--workload", type=workload_list, default=["W1"],
                    help="comma list of workloads of kinds with a key cache (index, "
                         "index_scoring): W1 = one request of R rows, W2 = R/2 requests of 2 "
                         "rows whose block tables map the same pages (default W1; ignored, "
                         "with a note, for kinds without a key cache)")


def workloads_for(launch, workloads) -> list:
    """The workloads that apply to the launch: ["-"] for a kind without a key cache."""
    return list(workloads) if has_key_cache(launch) else ["-"]
