"""Fixtures of the model runtime tests."""

from __future__ import annotations

import pytest

from tests.models.tiny_models import TINY_CONFIGS, build_tiny


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """name -> (directory, transformers model) for every tiny configuration."""
    built = {}
    for name in TINY_CONFIGS:
        directory = tmp_path_factory.mktemp(name)
        built[name] = (directory, build_tiny(directory, name))
    return built
