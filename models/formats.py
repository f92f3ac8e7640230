"""Plugin: the model formats every runtime shares, a Hugging Face directory and a GGUF file.

Each reader says what a path holds without touching its weights: a directory's ``config.json``
(``model_type`` and ``architectures``), a GGUF file's ``general.architecture`` header key. The host
matches those names against what each runtime declares (see :mod:`kvgate.core.loading.model_runtimes`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from kvgate.core.hookspecs import hookimpl
from kvgate.core.runtime import ModelSource
from kvgate.models.embedded import embedded_gguf_path
from kvgate.models.gguf_header import read_header_value

GGUF_MAGIC = b"GGUF"


def read_hf_directory(path: str) -> Optional[ModelSource]:
    """The source of a Hugging Face directory, or None when ``path`` is not a directory."""
    if not os.path.isdir(path):
        return None
    from kvgate.models.hf_loader import read_json  # imports torch: only when a directory is read

    config = read_json(Path(path) / "config.json")
    classes = tuple(str(name) for name in config.get("architectures") or [] if name)
    model_type = str(config.get("model_type") or "")
    return ModelSource(path=path, kind="hf", architecture=model_type or next(iter(classes), ""),
                       architectures=classes)


def read_gguf_file(path: str) -> Optional[ModelSource]:
    """The source of a GGUF file, or None when ``path`` is not a file starting with the GGUF magic."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            return None
    architecture = read_header_value(path, "general.architecture")
    return ModelSource(path=path, kind="gguf", architecture=str(architecture or ""))


def resolve_source(path: str) -> ModelSource:
    """The source at ``path`` (``~`` expanded), the embedded model when ``path`` is empty."""
    path = os.path.expanduser(path or embedded_gguf_path())
    for read in (read_hf_directory, read_gguf_file):
        source = read(path)
        if source is not None:
            return source
    if os.path.isfile(path):
        raise ValueError(f"{path} is not a GGUF file (bad magic) nor a Hugging Face directory")
    raise ValueError(f"model path {path!r} is neither a directory nor a file")


@hookimpl
def register_model_formats(register):
    register("hf", read_hf_directory)
    register("gguf", read_gguf_file)
