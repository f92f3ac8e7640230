"""Suite-wide fixtures: the embedded SmolLM2-135M runtime, loaded once per test session.

The converted-weights cache goes to a session temp dir, or to ``$KVGATE_TEST_MODEL_CACHE`` when set
(reuse across runs: the GGUF conversion takes ~5 s, a cached load ~0.2 s).
"""

from __future__ import annotations

import os

import pytest

from tests.harness import SHARED_WEIGHTS_ENV


@pytest.fixture(scope="session", autouse=True)
def smollm2_model_cache(tmp_path_factory) -> str:
    """The converted-weights folder of this session, shared by in-process loads and, through
    ``$KVGATE_TEST_MODEL_CACHE`` (see ``tests/harness.py``), by every test server's ``[model]
    weights_cache_dir`` unless a test sets its own."""
    if not os.environ.get(SHARED_WEIGHTS_ENV):
        os.environ[SHARED_WEIGHTS_ENV] = str(tmp_path_factory.mktemp("kvgate-models"))
    return os.environ[SHARED_WEIGHTS_ENV]


@pytest.fixture(scope="session", autouse=True)
def children_keep_bytecode() -> None:
    """The test servers and CLIs this session starts (~200 Pythons) compile kvgate's modules once
    and read the bytecode after, instead of each compiling them again (~0.3 s a start) where the
    environment says to write none: the ``__pycache__`` folders it writes are ignored by git."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _load_smollm2(dtype: str, cache_dir: str):
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

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


@pytest.fixture(scope="session")
def small_bpe():
    """A byte-level BPE trained here in well under a second, with ChatML special tokens and one added
    non-special token -- the same pipeline shape as SmolLM2's, but fast to build."""
    from tests.core.tokenizer.tokenizers_for_tests import train_byte_level_bpe

    return train_byte_level_bpe()


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer, built from the embedded GGUF's metadata with
    :func:`kvgate.models.gguf_tokenizer.build_tokenizer` (about 2 s, once per session)."""
    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    return smollm2_from_gguf()
