"""The canonical-split tests use the fence tests' SmolLM2 tokenizer and plugin manager."""

from tests.core.fence.conftest import config, pm, smol_info, smol_tokenizer  # noqa: F401  (fixtures)
