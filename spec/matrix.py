"""The build matrix: config x TP x rows x kv cache kind x target, validated."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from monokernel.targets import target as get_target

from .catalogue import config as get_config
from .config import ModelConfig

TPS = (1, 4, 8)
ROWS = (2, 4, 8)
KV_KINDS = ("fp8", "bf16")
TARGETS = ("gfx950", "gfx942", "sm_90a", "interp")


class SpecError(ValueError):
    """A build spec outside what the compiler builds: names the bad value."""


@dataclass(frozen=True)
class BuildSpec:
    config: ModelConfig
    tp: int
    rows: int
    kv: str
    target: str

    @classmethod
    def make(cls, config: str | ModelConfig, tp: int | None = None, rows: int = 4, kv: str = "fp8",
             target: str = "interp") -> "BuildSpec":
        cfg = get_config(config) if isinstance(config, str) else config
        if tp is None:
            tp = 1 if cfg.name == "tiny" else 8
        if tp not in TPS:
            raise SpecError(f"TP {tp} is not built; choose from {TPS}")
        if rows not in ROWS:
            raise SpecError(f"rows {rows} is not built; choose from {ROWS}")
        if kv not in KV_KINDS:
            raise SpecError(f"kv cache kind {kv!r} is not built; choose from {KV_KINDS}")
        if target not in TARGETS:
            raise SpecError(f"target {target!r} is unknown; choose from {TARGETS}")
        if cfg.heads % tp or cfg.experts % tp:
            raise SpecError(f"TP {tp} does not divide {cfg.name}'s {cfg.heads} heads / "
                            f"{cfg.experts} experts")
        return cls(cfg, tp, rows, kv, target)

    @property
    def target_info(self):
        return get_target(self.target)

    @property
    def path(self) -> str:
        return f"{self.config.name}/tp{self.tp}/r{self.rows}/{self.kv}"

    def to_json(self) -> dict:
        return dict(config=self.config.name, tp=self.tp, rows=self.rows, kv=self.kv,
                    target=self.target)


def build_matrix(configs, tps, rows, kvs, targets) -> list[BuildSpec]:
    return [BuildSpec.make(c, t, r, k, g)
            for c, t, r, k, g in itertools.product(configs, tps, rows, kvs, targets)]
