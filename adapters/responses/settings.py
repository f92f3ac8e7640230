"""The ``[responses]`` config section, declared by the Responses adapter."""

from __future__ import annotations

import attrs


@attrs.define
class ResponsesConfig:
    """Where stored responses live (``previous_response_id``)."""

    store_path: str = ""  # empty = <state dir>/responses
