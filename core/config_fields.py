"""Field validators of configuration sections, core and plugin alike.

A validator raises :class:`FieldError` so the loader can name the key: a plugin's section built
with these reads ``guard.max_token_repeats: must be positive, got 0`` exactly like a core one.
"""

from __future__ import annotations


class FieldError(ValueError):
    """A validator's complaint about one field, so the error can name its key."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.name, self.reason = name, reason


def positive(instance, attribute, value):
    if value <= 0:
        raise FieldError(attribute.name, f"must be positive, got {value}")


def non_negative(instance, attribute, value):
    if value < 0:
        raise FieldError(attribute.name, f"must not be negative, got {value}")


def one_of(*choices: str):
    def check(instance, attribute, value):
        if value not in choices:
            raise FieldError(attribute.name, f"must be one of {', '.join(choices)}, got {value!r}")

    return check


def optional_in_range(low: float, high: float):
    """Unset (None), or a number in [low, high]."""
    def check(instance, attribute, value):
        if value is not None and not low <= value <= high:
            raise FieldError(attribute.name, f"must be in [{low}, {high}], got {value}")

    return check
