"""What a GLM-5.x decode step computes, as numbers (../shared/docs/glm5-model.md)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

KEY_PAGE_TOKENS = 64  # indexer and MLA caches are paged 64 tokens a page
FP8_SCALE_BLOCK = 128  # one fp32 scale per 128 values (weights: 128 x 128 blocks)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    hidden: int
    layers: int
    first_dense: int
    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope: int
    qk_rope: int
    v_head: int
    dense_intermediate: int
    moe_intermediate: int
    experts: int
    shared_experts: int
    experts_per_token: int
    routed_scaling: float
    vocab: int
    rms_eps: float
    rope_theta: float
    index_heads: int
    index_head_dim: int
    index_topk: int
    index_eps: float = 1e-6
    # GLM-5.2/5.3 share one indexer's top-k over several layers (index_topk_freq=4, offset 3)
    index_topk_freq: int = 1
    index_skip_topk_offset: int = 0
    # switches for facts the public ports disagree on (glm5-model.md marks them unconfirmed)
    index_rope_interleaved: bool = False
    index_hadamard: bool = True
    max_context: int = 1 << 19  # 512K keys: the selection's stated limit
    front_k_splits: int = 0  # 0: derived by the front stage from the target

    @property
    def front_out(self) -> int:
        """q_a | kv_a: the fused front projection's outputs."""
        return self.q_lora_rank + self.kv_lora_rank + self.qk_rope

    def mla_cache_bytes(self, kv: str) -> int:
        """Bytes per token of the MLA latent cache: fp8 = latent e4m3 + one fp32 scale per 128
        + bf16 rope ("fp8_ds_mla": 656 B for GLM-5); bf16 = (latent + rope) bf16 (1152 B)."""
        if kv == "fp8":
            return self.kv_lora_rank + 4 * (self.kv_lora_rank // FP8_SCALE_BLOCK) + 2 * self.qk_rope
        if kv == "bf16":
            return 2 * (self.kv_lora_rank + self.qk_rope)
        raise ValueError(f"unknown kv cache kind {kv!r}; use 'fp8' or 'bf16'")

    @property
    def index_key_bytes(self) -> int:
        """Indexer cache bytes per token: e4m3 key + fp32 scale (132 B for head dim 128)."""
        return self.index_head_dim + 4

    def runs_indexer(self, layer: int) -> bool:
        """Layer i runs its own indexer iff max(i - offset + 1, 0) % freq == 0 (index sharing:
        GLM-5.2/5.3 give layers 0, 1, 2, 6, 10, ..., 74)."""
        if self.index_topk_freq == 1:
            return True
        return max(layer - self.index_skip_topk_offset + 1, 0) % self.index_topk_freq == 0

    def to_json(self) -> dict:
        return asdict(self)
