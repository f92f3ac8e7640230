"""Helpers of the model families' server tests: a request to the real server, and the greedy answer
transformers gives for the same prompt ids."""

from __future__ import annotations

import httpx
import torch


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def ask_greedy(server, model: str, messages: list, max_tokens: int) -> tuple[dict, list[int]]:
    """The greedy chat reply to ``messages``, and the prompt ids the server rendered for them."""
    prompt = post(server, "/v1/tokenize", {"messages": messages, "add_generation_prompt": True})["tokens"]
    reply = post(server, "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": max_tokens,
                                                  "temperature": 0})
    return reply, prompt


def transformers_answer(model, tokenizer, eos: int, prompt: list[int], max_tokens: int) -> str:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos)[0, len(prompt):].tolist()
    return tokenizer.decode([t for t in out if t != eos], skip_special_tokens=False)
