"""Typed field readers for hand-validated JSON bodies.

Each reader returns the value (or ``default`` when the field is absent or null) and raises
:class:`InvalidRequest` with ``param`` naming the field's full path (e.g. ``messages[1].content``)
when the type is wrong. JSON booleans are never accepted where a number is expected, nor NaN or an infinity (Python's
parser reads ``NaN`` and ``Infinity``) anywhere.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from kvgate.core.errors import InvalidRequest

_TYPE_NAMES = {str: "a string", bool: "a boolean", dict: "an object", list: "an array"}


def join(param: str, key: Any) -> str:
    """The path of a child field: ``join("messages", 1)`` is ``messages[1]``."""
    if isinstance(key, int):
        return f"{param}[{key}]"
    return f"{param}.{key}" if param else str(key)


def _wrong(param: str, expected: str, value: Any) -> InvalidRequest:
    got = "null" if value is None else type(value).__name__
    return InvalidRequest(f"Invalid type for '{param}': expected {expected}, but got {got}.", param=param)


def typed(obj: dict, key: str, kind: type, param: str, default: Any = None, required: bool = False) -> Any:
    """``obj[key]`` checked to be of ``kind`` (str, bool, dict or list)."""
    value = obj.get(key)
    path = join(param, key)
    if value is None:
        if required:
            raise InvalidRequest(f"Missing required parameter: '{path}'.", param=path)
        return default
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _wrong(path, _TYPE_NAMES[kind], value)
    return value


def number(obj: dict, key: str, param: str = "", low: Optional[float] = None,
           high: Optional[float] = None, default: Optional[float] = None) -> Optional[float]:
    """A JSON number within [low, high]."""
    value = obj.get(key)
    path = join(param, key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _wrong(path, "a number", value)
    _check_range(path, value, low, high)
    if not math.isfinite(value):
        raise InvalidRequest(f"Invalid value for '{path}': expected a finite number.", param=path)
    return float(value)


def integer(obj: dict, key: str, param: str = "", low: Optional[int] = None,
            high: Optional[int] = None, default: Optional[int] = None) -> Optional[int]:
    """A JSON integer within [low, high] (``3.0`` counts as an integer, ``3.5`` does not)."""
    value = obj.get(key)
    path = join(param, key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong(path, "an integer", value)
    _check_range(path, value, low, high)
    return value


def _check_range(path: str, value: float, low: Optional[float], high: Optional[float]) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidRequest(f"Invalid value for '{path}': {value} is not a finite number.", param=path)
    if low is not None and value < low:
        raise InvalidRequest(f"Invalid value for '{path}': {value} is less than the minimum of {low}.", param=path)
    if high is not None and value > high:
        raise InvalidRequest(f"Invalid value for '{path}': {value} is greater than the maximum of {high}.",
                             param=path)


def element(value: Any, kind: type, path: str) -> Any:
    """A list element checked to be of ``kind``."""
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _wrong(path, _TYPE_NAMES[kind], value)
    return value


def choice(obj: dict, key: str, allowed: tuple[str, ...], param: str = "",
           default: Optional[str] = None) -> Optional[str]:
    """A string that must be one of ``allowed``."""
    value = typed(obj, key, str, param, default=default)
    if value is not None and value not in allowed:
        path = join(param, key)
        options = ", ".join(repr(a) for a in allowed)
        raise InvalidRequest(f"Invalid value for '{path}': {value!r}. Supported values are: {options}.", param=path)
    return value
