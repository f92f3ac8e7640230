"""The SSD tier's tests share the cache tests' fp32 SmolLM2 runtime."""

from tests.core.cache.conftest import cache_runtime  # noqa: F401  (a fixture, registered by import)
