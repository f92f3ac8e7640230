"""The engine tests' shared fixture: a started :class:`Engine` over the real SmolLM2 runtime."""

from __future__ import annotations

import pytest

from kvgate.core.config import EngineConfig
from kvgate.core.engine.engine import Engine


@pytest.fixture
def engine(smollm2_runtime):
    engine = Engine(smollm2_runtime, EngineConfig())
    engine.start()
    yield engine
    engine.stop()
