"""Is a client's schema JSON Schema at all? A meta-schema check with a short, pointed error.

The dialect is the one ``$schema`` names (Draft 7, 2019-09, 2020-12, ...), Draft 2020-12 when it
names none. The error names where the schema came from (the tool), the offending keyword and its
path, in one line: never the schema itself nor a grammar.
"""

from __future__ import annotations

from typing import Any

from kvgate.core.fence.errors import FenceRequestError

MESSAGE_CHARS = 160


def check_schema(schema: Any, where: str, param: str) -> None:
    """Raise FenceRequestError when ``schema`` is not a valid JSON Schema."""
    import jsonschema
    from jsonschema.validators import validator_for

    if not isinstance(schema, (dict, bool)):
        raise FenceRequestError(f"{where}: a JSON Schema must be an object or a boolean", param=param)
    try:
        validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as exc:
        path = "/".join(str(part) for part in exc.path)
        keyword = next((str(part) for part in reversed(exc.path) if isinstance(part, str)), exc.validator)
        message = exc.message if len(exc.message) <= MESSAGE_CHARS else exc.message[:MESSAGE_CHARS] + "..."
        raise FenceRequestError(f"{where}: invalid JSON Schema: keyword {keyword!r} at /{path}: {message}",
                                param=param) from None
    except RecursionError:
        raise FenceRequestError(f"{where}: the JSON Schema is nested too deeply", param=param) from None
