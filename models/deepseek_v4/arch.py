"""The DeepSeek V4 architecture, read from a Hugging Face ``config.json`` (transformers' keys, or the
legacy ones DeepSeek's own checkpoints ship: ``compress_ratios``, ``num_hash_layers``,
``qk_rope_head_dim``, a flat ``rope_scaling``)."""

from __future__ import annotations

from typing import Any, Optional

import attrs

ARCHITECTURES = {"deepseek_v4": "deepseek_v4", "DeepseekV4ForCausalLM": "deepseek_v4"}
SLIDING, CSA, HCA = "sliding", "csa", "hca"
LAYER_KINDS = {"sliding_attention": SLIDING, "compressed_sparse_attention": CSA, "heavily_compressed_attention": HCA}
LEGACY_RATIOS = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


@attrs.define
class DeepseekV4Arch:
    """``kinds[i]`` is layer i's attention (sliding, csa or hca); ``hashed[i]`` whether its MoE routes by
    the token-id table. Each head has ``head_dim`` dims, the last ``rope_dim`` rotated in interleaved
    pairs; ``rope_scaling`` applies to the compressed layers' rope (base ``compress_rope_theta``) only."""

    architecture: str
    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    head_dim: int
    rope_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    kinds: tuple[str, ...] = attrs.field(converter=tuple)
    csa_rate: int
    hca_rate: int
    index_heads: int
    index_dim: int
    index_topk: int
    experts: int
    top_k: int
    moe_width: int
    shared_experts: int
    routed_scaling: float
    hashed: tuple[bool, ...] = attrs.field(converter=tuple)
    swiglu_limit: float
    hc_mult: int
    hc_iters: int
    hc_eps: float
    rms_eps: float
    rope_theta: float
    compress_rope_theta: float
    rope_scaling: Optional[dict[str, Any]]
    trained_context: int
    tie_embeddings: bool

    def rate(self, index: int) -> int:
        """Tokens per compressed entry of layer ``index`` (0 for a sliding-only layer)."""
        return {SLIDING: 0, CSA: self.csa_rate, HCA: self.hca_rate}[self.kinds[index]]

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "DeepseekV4Arch":
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        if not any(n in ARCHITECTURES for n in names):
            raise ValueError(f"not a DeepSeek V4 model (model_type/architectures: {names})")
        try:
            return cls(**_fields(config))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad DeepSeek V4 config.json: {exc!r}") from None


def _fields(config: dict[str, Any]) -> dict[str, Any]:
    layers, head_dim = int(config["num_hidden_layers"]), int(config["head_dim"])
    types = config.get("layer_types")
    if types is None and config.get("compress_ratios") is not None:
        types = [LEGACY_RATIOS[int(r)] for r in config["compress_ratios"]]
    if types is None:
        types = ["heavily_compressed_attention"] * min(layers, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(layers - 2)]
    if len(types) < layers or any(t not in LAYER_KINDS for t in types[:layers]):
        raise ValueError(f"layer_types {types} do not name {layers} V4 attention kinds")
    rates = dict(config.get("compress_rates") or {})
    csa = int(config.get("compress_rate_csa") or rates.get("compressed_sparse_attention") or 4)
    hca = int(config.get("compress_rate_hca") or rates.get("heavily_compressed_attention") or 128)
    mlp_types = config.get("mlp_layer_types")
    if mlp_types is None:
        hashed = int(config.get("num_hash_layers", 3))
        mlp_types = ["hash_moe"] * hashed + ["moe"] * layers
    if config.get("qk_rope_head_dim"):
        rope_dim = int(config["qk_rope_head_dim"])
    else:
        rope_dim = int(head_dim * float(config.get("partial_rotary_factor") or 64 / 512))
    if (config.get("scoring_func") or "sqrtsoftplus") != "sqrtsoftplus":
        raise ValueError(f"scoring_func {config.get('scoring_func')!r} (only sqrtsoftplus is supported)")
    if int(config.get("num_key_value_heads") or 1) != 1:
        raise ValueError("DeepSeek V4 has one shared K=V head (num_key_value_heads must be 1)")
    if rope_dim % 2 or not 0 < rope_dim <= head_dim:
        raise ValueError(f"rope dims {rope_dim} must be even and within head_dim {head_dim}")
    theta, compress_theta, scaling = _rope(config)
    return dict(
        architecture="deepseek_v4", vocab_size=int(config["vocab_size"]), hidden_size=int(config["hidden_size"]),
        layers=layers, heads=int(config["num_attention_heads"]), head_dim=head_dim, rope_dim=rope_dim,
        q_lora_rank=int(config["q_lora_rank"]), o_groups=int(config["o_groups"]),
        o_lora_rank=int(config["o_lora_rank"]), window=int(config.get("sliding_window") or 128),
        kinds=[LAYER_KINDS[t] for t in types[:layers]], csa_rate=csa, hca_rate=hca,
        index_heads=int(config["index_n_heads"]), index_dim=int(config["index_head_dim"]),
        index_topk=int(config["index_topk"]), experts=int(config["n_routed_experts"]),
        top_k=int(config["num_experts_per_tok"]), moe_width=int(config["moe_intermediate_size"]),
        shared_experts=int(config.get("n_shared_experts") or 0),
        routed_scaling=float(config.get("routed_scaling_factor") or 1.0),
        hashed=[t == "hash_moe" for t in mlp_types[:layers]], swiglu_limit=float(config.get("swiglu_limit") or 0.0),
        hc_mult=int(config.get("hc_mult") or 4), hc_iters=int(config.get("hc_sinkhorn_iters") or 20),
        hc_eps=float(config.get("hc_eps") or 1e-6), rms_eps=float(config.get("rms_norm_eps") or 1e-6),
        rope_theta=theta, compress_rope_theta=compress_theta, rope_scaling=scaling,
        trained_context=int(config.get("max_position_embeddings") or 1048576),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)))


def _rope(config: dict[str, Any]) -> tuple[float, float, Optional[dict[str, Any]]]:
    """(sliding layers' theta, compressed layers' theta, compressed layers' scaling or None)."""
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    main, compress = params.get("main"), params.get("compress")
    if isinstance(main, dict) and isinstance(compress, dict):
        theta, compress_theta, scaling = float(main["rope_theta"]), float(compress["rope_theta"]), dict(compress)
    else:
        theta = float(config.get("rope_theta") or 10000.0)
        compress_theta, scaling = float(config.get("compress_rope_theta") or 160000.0), params
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind == "default":
        return theta, compress_theta, None
    if kind != "yarn":
        raise ValueError(f"rope_type {kind!r} on compressed layers (only yarn is supported)")
    scaling = {k: v for k, v in scaling.items() if k not in ("rope_theta", "partial_rotary_factor")}
    scaling.setdefault("attention_factor", 1.0)  # V4 does not scale cos/sin by YaRN's mscale
    return theta, compress_theta, {**scaling, "rope_type": "yarn"}
