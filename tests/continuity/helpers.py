"""What a client does between two turns, for each wire protocol.

Each client builds a turn-1 body (system + user message + tools), and a turn-2 body from the wire
reply it got: the assistant's output replayed as the protocol says (Chat: the returned message;
Anthropic: the returned content blocks; Responses: the returned output items), followed by one
tool result per call, in call order. The same builders serve the pure-function tests (replies
rendered by the adapters' own renderers) and the real-server tests (replies over HTTP).
"""

from __future__ import annotations

import copy
import json
from typing import Any, Optional

TOOLS = [
    {"name": "get_weather", "description": "Get the current weather for a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city"], "additionalProperties": False}},
    {"name": "search", "description": "Search the web",
     "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                    "additionalProperties": False}},
]
MODEL = "smollm2"  # the embedded model's served name
SYSTEM = "You are a helpful assistant."
USER = "What is the weather in Paris? Also look up events in Rome."


class ChatClient:
    """OpenAI Chat Completions: replays ``choices[0].message`` and adds ``role: tool`` messages."""

    name = "chat"
    path = "/v1/chat/completions"

    def turn1(self, thinking: Optional[bool] = None, tools: Optional[list[dict]] = TOOLS, force: bool = True,
              max_tokens: int = 32, user: str = USER) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
                                "messages": [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": user}]}
        if tools:
            body["tools"] = [{"type": "function", "function": tool} for tool in tools]
            body["tool_choice"] = "required" if force else "auto"
        if thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
        return body

    def turn2(self, body: dict[str, Any], reply: dict[str, Any], results: list[str],
              max_tokens: int = 8) -> dict[str, Any]:
        message = reply["choices"][0]["message"]
        follow = copy.deepcopy(body)
        follow["messages"].append(message)
        for call, result in zip(message.get("tool_calls") or [], results):
            follow["messages"].append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if not message.get("tool_calls"):
            follow["messages"].append({"role": "user", "content": results[0]})
        return _relax(follow, max_tokens, "auto")

    @staticmethod
    def usage(reply: dict[str, Any]) -> tuple[int, int, int]:
        """(prompt tokens, output tokens, cached prompt tokens)."""
        usage = reply["usage"]
        return usage["prompt_tokens"], usage["completion_tokens"], usage["prompt_tokens_details"]["cached_tokens"]

    @staticmethod
    def calls(reply: dict[str, Any]) -> list[tuple[str, Any]]:
        """(name, arguments decoded from JSON) of each returned call."""
        return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in reply["choices"][0]["message"].get("tool_calls") or []]


class AnthropicClient:
    """Anthropic Messages: replays ``content`` as the assistant turn and answers with tool_result blocks."""

    name = "anthropic"
    path = "/v1/messages"

    def turn1(self, thinking: Optional[bool] = None, tools: Optional[list[dict]] = TOOLS, force: bool = True,
              max_tokens: int = 32, user: str = USER) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL, "max_tokens": max_tokens, "temperature": 0, "system": SYSTEM,
                                "messages": [{"role": "user", "content": user}]}
        if tools:
            body["tools"] = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                             for t in tools]
            body["tool_choice"] = {"type": "any" if force else "auto"}
        if thinking is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": 1024} if thinking else {"type": "disabled"}
        return body

    def turn2(self, body: dict[str, Any], reply: dict[str, Any], results: list[str],
              max_tokens: int = 8) -> dict[str, Any]:
        follow = copy.deepcopy(body)
        follow["messages"].append({"role": "assistant", "content": reply["content"]})
        uses = [block for block in reply["content"] if block["type"] == "tool_use"]
        answer = [{"type": "tool_result", "tool_use_id": use["id"], "content": result}
                  for use, result in zip(uses, results)]
        follow["messages"].append({"role": "user", "content": answer or results[0]})
        if "tool_choice" in follow:
            follow["tool_choice"] = {"type": "auto"}
        follow["max_tokens"] = max_tokens
        return follow

    @staticmethod
    def usage(reply: dict[str, Any]) -> tuple[int, int, int]:
        usage = reply["usage"]
        cached = usage["cache_read_input_tokens"]
        return usage["input_tokens"] + cached, usage["output_tokens"], cached

    @staticmethod
    def calls(reply: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(b["name"], b["input"]) for b in reply["content"] if b["type"] == "tool_use"]


class ResponsesClient:
    """OpenAI Responses (stateless, ``store: false``): appends ``output`` items and
    ``function_call_output`` items to the input."""

    name = "responses"
    path = "/v1/responses"

    def turn1(self, thinking: Optional[bool] = None, tools: Optional[list[dict]] = TOOLS, force: bool = True,
              max_tokens: int = 32, user: str = USER) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL, "max_output_tokens": max_tokens, "temperature": 0,
                                "instructions": SYSTEM, "store": False,
                                "input": [{"type": "message", "role": "user", "content": user}]}
        if tools:
            body["tools"] = [{"type": "function", **tool} for tool in tools]
            body["tool_choice"] = "required" if force else "auto"
        if thinking is not None:
            body["reasoning"] = {"effort": "medium" if thinking else "none"}
        return body

    def turn2(self, body: dict[str, Any], reply: dict[str, Any], results: list[str],
              max_tokens: int = 8) -> dict[str, Any]:
        follow = copy.deepcopy(body)
        follow["input"].extend(copy.deepcopy(reply["output"]))
        calls = [item for item in reply["output"] if item["type"] == "function_call"]
        follow["input"].extend({"type": "function_call_output", "call_id": call["call_id"], "output": result}
                               for call, result in zip(calls, results))
        if not calls:
            follow["input"].append({"type": "message", "role": "user", "content": results[0]})
        if "tool_choice" in follow:
            follow["tool_choice"] = "auto"
        follow["max_output_tokens"] = max_tokens
        return follow

    @staticmethod
    def usage(reply: dict[str, Any]) -> tuple[int, int, int]:
        usage = reply["usage"]
        return usage["input_tokens"], usage["output_tokens"], usage["input_tokens_details"]["cached_tokens"]

    @staticmethod
    def calls(reply: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(i["name"], json.loads(i["arguments"])) for i in reply["output"] if i["type"] == "function_call"]


def _relax(body: dict[str, Any], max_tokens: int, choice: str) -> dict[str, Any]:
    if "tool_choice" in body:
        body["tool_choice"] = choice
    body["max_tokens"] = max_tokens
    return body


CLIENTS = [ChatClient(), AnthropicClient(), ResponsesClient()]
