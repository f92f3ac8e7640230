"""Fence fixtures: the real SmolLM2 tokenizer (built from the embedded GGUF's metadata, no weights),
the plugin manager with the installed plugins, and helpers that drive a fence token by token."""

from __future__ import annotations

import json

import pytest
import torch

from kvgate.core.config import Config
from kvgate.core.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice

WEATHER = Tool("get_weather", "Weather forecast", {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "enum": [1, 3, 7]},
                   "fields": {"type": "array", "items": {"type": "string"}}},
    "required": ["city", "days"], "additionalProperties": False})
CLOCK = Tool("get_time", "Current time", {"type": "object", "properties": {"tz": {"type": "string"}}})


def greedy_run(fence, logits_for, budget: int) -> list[int]:
    """Greedy decoding of at most ``budget`` tokens through ``fence``; ``logits_for(output so far)``
    stands in for the model. Stops at an end-of-turn token or when the fence says the output ends."""
    out: list[int] = []
    while len(out) < budget:
        fence.set_budget(budget - len(out))
        row = logits_for(out)
        fence.apply(row)
        token = int(torch.argmax(row))
        fence.advance(token)
        if token in fence.stop_ids:
            break
        out.append(token)
        if fence.must_stop:
            break
    return out


@pytest.fixture()
def accepted_drafts(monkeypatch) -> list[int]:
    """How many drafted tokens each speculative verification accepted (observed, not changed)."""
    from kvgate.core.engine import speculative

    accepted: list[int] = []
    original = speculative.verify

    def counting(seq, rows, draft, forced):
        chosen, work = original(seq, rows, draft, forced)
        accepted.append(len(chosen) - 1)
        return chosen, work

    monkeypatch.setattr(speculative, "verify", counting)
    return accepted


@pytest.fixture(scope="module")
def engines(smollm2_runtime):
    """Two engines on the embedded model: (plain, with n-gram speculation)."""
    from tests.core.fence.engine_run import make_engine

    plain, spec = make_engine(smollm2_runtime, 0), make_engine(smollm2_runtime, 4)
    yield plain, spec
    plain.stop()
    spec.stop()


@pytest.fixture(scope="session")
def smol_tokenizer():
    from kvgate.models.embedded import embedded_gguf_path
    from kvgate.models.gguf_loader import open_gguf, read_metadata
    from kvgate.models.gguf_tokenizer import build_tokenizer

    return build_tokenizer(read_metadata(open_gguf(embedded_gguf_path())))


@pytest.fixture(scope="session")
def smol_info(smol_tokenizer):
    from kvgate.core.fence import tokenizer_info

    return tokenizer_info(smol_tokenizer, [2])


@pytest.fixture(scope="session")
def pm():
    from kvgate.core.plugins import build_plugin_manager

    return build_plugin_manager()


@pytest.fixture()
def config(pm):
    from kvgate.core.config_sections import bind_plugin_sections

    return bind_plugin_sections(Config(), pm)


def request(mode="auto", name=None, tools=(WEATHER, CLOCK), parallel=True, response=None) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message("user", "hi")], tools=list(tools),
                       tool_choice=ToolChoice(mode, name), parallel_tool_calls=parallel,
                       response_format=response or ResponseFormat())


def args(**values) -> str:
    return json.dumps(values)


class Driver:
    """Feeds text to a fence token by token (the tokenizer's own tokenization)."""

    def __init__(self, fence, tokenizer):
        self.fence, self.tokenizer = fence, tokenizer

    def feed(self, text: str) -> int:
        """How many tokens of ``text`` the fence allowed, advancing through them."""
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        for index, token in enumerate(ids):
            if not self.fence.allows(token):
                return index
            self.fence.advance(token)
        return len(ids)

    def accepts(self, text: str) -> bool:
        count = len(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return self.feed(text) == count and self.ends()

    def ends(self) -> bool:
        return self.fence.allows(2)


@pytest.fixture()
def drive(smol_info, smol_tokenizer, pm, config):
    from kvgate.core.fence import build_request_fence

    def make(dialect, req, **kwargs):
        return Driver(build_request_fence(req, dialect, smol_info, config, pm, **kwargs), smol_tokenizer)

    return make
