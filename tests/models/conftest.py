"""Fixtures of the model runtime tests."""

from __future__ import annotations

import pytest

from tests.models.tiny_models import TINY_CONFIGS, build_tiny
from tests.models.tiny_families import FAMILY_CONFIGS, build_tiny_family


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """name -> (directory, transformers model) for every tiny configuration."""
    built = {}
    for name in TINY_CONFIGS:
        directory = tmp_path_factory.mktemp(name)
        built[name] = (directory, build_tiny(directory, name))
    return built


@pytest.fixture(scope="session")
def family_models(tmp_path_factory):
    """name -> (directory, transformers model) for every tiny Qwen3 / Qwen3-MoE / GLM-4.5 configuration."""
    return {name: (directory, build_tiny_family(directory, name))
            for name in FAMILY_CONFIGS for directory in [tmp_path_factory.mktemp(name)]}
