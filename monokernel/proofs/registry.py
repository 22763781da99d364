"""The list of proof kernels and the parameters each is built with."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class ProofKernel:
    name: str
    build: Callable  # build(target, **params) -> ir.Kernel
    full: dict = field(default_factory=dict)  # the shapes the README's build uses
    small: dict = field(default_factory=dict)  # the shapes CI runs in the interpreter
    targets: tuple = ("gfx950", "gfx942", "sm_90a")


def _proofs():
    from . import crosslane, gemv, handoff, rmsnorm
    out = [
        ProofKernel("rmsnorm", rmsnorm.build, dict(D=6144, waves=4), dict(D=1024, waves=2)),
        ProofKernel("crosslane", crosslane.build, {}, {}),
        ProofKernel("gemv_fp8", gemv.build, dict(N=2624, K=6144, R=8, waves=4),
                    dict(N=256, K=1024, R=2, waves=2)),
        ProofKernel("handoff", handoff.build, dict(pairs=64, bulk=256), dict(pairs=8, bulk=64)),
    ]
    try:
        from . import mma
    except ImportError:  # atoms still being written
        mma = None
    if mma is not None:
        for name in mma.ATOM_NAMES:
            out.append(ProofKernel(f"mma_{name}", mma.builder(name), {}, {}, mma.targets_of(name)))
    return {p.name: p for p in out}


class _Lazy(dict):
    def _load(self):
        if not super().__len__():
            super().update(_proofs())

    def __getitem__(self, k):
        self._load()
        return super().__getitem__(k)

    def __iter__(self):
        self._load()
        return super().__iter__()

    def __len__(self):
        self._load()
        return super().__len__()

    def items(self):
        self._load()
        return super().items()

    def values(self):
        self._load()
        return super().values()

    def keys(self):
        self._load()
        return super().keys()


PROOFS = _Lazy()
