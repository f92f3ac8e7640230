"""The ``compaction`` item: a conversation summary, opaque to the client, that this server reads back.

Wire shape (output of ``POST /v1/responses/compact``, input of later requests)::

    {"type": "compaction", "id": "cmp_...", "encrypted_content": "kvgate-compaction:<base64 of the summary>"}

``encrypted_content`` is not encrypted, only encoded: the summary is the served model's own text and
carries nothing the client did not send. As input, the item becomes one user message: a fixed heading
and the summary. An item this server did not write cannot be read and is a 400 naming it.
"""

from __future__ import annotations

import base64
from typing import Any

from kvgate.core.errors import InvalidRequest

PREFIX = "kvgate-compaction:"
SUMMARY_HEADING = "Summary of the earlier conversation (compacted):\n"


def compaction_item(item_id: str, summary: str) -> dict[str, Any]:
    return {"type": "compaction", "id": item_id,
            "encrypted_content": PREFIX + base64.b64encode(summary.encode()).decode()}


def summary_message_text(item: dict[str, Any], where: str) -> str:
    """The user message text a ``compaction`` input item stands for."""
    opaque = item.get("encrypted_content")
    try:
        if not isinstance(opaque, str) or not opaque.startswith(PREFIX):
            raise ValueError("not ours")
        summary = base64.b64decode(opaque[len(PREFIX):], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        raise InvalidRequest(f"{where}.encrypted_content is not a compaction this server wrote; "
                             "compact the conversation here again.", param=f"{where}.encrypted_content") from None
    return SUMMARY_HEADING + summary


def is_summary_message(text: str) -> bool:
    return text.startswith(SUMMARY_HEADING)
