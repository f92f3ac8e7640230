"""What a Llama-family model source says about itself without its tensors: architecture, chat
template, special tokens (for ``kvgate plugins``, which must not load weights).

A Hugging Face directory: ``config.json``, ``tokenizer_config.json``, ``chat_template.jinja``. A
GGUF file: the ``general.architecture`` and ``tokenizer.chat_template`` header keys (the special
token strings sit in the vocabulary array, which is not parsed here).
"""

from __future__ import annotations

from pathlib import Path

from kvgate.core.loading.model_runtimes import ModelPreview, PreviewInfo
from kvgate.core.runtime import ModelSource
from kvgate.models.gguf_header import read_header_value
from kvgate.models.llama.layers import ARCHITECTURES


def _architecture(names) -> str:
    return next((ARCHITECTURES[name] for name in names if name in ARCHITECTURES), "")


def preview_source(source: ModelSource) -> ModelPreview:
    if source.kind == "gguf":
        template = read_header_value(source.path, "tokenizer.chat_template")
        return ModelPreview(PreviewInfo(_architecture([source.architecture])),
                            template if isinstance(template, str) else None)
    from kvgate.models.hf_loader import read_chat_template, read_json, read_special_tokens

    directory = Path(source.path)
    tokenizer_file = directory / "tokenizer_config.json"
    tokenizer_config = read_json(tokenizer_file) if tokenizer_file.is_file() else {}
    return ModelPreview(PreviewInfo(_architecture([source.architecture, *source.architectures])),
                        read_chat_template(directory, tokenizer_config), read_special_tokens(tokenizer_config))
