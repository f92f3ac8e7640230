"""Model loading entry points: detect a source, convert GGUF once into a cache, build the runtime.

A GGUF file is converted into a Hugging Face directory under
``<cache_dir>/<hash of path, size, mtime and dtype>/`` (pass ``cache_dir = <state_dir>/models``);
the next start reads the converted safetensors directly.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors import safe_open

from kvgate.core.config import EngineConfig, ModelConfig
from kvgate.core.runtime import ModelSource
from kvgate.models.gguf_header import read_header_value
from kvgate.models.gguf_loader import convert_gguf
from kvgate.models.hf_loader import DTYPES, load_hf_directory, read_json
from kvgate.models.layers import ARCHITECTURES
from kvgate.models.llama import LlamaRuntime
from kvgate.models.progress import Progress

CONVERTER_VERSION = "1"
GGUF_MAGIC = b"GGUF"


def resolve_source(path: str) -> ModelSource:
    """A :class:`ModelSource` for a GGUF file or a Hugging Face directory, with its architecture."""
    if not path:
        from kvgate.models.embedded import embedded_gguf_path

        path = embedded_gguf_path()
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        config = read_json(Path(path) / "config.json")
        names = [config.get("model_type", "")] + list(config.get("architectures") or [])
        return ModelSource(path=path, kind="hf", architecture=str(names[0] or (names[1:] or [""])[0]))
    if not os.path.isfile(path):
        raise ValueError(f"model path {path!r} is neither a directory nor a file")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file (bad magic) nor a Hugging Face directory")
    architecture = read_header_value(path, "general.architecture")
    return ModelSource(path=path, kind="gguf", architecture=str(architecture or ""))


def gguf_cache_key(path: str, dtype: str) -> str:
    stat = os.stat(path)
    identity = json.dumps([os.path.abspath(path), stat.st_size, stat.st_mtime_ns, dtype, CONVERTER_VERSION])
    return hashlib.sha256(identity.encode()).hexdigest()[:24]


def cache_entry_readable(directory: Path) -> bool:
    """Whether a converted directory is complete: JSON files parse and the safetensors header is sound."""
    try:
        for name in ("config.json", "tokenizer_config.json"):
            read_json(directory / name)
        if not (directory / "tokenizer.json").is_file():
            return False
        with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
            return bool(list(handle.keys()))
    except Exception:  # any damage means "convert again"
        return False


def converted_directory(path: str, dtype: str, cache_dir: str, progress: Progress) -> Path:
    """The cached Hugging Face directory of a GGUF, converting it first when absent."""
    target = Path(cache_dir) / gguf_cache_key(path, dtype)
    if cache_entry_readable(target):
        return target
    shutil.rmtree(target, ignore_errors=True)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=cache_dir))
    try:
        convert_gguf(path, staging, DTYPES[dtype], progress)
        if not target.exists():
            os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def load_runtime(source: ModelSource, model_config: ModelConfig, engine_config: EngineConfig,
                 cache_dir: str) -> LlamaRuntime:
    if source.architecture and source.architecture not in ARCHITECTURES:
        raise ValueError(f"architecture {source.architecture!r} is not a Llama-family model")
    progress = Progress(os.path.basename(source.path.rstrip("/")) or source.path)
    if source.kind == "hf":
        return load_hf_directory(source.path, model_config, engine_config, progress)
    if source.kind != "gguf":
        raise ValueError(f"unknown model source kind {source.kind!r} (expected 'hf' or 'gguf')")
    directory = converted_directory(source.path, model_config.dtype, cache_dir, progress)
    return load_hf_directory(str(directory), model_config, engine_config, progress)
