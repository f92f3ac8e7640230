"""The Lark translation tests use the fence tests' SmolLM2 tokenizer (for llguidance's own Lark parser)."""

from tests.core.fence.conftest import smol_tokenizer  # noqa: F401  (fixture)
