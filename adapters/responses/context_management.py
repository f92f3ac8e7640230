"""``context_management`` compaction on create: compact a conversation over its threshold, then answer.

Request field (``POST /v1/responses`` and WebSocket ``response.create``)::

    "context_management": [{"type": "compaction", "compact_threshold": N}]   # N >= 1000 tokens

When the rendered input (instructions, tools and conversation, as :meth:`count_prompt_tokens`
counts it) holds more than N tokens, the served model first writes a summary (the ``/compact``
pass of :mod:`.compaction`, capped at a quarter of N so the compacted context stays well under
it). The answer is then generated on the compacted context: the leading system messages and one
user message, the ``compaction`` item as it reads back. The compaction item also carries the
user's latest message verbatim, so it stands alone for everything before it. The response's
output begins with that item, and its record continues from the compacted context, so the next
turn (``previous_response_id``, or the input items resent from the compaction item on) extends the
answer's prompt and its prefix is cached. ``usage`` is the answer pass's. Without a threshold the
server compacts over :data:`DEFAULT_SHARE` of the context.
"""

from __future__ import annotations

import inspect
from typing import Any, Optional

import attrs

from kvgate.core.errors import InvalidRequest
from kvgate.core.types import ChatRequest, Message
from kvgate.adapters.responses.compaction import SUMMARY_MAX_TOKENS, summary_request
from kvgate.adapters.responses.compaction_item import compaction_item, is_summary_message, summary_message_text
from kvgate.adapters.responses.request import ResponsesCall

PARAM = "context_management"
MIN_THRESHOLD = 1000
DEFAULT_SHARE = 0.8  # of the model's context, when the entry gives no compact_threshold
LATEST_HEADING = "\n\nThe user's latest message:\n"


@attrs.define(frozen=True)
class CompactionPolicy:
    threshold: Optional[int]  # None: DEFAULT_SHARE of the context

    def tokens(self, max_context: int) -> int:
        return self.threshold if self.threshold is not None else int(max_context * DEFAULT_SHARE)


def compaction_policy(body: dict[str, Any]) -> Optional[CompactionPolicy]:
    """The request's compaction entry, validated (400 naming the bad part); None without one."""
    entries = body.get(PARAM)
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise InvalidRequest(f"{PARAM} must be an array of entries.", param=PARAM)
    policy = None
    for index, entry in enumerate(entries):
        where = f"{PARAM}[{index}]"
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise InvalidRequest(f"{where}.type must be 'compaction' (the only supported entry).", param=f"{where}.type")
        threshold = entry.get("compact_threshold")
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int)
                                      or threshold < MIN_THRESHOLD):
            raise InvalidRequest(f"{where}.compact_threshold must be an integer of at least {MIN_THRESHOLD} tokens.",
                                 param=f"{where}.compact_threshold")
        policy = CompactionPolicy(threshold)
    return policy


def applied_entries(policy: Optional[CompactionPolicy], max_context: int) -> Optional[list[dict[str, Any]]]:
    """The ``context_management`` a response echoes: the entry with the threshold in force; None without one."""
    return None if policy is None else [{"type": "compaction", "compact_threshold": policy.tokens(max_context)}]


async def prompt_token_count(pipeline: Any, call: ResponsesCall) -> int:
    count = pipeline.count_prompt_tokens(call.chat)
    return await count if inspect.isawaitable(count) else count


async def summary_if_over(pipeline: Any, call: ResponsesCall, policy: CompactionPolicy,
                          default_max_tokens: Optional[int]) -> Optional[ChatRequest]:
    """The summary request of a call over its threshold (capped at a quarter of it); None under it."""
    threshold = policy.tokens(pipeline.model_info.max_context)
    if await prompt_token_count(pipeline, call) <= threshold:
        return None
    request = summary_request(call, default_max_tokens)
    limit = min(default_max_tokens or SUMMARY_MAX_TOKENS, threshold // 4)
    return attrs.evolve(request, sampling=attrs.evolve(request.sampling, max_tokens=limit))


def compacted(call: ResponsesCall, item_id: str, summary: str) -> tuple[ResponsesCall, dict[str, Any]]:
    """The call on the compacted context, and the ``compaction`` item (id ``item_id``) standing for it."""
    item = compaction_item(item_id, summary + latest_user_message(call.conversation))
    return compacted_call(call, Message(role="user", content=summary_message_text(item, "compaction"))), item


def latest_user_message(conversation: list[Message]) -> str:
    last = conversation[-1] if conversation else None
    if last is None or last.role != "user" or not last.content or is_summary_message(last.content):
        return ""
    return LATEST_HEADING + last.content


def compacted_call(call: ResponsesCall, summary: Message) -> ResponsesCall:
    """The call with its conversation replaced by its leading system messages and ``summary``."""
    head = leading_system(call.conversation)
    chat_head = leading_system(call.chat.messages)  # the instructions too
    return attrs.evolve(call, chat=attrs.evolve(call.chat, messages=[*chat_head, summary]),
                        conversation=[*head, summary])


def leading_system(messages: list[Message]) -> list[Message]:
    count = next((i for i, message in enumerate(messages) if message.role != "system"), len(messages))
    return list(messages[:count])
