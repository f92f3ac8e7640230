"""The Gemma 4 text architecture (``gemma4_text``), read from ``config.json``.

Per layer: its attention type (sliding or full), head width and KV heads (full layers take
``global_head_dim`` / ``num_global_key_value_heads``, or ``per_layer_config`` as transformers saves
it), the layer whose K/V it reads (itself, or under ``num_kv_shared_layers`` the last unshared layer
of its type) and its MLP width (``use_double_wide_mlp`` doubles the shared layers'). A config the
runtime cannot serve exactly is refused here, naming its key.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

ARCHITECTURES = {"gemma4_text": "gemma4", "Gemma4ForCausalLM": "gemma4", "gemma4": "gemma4",
                 "Gemma4ForConditionalGeneration": "gemma4"}
SLIDING, FULL = "sliding_attention", "full_attention"
ACTIVATIONS = ("gelu_pytorch_tanh", "gelu", "silu")
ROPE_TYPES = ("default", "proportional")
LAYER_OVERRIDES = ("head_dim", "num_key_value_heads")


@attrs.frozen
class Rope:
    """One layer type's rotary embedding: ``theta``, rotated share of each head (``proportional``:
    the first ``partial`` of its frequency pairs turn, the rest stay still) and ``factor``."""

    theta: float
    partial: float = 1.0
    factor: float = 1.0


@attrs.frozen
class Gemma4Arch:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    heads: int
    layer_types: tuple[str, ...]
    head_dims: tuple[int, ...]
    kv_heads: tuple[int, ...]
    kv_sources: tuple[int, ...]  # the layer whose K/V layer i attends over
    mlp_widths: tuple[int, ...]
    sliding_window: int
    rope: dict[str, Rope]
    rms_eps: float
    activation: str
    trained_context: int
    tie_embeddings: bool
    attention_bias: bool
    k_eq_v: bool  # full layers' values are their keys' projection
    final_softcap: Optional[float]
    per_layer_dim: int  # per-layer inputs' width (0: none)
    per_layer_vocab: int
    experts: int = 0  # 0: no MoE block
    top_k: int = 0
    moe_width: int = 0
    # set by :func:`kvgate.models.rope_scaling.served_rope` to serve past max_position_embeddings (refused)
    rope_scaling: Optional[dict[str, Any]] = None

    @property
    def layers(self) -> int:
        return len(self.layer_types)

    def sliding(self, index: int) -> bool:
        return self.layer_types[index] == SLIDING

    def cached(self, index: int) -> bool:
        """Whether layer ``index`` writes K/V of its own (a KV-shared layer reads another's)."""
        return self.kv_sources[index] == index

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> "Gemma4Arch":
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        if not any(name in ARCHITECTURES for name in names):
            raise ValueError(f"not a Gemma 4 model (model_type/architectures: {names})")
        text = dict(config.get("text_config") or config)
        try:
            return cls(**_fields(text))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"bad Gemma 4 config.json: {exc!r}") from None


def _fields(text: dict[str, Any]) -> dict[str, Any]:
    _refuse(text)
    layers, heads = int(text["num_hidden_layers"]), int(text["num_attention_heads"])
    types = tuple(text.get("layer_types") or [SLIDING if (i + 1) % 6 else FULL for i in range(layers)])
    if len(types) != layers or set(types) - {SLIDING, FULL}:
        raise ValueError(f"Gemma 4 layer_types {list(types)} must name {layers} sliding/full attention layers")
    types = types[:-1] + (FULL,)  # transformers forces the last layer to full attention
    head_dims, kv_heads = _layer_shapes(text, types)
    shared = int(text.get("num_kv_shared_layers") or 0)
    sources = _kv_sources(types, shared)
    double = bool(text.get("use_double_wide_mlp"))
    width = int(text["intermediate_size"])
    moe = bool(text.get("enable_moe_block"))
    return dict(
        architecture="gemma4", vocab_size=int(text["vocab_size"]), hidden_size=int(text["hidden_size"]),
        intermediate_size=width, heads=heads, layer_types=types, head_dims=head_dims, kv_heads=kv_heads,
        kv_sources=sources, mlp_widths=tuple(width * (2 if double and sources[i] != i else 1) for i in range(layers)),
        sliding_window=int(text.get("sliding_window") or 512), rope=_ropes(text, types),
        rms_eps=float(text.get("rms_norm_eps", 1e-6)), activation=text.get("hidden_activation") or "gelu_pytorch_tanh",
        trained_context=int(text.get("max_position_embeddings", 131072)),
        tie_embeddings=bool(text.get("tie_word_embeddings", True)), attention_bias=bool(text.get("attention_bias")),
        k_eq_v=bool(text.get("attention_k_eq_v")), final_softcap=_float_or_none(text.get("final_logit_softcapping")),
        per_layer_dim=int(text.get("hidden_size_per_layer_input") or 0),
        per_layer_vocab=int(text.get("vocab_size_per_layer_input") or text["vocab_size"]),
        experts=int(text["num_experts"]) if moe else 0, top_k=int(text["top_k_experts"]) if moe else 0,
        moe_width=int(text["moe_intermediate_size"]) if moe else 0)


def _refuse(text: dict[str, Any]) -> None:
    """Refuse what this runtime does not compute exactly as transformers does."""
    if text.get("use_bidirectional_attention") == "all":
        raise ValueError("Gemma 4 use_bidirectional_attention = 'all' is not supported (a causal runtime)")
    if (activation := text.get("hidden_activation") or "gelu_pytorch_tanh") not in ACTIVATIONS:
        raise ValueError(f"Gemma 4 hidden_activation {activation!r} is not supported ({', '.join(ACTIVATIONS)})")
    if text.get("attn_logit_softcapping") is not None:
        raise ValueError("Gemma 4 attn_logit_softcapping is not supported (transformers' Gemma 4 does not apply it)")
    per_layer_vocab = text.get("vocab_size_per_layer_input")
    if text.get("hidden_size_per_layer_input") and per_layer_vocab and int(per_layer_vocab) < int(text["vocab_size"]):
        raise ValueError(f"Gemma 4 vocab_size_per_layer_input {per_layer_vocab} is under vocab_size "
                         f"{text['vocab_size']}: some tokens would have no per-layer input")
    layers = int(text["num_hidden_layers"])
    if int(text.get("num_kv_shared_layers") or 0) >= layers:
        raise ValueError(f"Gemma 4 num_kv_shared_layers {text['num_kv_shared_layers']} leaves no layer with K/V")


def _layer_shapes(text: dict[str, Any], types: tuple[str, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Each layer's (head_dim, kv_heads), as transformers' ``per_layer_config`` resolves them."""
    heads = int(text["num_attention_heads"])
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    kv = int(text.get("num_key_value_heads") or heads)
    overrides = text.get("per_layer_config")
    if overrides is None:
        full = {"head_dim": int(text.get("global_head_dim") or 512)}
        global_kv = text.get("num_global_key_value_heads")
        if global_kv is not None and text.get("attention_k_eq_v"):
            full["num_key_value_heads"] = int(global_kv)
        overrides = {i: full for i, kind in enumerate(types) if kind == FULL}
    by_layer = {int(i): dict(o or {}) for i, o in overrides.items()}
    for index, override in by_layer.items():
        if set(override) - set(LAYER_OVERRIDES) or not 0 <= index < len(types):
            raise ValueError(f"Gemma 4 per_layer_config[{index}] {override} is not supported "
                             f"(only {', '.join(LAYER_OVERRIDES)} of an existing layer)")
    dims = tuple(int(by_layer.get(i, {}).get("head_dim", head_dim)) for i in range(len(types)))
    kvs = tuple(int(by_layer.get(i, {}).get("num_key_value_heads", kv)) for i in range(len(types)))
    for kind in set(types):  # one rope table per layer type: its head width must be one
        if len({d for d, t in zip(dims, types) if t == kind}) > 1:
            raise ValueError(f"Gemma 4 per_layer_config gives {kind} layers different head_dim")
    if any(heads % k for k in kvs):
        raise ValueError(f"Gemma 4 num_attention_heads {heads} is not a multiple of every layer's KV heads {kvs}")
    return dims, kvs


def _kv_sources(types: tuple[str, ...], shared: int) -> tuple[int, ...]:
    """Layer i itself, or for the last ``shared`` layers the last unshared layer of their type."""
    first_shared = len(types) - shared
    sources = list(range(len(types)))
    for index in range(first_shared, len(types)):
        producers = [j for j in range(first_shared) if types[j] == types[index]]
        if not producers:
            raise ValueError(f"Gemma 4 num_kv_shared_layers {shared}: no unshared {types[index]} layer to share")
        sources[index] = producers[-1]
    return tuple(sources)


def _ropes(text: dict[str, Any], types: tuple[str, ...]) -> dict[str, Rope]:
    params = text.get("rope_parameters") or {
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}
    ropes = {}
    for kind in set(types):
        rope = params.get(kind)
        if rope is None:
            raise ValueError(f"Gemma 4 rope_parameters has no {kind!r} entry")
        rope_type = rope.get("rope_type") or "default"
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"Gemma 4 rope_parameters.{kind}.rope_type {rope_type!r} is not supported "
                             f"({', '.join(ROPE_TYPES)})")
        partial = float(rope.get("partial_rotary_factor") or 1.0) if rope_type == "proportional" else 1.0
        factor = float(rope.get("factor") or 1.0) if rope_type == "proportional" else 1.0
        ropes[kind] = Rope(theta=float(rope["rope_theta"]), partial=partial, factor=factor)
    return ropes


def _float_or_none(value: Any) -> Optional[float]:
    return None if value is None else float(value)
