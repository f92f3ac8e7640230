"""The factory a dialect registers for each variant's whole-prompt chat format."""

from __future__ import annotations

from typing import Callable


def variant_format(variant: str, dialect_class: type, format_class: Callable) -> Callable:
    """``register_chat_formats``' factory for ``variant``: the format around the dialect in use when it
    is that variant of ``dialect_class``, else around a fresh one of that variant."""
    def build(runtime=None, dialect=None):
        ok = isinstance(dialect, dialect_class) and dialect.variant == variant
        return format_class(dialect if ok else dialect_class(variant))
    return build
