"""Model configurations and the build matrix (config x TP x rows x kv x target)."""
from .catalogue import CONFIGS, config
from .config import ModelConfig
from .matrix import KV_KINDS, ROWS, TARGETS, TPS, BuildSpec, SpecError, build_matrix

__all__ = ["CONFIGS", "config", "ModelConfig", "BuildSpec", "SpecError", "build_matrix",
           "KV_KINDS", "ROWS", "TARGETS", "TPS"]
