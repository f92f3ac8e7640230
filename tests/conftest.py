"""Suite-wide fixtures: the embedded SmolLM2-135M runtime, loaded once per test session.

The converted-weights cache goes to a session temp dir, or to ``$KVGATE_TEST_MODEL_CACHE`` when set
(reuse across runs: the GGUF conversion takes ~5 s, a cached load ~0.2 s).
"""

from __future__ import annotations

import os

import pytest


def _model_cache_dir(tmp_path_factory) -> str:
    return os.environ.get("KVGATE_TEST_MODEL_CACHE") or str(tmp_path_factory.mktemp("kvgate-models"))


@pytest.fixture(scope="session")
def smollm2_model_cache(tmp_path_factory) -> str:
    return _model_cache_dir(tmp_path_factory)


def _load_smollm2(dtype: str, cache_dir: str):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.llama.loading import load_runtime

    # the trained 8,192 (no YaRN): the comparisons against transformers load the plain GGUF
    return load_runtime(resolve_source(""), ModelConfig(dtype=dtype, max_context=8192), EngineConfig(), cache_dir)


@pytest.fixture(scope="session")
def smollm2_runtime(smollm2_model_cache):
    """SmolLM2-135M-Instruct in fp32 (exact comparisons). Release every session you create."""
    return _load_smollm2("fp32", smollm2_model_cache)


@pytest.fixture(scope="session")
def smollm2_runtime_bf16(smollm2_model_cache):
    """SmolLM2-135M-Instruct in bf16 (the serving dtype). Release every session you create."""
    return _load_smollm2("bf16", smollm2_model_cache)
