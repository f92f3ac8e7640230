"""The cache of converted GGUF files: each is converted once into a Hugging Face directory.

A GGUF file is converted into a Hugging Face directory under
``<cache_dir>/<hash of path, size, mtime, dtype and, for int4, the weight format>/`` (pass
``cache_dir = <state_dir>/models``); the next start reads the converted safetensors directly. A
damaged entry is converted again. For int4 weights the Q4 linear weights are stored 4-bit.

Several servers may share one ``cache_dir``: an entry is checked and converted under an exclusive
lock on ``<key>.lock``, so one converts while the others wait and then read its result.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from safetensors import safe_open

from kvgate.models.gguf_loader import convert_gguf, q4_blocks_wanted
from kvgate.models.hf_loader import DTYPES, read_json
from kvgate.models.progress import Progress

CONVERTER_VERSION = "1"


def gguf_cache_key(path: str, dtype: str, weights: str = "bf16", native_layers: bool = False) -> str:
    stat = os.stat(path)
    fields = [os.path.abspath(path), stat.st_size, stat.st_mtime_ns, dtype, CONVERTER_VERSION]
    # only int4 changes what is stored (int8 quantizes the dense weights at load)
    # "packed-2": int4 conversions keep Q5 / Q8_0 / K-quant blocks (the embedding too) and a hybrid's
    # Q4 parts packed; entries written before hold those dense
    # "q4-blocks": a plain Llama's Q4_0 / Q4_1 projections kept as the file's blocks for the native
    # layer (gguf_loader.q4_blocks_wanted): asked for, and that kernel builds here
    q4_blocks = ["q4-blocks"] if q4_blocks_wanted(native_layers) else []
    identity = json.dumps(fields + (["int4", "packed-2", *q4_blocks] if weights == "int4" else []))
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


def converted_directory(path: str, dtype: str, cache_dir: str, progress: Progress, weights: str = "bf16",
                        native_layers: bool = False) -> Path:
    """The cached Hugging Face directory of a GGUF, converting it first when absent."""
    key = gguf_cache_key(path, dtype, weights, native_layers)
    target = Path(cache_dir) / key
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(cache_dir) / f"{key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache_entry_readable(target):
            convert_into(path, target, dtype, progress, weights, native_layers)
    return target


def convert_into(path: str, target: Path, dtype: str, progress: Progress, weights: str,
                 native_layers: bool = False) -> None:
    shutil.rmtree(target, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        convert_gguf(path, staging, DTYPES[dtype], progress, int4=weights == "int4",
                     q4_blocks=q4_blocks_wanted(native_layers))
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
