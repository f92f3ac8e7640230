"""Fixtures of the model runtime tests."""

from __future__ import annotations

import pytest

from tests.models.tiny_models import TINY_CONFIGS, build_tiny
from tests.models.tiny_qwen3 import QWEN3_CONFIGS, build_tiny_qwen3


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """name -> (directory, transformers model) for every tiny configuration."""
    built = {}
    for name in TINY_CONFIGS:
        directory = tmp_path_factory.mktemp(name)
        built[name] = (directory, build_tiny(directory, name))
    return built


@pytest.fixture(scope="session")
def qwen3_models(tmp_path_factory):
    """name -> (directory, transformers model) for every tiny Qwen3 / Qwen3-MoE configuration."""
    return {name: (directory, build_tiny_qwen3(directory, name))
            for name in QWEN3_CONFIGS for directory in [tmp_path_factory.mktemp(name)]}
