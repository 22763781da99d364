"""The configurations a build can name."""
from __future__ import annotations

from dataclasses import replace

from .config import ModelConfig

GLM5 = ModelConfig(
    name="glm5", hidden=6144, layers=78, first_dense=3, heads=64, q_lora_rank=2048,
    kv_lora_rank=512, qk_nope=192, qk_rope=64, v_head=256, dense_intermediate=12288,
    moe_intermediate=2048, experts=256, shared_experts=1, experts_per_token=8,
    routed_scaling=2.5, vocab=154880, rms_eps=1e-5, rope_theta=1e6, index_heads=32,
    index_head_dim=128, index_topk=2048)
GLM51 = replace(GLM5, name="glm5.1")
# 5.2 / 5.3: the indexer runs on layers 0,1,2,6,10,...; the others reuse its top-k
GLM52 = replace(GLM5, name="glm5.2", rope_theta=8e6, index_topk_freq=4, index_skip_topk_offset=3)
GLM53 = replace(GLM52, name="glm5.3")
# The same structure at interpreter size: 2 K-splits of the front projection survive
# (hidden 1024 = 2 x 512), the index top-k stays 2048 so contexts of 8192+ keys span many
# 64-token pages and several selection slices per row.
TINY = ModelConfig(
    name="tiny", hidden=1024, layers=4, first_dense=1, heads=4, q_lora_rank=256,
    kv_lora_rank=128, qk_nope=64, qk_rope=64, v_head=64, dense_intermediate=512,
    moe_intermediate=128, experts=8, shared_experts=1, experts_per_token=2,
    routed_scaling=2.5, vocab=1024, rms_eps=1e-5, rope_theta=1e6, index_heads=4,
    index_head_dim=128, index_topk=2048, index_topk_freq=2, index_skip_topk_offset=1,
    max_context=1 << 15, front_k_splits=2)

CONFIGS = {c.name: c for c in (GLM5, GLM51, GLM52, GLM53, TINY)}


def config(name: str) -> ModelConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}") from None
