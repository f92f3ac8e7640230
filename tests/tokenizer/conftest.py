"""Tokenizers for the tokenizer-service tests.

* ``small_bpe``: a byte-level BPE trained here in well under a second, with ChatML special tokens
  and one added non-special token -- the same pipeline shape as SmolLM2's, but fast to build.
* ``smollm2_tokenizer``: the real SmolLM2 tokenizer, built from the embedded GGUF's metadata with
  :func:`kvgate.models.gguf_tokenizer.build_tokenizer` (about 2 s, once per session).
"""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from tests.tokenizer.tokenizers_for_tests import smollm2_from_gguf, train_byte_level_bpe


@pytest.fixture(scope="session")
def small_bpe() -> Tokenizer:
    return train_byte_level_bpe()


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Tokenizer:
    return smollm2_from_gguf()
