"""Errors the pipeline raises; each adapter maps them onto its protocol's own error shape."""

from __future__ import annotations

from typing import Optional


class KvgateError(Exception):
    status = 500
    code: Optional[str] = "server_error"
    kind = "server_error"

    def __init__(self, message: str, *, param: Optional[str] = None, code: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequest(KvgateError):
    status = 400
    code = "invalid_value"
    kind = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, max_context: int, at_least: bool = False):
        """``at_least``: ``prompt_tokens`` is a lower bound (the prompt was refused untokenized)."""
        super().__init__(
            f"This model's maximum context length is {max_context} tokens. "
            f"However, your messages resulted in {'at least ' if at_least else ''}{prompt_tokens} tokens.",
            param="messages",
        )
        self.prompt_tokens = prompt_tokens
        self.max_context = max_context


class ModelNotFound(KvgateError):
    status = 404
    code = "model_not_found"
    kind = "invalid_request_error"


class NotFound(KvgateError):
    status = 404
    code = "not_found"
    kind = "invalid_request_error"


class Unauthorized(KvgateError):
    status = 401
    code = "invalid_api_key"
    kind = "authentication_error"


class Overloaded(KvgateError):
    status = 503
    code = "overloaded"
    kind = "overloaded_error"

    def __init__(self, message: str = "The server is at capacity; retry shortly.", retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class ConfigError(Exception):
    """A configuration file or option is invalid; the message names the key."""
