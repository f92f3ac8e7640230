"""``POST /v1/responses/compact``: the served model summarises a conversation into one ``compaction`` item.

The body is a create body's conversation part (``model``, ``input``, ``previous_response_id``,
``instructions``, ``tools``, ...; ``max_output_tokens`` caps the summary, default
``[engine] default_max_tokens``, else :data:`SUMMARY_MAX_TOKENS`). The summary request is that
conversation, rendered as a create request would render it (so the prefix cache serves it), plus
one user message, :data:`SUMMARY_PROMPT`, with ``tool_choice`` ``none`` and free text (no
``text.format``). The reply (the SDK's ``CompactedResponse``)::

    {"id": "resp_...", "object": "response.compaction", "created_at": int,
     "output": [<every user message of the conversation, verbatim>, <exactly one compaction item>],
     "usage": <the summary pass's usage>}

Everything else (system and developer messages, assistant turns, reasoning, tool calls and their
outputs, earlier summaries) is what the summary stands for. Nothing is stored.

The same pass runs for a create request (HTTP, SSE or WebSocket) whose ``input`` holds a
``compaction_trigger`` item (Codex's remote compaction): its response has exactly one output item,
the ``compaction`` item (``output_item.added`` at once, progress while the summary is written, then
``output_item.done``: :mod:`.summary_pass`), and its record continues the conversation with the
summary as it reads back.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import attrs

from kvgate.core.errors import KvgateError
from kvgate.core.types import ChatRequest, Finished, Message, ResponseFormat, TextDelta, ToolChoice, Usage
from kvgate.adapters.responses import objects
from kvgate.adapters.responses.compaction_item import compaction_item, is_summary_message, summary_message_text
from kvgate.adapters.responses.render import StreamRenderer
from kvgate.adapters.responses.request import ResponsesCall

SUMMARY_MAX_TOKENS = 2048
SUMMARY_PROMPT = (
    "Stop here and write a summary of this conversation so far, to replace it: the earlier messages "
    "will be removed and only your summary and the user's own messages will remain. Keep the user's "
    "goals and constraints, what has been done and found (the tool results that matter, file names, "
    "commands, errors), the decisions taken, the current state and the next steps. Write only the summary."
)


def summary_request(call: ResponsesCall, default_max_tokens: Optional[int] = None) -> ChatRequest:
    chat = call.chat
    limit = chat.sampling.max_tokens or default_max_tokens or SUMMARY_MAX_TOKENS
    sampling = attrs.evolve(chat.sampling, max_tokens=limit, logprobs=False, top_logprobs=0)
    return attrs.evolve(chat, messages=[*chat.messages, Message(role="user", content=SUMMARY_PROMPT)],
                        tool_choice=ToolChoice(mode="none"), response_format=ResponseFormat(), sampling=sampling)


async def summarise(pipeline: Any, chat: ChatRequest) -> tuple[str, Usage]:
    """The model's summary (its answer text; reasoning is left out) and the pass's usage."""
    events = pipeline.stream(chat)
    pieces: list[str] = []
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                pieces.append(event.text)
            elif isinstance(event, Finished):
                if event.reason in ("error", "cancelled"):
                    raise KvgateError(f"The compaction summary could not be generated ({event.reason}).")
                return "".join(pieces).strip(), event.usage
    finally:
        await events.aclose()
    raise KvgateError("The compaction summary ended without a result.")


def kept_user_items(call: ResponsesCall) -> list[dict[str, Any]]:
    return [{"type": "message", "id": objects.new_id("msg"), "status": "completed", "role": "user",
             "content": [{"type": "input_text", "text": message.content}]}
            for message in call.conversation
            if message.role == "user" and not is_summary_message(message.content)]


async def compact(pipeline: Any, call: ResponsesCall, default_max_tokens: Optional[int] = None) -> dict[str, Any]:
    summary, usage = await summarise(pipeline, summary_request(call, default_max_tokens))
    output = kept_user_items(call) + [compaction_item(objects.new_id("cmp"), summary)]
    return {"id": objects.new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
            "output": output, "usage": objects.usage_object(usage)}


def is_compaction_trigger(body: dict[str, Any]) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(isinstance(item, dict) and item.get("type") == "compaction_trigger"
                                           for item in items)


class CompactionRenderer(StreamRenderer):
    """Renders a ``compaction_trigger`` request: its summary pass (:mod:`.summary_pass`) is the whole
    response, and its one output item the ``compaction`` item."""

    def compacted(self, item: dict[str, Any], usage: Usage) -> list[dict[str, Any]]:
        """The item's ``output_item.done`` and ``response.completed``."""
        self.response["usage"] = objects.usage_object(usage)
        self.assistant = Message(role="user", content=summary_message_text(item, "compaction"))  # the record's
        return self.item_done(item) + self._terminal("completed")
