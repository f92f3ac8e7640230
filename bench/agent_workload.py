"""The agent-shaped workload of ``bench_agent_cache.py``: two interleaved sessions on one shared
system prompt, each turn appending the previous answer and a new user message.

Texts are deterministic word salad sized in tokens through the server's ``/v1/tokenize``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

WORDS = ("agent cache kernel river stone matrix token shell graph orbit module vector branch commit merge "
         "review patch test build deploy server client socket thread queue buffer stream parser schema field "
         "record index table column value error retry budget window").split()


def word_text(seed: int, words: int) -> str:
    return " ".join(f"{WORDS[(seed * 31 + i * 7 + i // 5) % len(WORDS)]}{(seed + i) % 97}" for i in range(words))


def count_tokens(base_url: str, text: str) -> int:
    reply = httpx.post(base_url + "/v1/tokenize", json={"prompt": text}, timeout=120)
    reply.raise_for_status()
    return reply.json()["count"]


def prompt_tokens(base_url: str, messages: list[dict]) -> list[int]:
    body = {"messages": messages, "add_generation_prompt": True}
    reply = httpx.post(base_url + "/v1/tokenize", json=body, timeout=120)
    reply.raise_for_status()
    return reply.json()["tokens"]


def sized_text(base_url: str, seed: int, tokens: int) -> str:
    """A text of about ``tokens`` tokens (calibrated once, then trimmed by words)."""
    words = max(1, tokens // 3)
    while count_tokens(base_url, word_text(seed, words)) < tokens:
        words = int(words * 1.25) + 1
    while words > 1 and count_tokens(base_url, word_text(seed, words - 1)) >= tokens:
        words -= max(1, words // 50)
    return word_text(seed, words)


class Workload:
    def __init__(self, base_url: str, shared: int, per_session: int, per_turn: int, sessions: int = 2):
        self.system = sized_text(base_url, 1, shared)
        self.first = [sized_text(base_url, 100 + s, per_session) for s in range(sessions)]
        self.sized = lambda seed: sized_text(base_url, seed, per_turn)
        self.sessions = sessions

    def user_message(self, session: int, turn: int) -> str:
        if turn == 1:
            return self.first[session]
        return self.sized(1000 + session * 100 + turn)


def stream_chat(base_url: str, messages: list[dict], max_tokens: int, model: str = "smollm2") -> dict[str, Any]:
    """One streamed chat request: TTFT (first streamed content), total time, answer, usage, and the
    worker SMG routed it to (its ``x-smg-routed-worker-id`` header; None without a router)."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    ttft, text, usage = None, [], {}
    # the clock starts after the client is built: building one (its TLS context) alone takes 15-30 ms
    with httpx.Client(timeout=900) as client:
        started = time.perf_counter()
        with client.stream("POST", base_url + "/v1/chat/completions", json=body) as response:
            response.raise_for_status()
            worker = response.headers.get("x-smg-routed-worker-id")
            for line in response.iter_lines():
                if not line.startswith("data: ") or line.strip() == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        ttft = ttft if ttft is not None else time.perf_counter() - started
                        text.append(piece)
        total = time.perf_counter() - started
    return {"ttft": ttft if ttft is not None else total, "total": total, "answer": "".join(text), "usage": usage,
            "worker": worker}


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = next((i for i in range(n) if a[i] != b[i]), n)
    return i


def ceiling(prompt: list[int], history: list[tuple[list[int], int]]) -> int:
    """Tokens an ideal cache could serve: the longest prefix shared with an earlier prompt, plus that
    request's output tokens when the whole earlier prompt is a prefix of this one."""
    best = 0
    for earlier, completion in history:
        shared = common_prefix(prompt, earlier)
        if shared == len(earlier):
            shared = min(len(prompt) - 1, shared + completion)
        best = max(best, shared)
    return best
