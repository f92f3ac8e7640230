"""Pieces shared by the non-streaming object and the chunk stream.

Extensions beyond the OpenAI schema (the SDK keeps them in ``model_extra``):

* ``usage.kvgate = {"cached_tokens_device": n, "cached_tokens_ssd": n, "replayed_tokens": n}``:
  where cached prompt tokens came from (``prompt_tokens_details.cached_tokens`` is their sum), and
  how many tokens the cut of the cached state ran again (a hybrid model's recurrent state).
* ``kvgate = {"guard_interventions": n, "parse_issues": [{"message", "raw"}]}`` on the response
  object (always) and on the finishing chunk (only when either is non-empty), plus
  ``relaxed_schema: [str]`` when the fence did not enforce some schema keyword (then always), and
  ``guard_stop: true`` when the loop guard ended the reply (``finish_reason`` stays ``stop``: the
  text is complete as far as it goes, and asking for more would only continue the loop).
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Optional

import attrs

from kvgate.core.types import ChatRequest, Finished, ParseIssue, TokenLogprob, Usage

log = logging.getLogger("kvgate.adapters.openai_chat")



@attrs.define
class ResponseMeta:
    """What every rendered object repeats: id, creation time and the model name the client asked for."""

    id: str
    created: int
    model: str
    named_tool_choice: bool = False
    include_usage: bool = False
    logprobs: bool = False  # the request asked for them
    custom_tools: frozenset = frozenset()  # names of the request's custom tools (their calls are "custom")


def new_meta(model: str, request: ChatRequest, include_usage: bool = False) -> ResponseMeta:
    # allowed_tools narrowed to one tool is a named choice internally, but not one the client named
    named = request.tool_choice.mode == "named" and not request.extra.get("allowed_tools")
    return ResponseMeta(id="chatcmpl-" + uuid.uuid4().hex, created=int(time.time()), model=model,
                        named_tool_choice=named, include_usage=include_usage, logprobs=request.sampling.logprobs,
                        custom_tools=frozenset(tool.name for tool in request.tools if tool.custom is not None))


def finish_reason(reason: str, made_tool_calls: bool, named_tool_choice: bool) -> str:
    """The wire ``finish_reason``: ``tool_calls`` whenever calls were made, except under a named
    tool_choice, where OpenAI answers ``stop``; stop sequences are ``stop`` too."""
    if reason == "length":
        return "length"
    if made_tool_calls or reason == "tool_calls":
        return "stop" if named_tool_choice else "tool_calls"
    return "stop"


def wire_tool_name(name: str, namespace: Optional[str]) -> str:
    return f"{namespace}__{name}" if namespace else name


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "kvgate": {"cached_tokens_device": usage.cached_tokens_device,
                   "cached_tokens_ssd": usage.cached_tokens_ssd, "replayed_tokens": usage.replayed_tokens},
    }


def logprobs_object(meta: ResponseMeta, tokens: list[TokenLogprob]) -> Optional[dict[str, Any]]:
    """A choice's ``logprobs``: null unless asked for, else the content tokens (``refusal`` is
    always null: nothing here refuses)."""
    if not meta.logprobs:
        return None
    return {"content": [token_object(token) for token in tokens], "refusal": None}


def token_object(token: TokenLogprob) -> dict[str, Any]:
    return {"token": token.token, "logprob": token.logprob, "bytes": list(token.bytes),
            "top_logprobs": [{"token": top.token, "logprob": top.logprob, "bytes": list(top.bytes)}
                             for top in token.top_logprobs]}


def merge_issues(streamed: list[ParseIssue], finished: Finished) -> list[ParseIssue]:
    """Issues seen as events plus those only reported on ``Finished``, each once, in order."""
    merged = list(streamed)
    merged.extend(issue for issue in finished.issues if issue not in merged)
    return merged


def extension(finished: Finished, issues: list[ParseIssue]) -> dict[str, Any]:
    out = {"guard_interventions": finished.guard_interventions,
           "parse_issues": [{"message": issue.message, "raw": issue.raw} for issue in issues]}
    if finished.relaxed:
        out["relaxed_schema"] = list(finished.relaxed)
    if finished.guard_stop:
        out["guard_stop"] = True
    return out


def log_issue(meta: ResponseMeta, issue: ParseIssue) -> None:
    log.warning("%s: tool-call parse issue: %s (raw %r)", meta.id, issue.message, issue.raw[:200])


def generation_failed_message(issues: list[ParseIssue]) -> str:
    detail = f": {issues[-1].message}" if issues else "."
    return f"Generation failed{detail}"
