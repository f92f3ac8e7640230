"""Errors fences raise. An incompatible tokenizer or a violated fence is a server-side failure; a
schema or tool choice the fence cannot honour is the client's (400)."""

from __future__ import annotations

from kvgate.core.errors import InvalidRequest, KvgateError


class FenceError(KvgateError):
    """The fence cannot be built for this model, or a token outside the fence was chosen."""

    code = "fence_error"


class FenceRequestError(InvalidRequest):
    """The request asks for a constraint that cannot be compiled (bad schema, unknown tool)."""
