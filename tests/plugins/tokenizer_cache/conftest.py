"""The tokenizers of tests/tokenizer/conftest.py, for the tokenizer-cache plugin's tests."""

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
