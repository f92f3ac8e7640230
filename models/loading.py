"""Load a family's runtime from a Hugging Face directory, or from a GGUF file converted once.

The shared readers (:mod:`kvgate.models.hf_loader`) give config, tokenizer, special tokens and
safetensors, block-scaled FP8 weights dequantized (:mod:`kvgate.models.fp8_blocks`); a
:class:`Family` says how its architecture and weights are built from them and which runtime serves
them (Llama's by default). A GGUF file is read through its converted Hugging Face directory
(:mod:`kvgate.models.gguf_cache`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, Optional

import attrs

from kvgate.core.config import EngineConfig, ModelConfig
from kvgate.core.runtime import ModelInfo, ModelRuntime, ModelSource
from kvgate.core.pipeline.sampling_defaults import valid_defaults
from kvgate.models import gguf_cache
from kvgate.models.fp8_blocks import dequantize_checkpoint
from kvgate.models.embedded import EMBEDDED_CONTEXT, declare_embedded_defaults, is_embedded
from kvgate.models.hf_loader import (DTYPES, eos_ids, generation_sampling, int_or_none, load_weights, max_context,
                                     read_chat_template, read_json, read_special_tokens, read_tokenizer, resolve_device)
from kvgate.models.gguf_kquant_store import gather_kquant
from kvgate.models.gguf_quant import gather_parts
from kvgate.models.llama.layers import ARCHITECTURES, LlamaArch, LlamaWeights
from kvgate.models.kv_runtime import kv_runtime
from kvgate.models.llama.quantize import quantize_weights
from kvgate.models.llama.runtime import LLAMA_PARTS
from kvgate.models.progress import Progress
from kvgate.models.rope_scaling import served_rope
from kvgate.models.weight_format import resolve_weights

log = logging.getLogger("kvgate")


@attrs.frozen
class Family:
    """A model family: the architecture names it loads (HF and GGUF), how its architecture is read
    from ``config.json`` and its weights from the tensors, and its runtime factory, called as
    ``runtime(arch, weights, info, tokenizer, chat_template, special_tokens, block_size,
    kv_pool_tokens, deterministic)`` (:func:`kvgate.models.kv_runtime.kv_runtime` of the family's
    parts, or a runtime class of its own)."""

    name: str
    names: frozenset[str] = attrs.field(converter=frozenset)
    arch: Callable[[dict[str, Any]], Any]
    runtime: Callable[..., ModelRuntime] = kv_runtime(LLAMA_PARTS)
    weights: Callable[..., Any] = LlamaWeights.from_hf_tensors
    # (arch, config, tensors, main weights, dtype, device) -> the draft layers its runtime's attach_mtp takes
    draft_weights: Optional[Callable[..., Any]] = None
    # (weights, format) -> the weights packed in that format, for weights other than LlamaWeights
    quantize: Optional[Callable[[Any, str], Any]] = None


LLAMA = Family("Llama-family", set(ARCHITECTURES), LlamaArch.from_hf_config)


def load_hf_directory(path: str, model_config: ModelConfig, engine_config: EngineConfig,
                      progress: Optional[Progress] = None, default_context: int = 0,
                      family: Family = LLAMA, weight_format: str = "bf16") -> ModelRuntime:
    """``default_context``: served when ``model.max_context`` is 0 (the embedded model's own);
    ``weight_format``: a resolved :mod:`kvgate.models.weight_format` ("bf16", "int8", "int4")."""
    progress = progress or Progress(path)
    directory = Path(path)
    config = read_json(directory / "config.json")
    arch = family.arch(config)
    context = max_context(arch, model_config, default_context)
    arch, caveat = served_rope(arch, context, model_config.context_extension)
    if caveat:
        log.warning("%s", caveat)
    if engine_config.kv_pool_tokens < context:
        log.warning("engine.kv_pool_tokens %d is less than the served context %d: a prompt that long cannot run",
                    engine_config.kv_pool_tokens, context)
    tokenizer_config = read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
    tokenizer = read_tokenizer(directory)
    progress.stage("reading weights")
    dtype, device = DTYPES[model_config.dtype], resolve_device(model_config.device)
    tensors = gather_kquant(gather_parts(dequantize_checkpoint(load_weights(directory), config, dtype)))
    weights = family.weights(arch, tensors, dtype, device)
    draft = draft_weights(family, arch, config, tensors, weights, engine_config, dtype, device)
    del tensors
    quantize = quantizer(family)
    if quantize is not None:
        weights = quantize(weights, weight_format)
    if isinstance(weights, LlamaWeights):
        weights.native = model_config.native_layers
    specials = read_special_tokens(tokenizer_config)
    bos = specials.get("bos_token")
    info = ModelInfo(name=model_config.name, architecture=arch.architecture, vocab_size=arch.vocab_size,
                     max_context=context, trained_context=arch.trained_context,
                     eos_token_ids=eos_ids(directory, config, tokenizer, specials),
                     bos_token_id=tokenizer.token_to_id(bos) if bos else int_or_none(config.get("bos_token_id")),
                     dtype=model_config.dtype, device=str(device),
                     sampling_defaults=valid_defaults(generation_sampling(directory)))
    runtime = family.runtime(arch, weights, info, tokenizer, read_chat_template(directory, tokenizer_config),
                             specials, engine_config.block_size, engine_config.kv_pool_tokens,
                             engine_config.invariant_arithmetic)
    if draft is not None:
        runtime.attach_mtp(draft)
    progress.stage("model ready")
    return runtime


def draft_weights(family: Family, arch, config: dict[str, Any], tensors, weights, engine_config: EngineConfig,
                  dtype, device) -> Any:
    """The MTP layer's weights when ``[engine] speculative = "mtp"`` (a clear error for a model
    without one), else None: the layer is not loaded unless it drafts."""
    if engine_config.speculative != "mtp":
        return None
    if family.draft_weights is None:
        raise ValueError(f'[engine] speculative = "mtp": {family.name} models have no MTP layer')
    return family.draft_weights(arch, config, tensors, weights, dtype, device)


def load_runtime(source: ModelSource, model_config: ModelConfig, engine_config: EngineConfig,
                 cache_dir: str, family: Family = LLAMA) -> ModelRuntime:
    """The runtime of ``source`` (``cache_dir`` holds converted GGUF weights)."""
    if source.architecture and source.architecture not in family.names:
        raise ValueError(f"architecture {source.architecture!r} is not a {family.name} model")
    progress = Progress(os.path.basename(source.path.rstrip("/")) or source.path)
    if source.kind not in ("hf", "gguf"):
        raise ValueError(f"unknown model source kind {source.kind!r} (expected 'hf' or 'gguf')")
    fmt = resolve_weights(model_config, source, resolve_device(model_config.device), quantizable(family))
    log.info("weights: %s (model.weights = %s)", fmt, model_config.weights)
    if source.kind == "hf":
        return load_hf_directory(source.path, model_config, engine_config, progress, family=family, weight_format=fmt)
    directory = gguf_cache.converted_directory(source.path, model_config.dtype, cache_dir, progress, fmt,
                                               model_config.native_layers)
    embedded = is_embedded(source.path)
    runtime = load_hf_directory(str(directory), model_config, engine_config, progress,
                                EMBEDDED_CONTEXT if embedded else 0, family, fmt)
    if embedded:
        declare_embedded_defaults(runtime.info)
    return runtime


def quantizer(family: Family) -> Optional[Callable[[Any, str], Any]]:
    """How the family's weights are packed: its own ``quantize``, Llama's for :class:`LlamaWeights`,
    else None (its weights stay dense)."""
    if family.quantize is not None:
        return family.quantize
    return quantize_weights if family.weights == LlamaWeights.from_hf_tensors else None


def quantizable(family: Family) -> bool:
    """Whether the family's weights can be held packed (int8 / int4)."""
    return quantizer(family) is not None
