"""llama.cpp's ``llama-quantize`` as a benchmark tool: the Q4_K_M file made from the embedded SmolLM2.

``llama-quantize`` is built with ``llama-server`` by ``bench/llama_server.py`` (one configure, both
targets, one stamp). ``quantize_q4_k_m()`` requantizes the embedded Q4_1 GGUF (or another GGUF) to
Q4_K_M with ``--allow-requantize`` and keeps the result in ``bench/.peer/quantized``, named after the
source file's hash and the llama.cpp version, so it is made once. ``cached_q4_k_m()`` returns that
file only when it was made already (tests use it without building anything). ``resolve_gguf()``
turns a bench's ``--gguf`` (``q4_1``, ``q4_k_m`` or a path) into a file path.

    python bench/llama_quantize.py [SOURCE.gguf]   # build (if needed), make Q4_K_M, list its tensor types
"""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from llama_server import SDIST_VERSION, peer_binary, peer_env  # noqa: E402

QUANTIZED_DIR = ROOT / "bench" / ".peer" / "quantized"
QUANT_TYPE = "Q4_K_M"


def source_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def embedded_gguf() -> Path:
    from models.embedded import embedded_gguf_path

    return Path(embedded_gguf_path())


def q4_k_m_path(source: Path) -> Path:
    return QUANTIZED_DIR / f"{source.stem}-{source_hash(source)}-llama.cpp-{SDIST_VERSION}.{QUANT_TYPE}.gguf"


def cached_q4_k_m(source: Optional[Path] = None) -> Optional[Path]:
    """The Q4_K_M file of ``source`` (default the embedded GGUF) when it was made already, else None."""
    path = q4_k_m_path(source or embedded_gguf())
    return path if path.is_file() else None


def quantize_q4_k_m(source: Optional[Path] = None, threads: int = 2) -> Path:
    """The Q4_K_M file of ``source`` (default the embedded GGUF), made with llama-quantize when missing."""
    source = source or embedded_gguf()
    path = q4_k_m_path(source)
    if path.is_file():
        return path
    binary = peer_binary("llama-quantize")
    QUANTIZED_DIR.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    # the source's weights are already quantized (Q4_1): requantizing them needs --allow-requantize
    cmd = [str(binary), "--allow-requantize", str(source), str(partial), QUANT_TYPE, str(threads)]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=peer_env(binary), stdout=subprocess.DEVNULL)
    os.replace(partial, path)
    return path


def resolve_gguf(name: str) -> str:
    """A bench's ``--gguf``: ``q4_1`` (or empty) the embedded file, ``q4_k_m`` its Q4_K_M, else a path."""
    if name.lower() in ("", "q4_1"):
        return str(embedded_gguf())
    if name.lower() == "q4_k_m":
        return str(quantize_q4_k_m())
    if not Path(name).is_file():
        raise SystemExit(f"--gguf {name!r} is neither q4_1, q4_k_m nor a GGUF file")
    return name


def tensor_types(path: Path) -> collections.Counter:
    """How many tensors of each ggml type ``path`` holds (read with gguf-py)."""
    import gguf

    return collections.Counter(tensor.tensor_type.name for tensor in gguf.GGUFReader(str(path)).tensors)


def main() -> None:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else embedded_gguf()
    path = quantize_q4_k_m(source)
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB (source {source.stat().st_size / 1e6:.1f} MB)")
    print("tensor types: " + ", ".join(f"{name} {count}" for name, count in tensor_types(path).most_common()))


if __name__ == "__main__":
    main()
