"""The DeepSeek V3.2 architecture: DeepSeek V3's, plus the sizes of the lightning indexer."""

from __future__ import annotations

from typing import Any

import attrs

from kvgate.models.deepseek_v3.arch import DeepseekArch, check_names, mla_fields

ARCHITECTURES = {"deepseek_v32": "deepseek_v32", "DeepseekV32ForCausalLM": "deepseek_v32"}


@attrs.define
class DeepseekV32Arch(DeepseekArch):
    """``index_heads`` indexer query heads of ``index_dim`` dims (the first ``rope_dim`` rotated) score
    every cached indexer key; a query attends to the ``index_topk`` best-scoring tokens."""

    index_heads: int
    index_dim: int
    index_topk: int

    @property
    def cached_dim(self) -> int:
        """Cached dims per token and layer: the latent, the rotated key, then the indexer key."""
        return self.latent_dim + self.index_dim

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "DeepseekV32Arch":
        check_names(config, ARCHITECTURES, "DeepSeek V3.2")
        fields = mla_fields(config, "deepseek_v32", "DeepSeek V3.2")
        try:
            index = dict(index_heads=int(config["index_n_heads"]), index_dim=int(config["index_head_dim"]),
                         index_topk=int(config["index_topk"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad DeepSeek V3.2 config.json: {exc!r}") from None
        if fields["q_lora_rank"] is None:
            raise ValueError("bad DeepSeek V3.2 config.json: the indexer reads the query bottleneck, "
                             "q_lora_rank is required")
        if not fields["rope_dim"] <= index["index_dim"] or min(index.values()) <= 0:
            raise ValueError(f"bad DeepSeek V3.2 config.json: indexer sizes {index} "
                             f"(index_head_dim must hold qk_rope_head_dim {fields['rope_dim']})")
        return cls(**fields, **index)
