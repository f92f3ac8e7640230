"""Readers of a Hugging Face directory that every runtime shares.

Reads ``config.json``, ``*.safetensors``, ``tokenizer_config.json`` (special tokens,
``chat_template``), ``chat_template.jinja`` and ``generation_config.json`` (eos ids); a runtime
builds its architecture and weights from what they return (see :mod:`kvgate.models.loading`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from kvgate.core.config import ModelConfig

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token")


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path} is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def read_chat_template(directory: Path, tokenizer_config: dict[str, Any]) -> Optional[str]:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) else None


def read_special_tokens(tokenizer_config: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in SPECIAL_NAMES:
        value = tokenizer_config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def eos_ids(directory: Path, config: dict[str, Any], tokenizer: Tokenizer, specials: dict[str, str]) -> list[int]:
    found: list[int] = []
    generation = directory / "generation_config.json"
    sources = [config.get("eos_token_id")]
    if generation.is_file():
        sources.append(read_json(generation).get("eos_token_id"))
    if "eos_token" in specials:
        sources.append(tokenizer.token_to_id(specials["eos_token"]))
    for value in sources:
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and item not in found:
                found.append(item)
    return found


def generation_sampling(directory: Path) -> dict[str, Any]:
    """The raw ``generation_config.json`` (its sampling values become server defaults), or {}."""
    generation = directory / "generation_config.json"
    return read_json(generation) if generation.is_file() else {}


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory} holds no *.safetensors weights")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except Exception as exc:  # safetensors raises its own error types for corrupt files
            raise ValueError(f"cannot read weights {file}: {exc}") from None
    return tensors


def int_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) else None


def max_context(arch: Any, model_config: ModelConfig, default_context: int = 0) -> int:
    """The served context: ``model.max_context``, else ``default_context`` (a default model's own,
    extended by design), else the trained context of ``arch``."""
    if not model_config.max_context and default_context:
        return default_context
    wanted = model_config.max_context or arch.trained_context
    if wanted > arch.trained_context and not model_config.allow_context_extension:
        raise ValueError(
            f"model.max_context {wanted} exceeds the trained context {arch.trained_context}; "
            "set model.allow_context_extension = true to serve past it (quality degrades)")
    return wanted


def read_tokenizer(directory: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as exc:
        raise ValueError(f"cannot read {directory / 'tokenizer.json'}: {exc}") from None
