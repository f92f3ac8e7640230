"""The loop guard's tests use the fence tests' SmolLM2 tokenizer and model info."""

from tests.core.fence.conftest import config, drive, pm, smol_info, smol_tokenizer  # noqa: F401  (fixtures)
