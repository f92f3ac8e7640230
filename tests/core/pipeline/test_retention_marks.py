"""Where retention hints fall in a prompt (core/pipeline/retention_marks.py), on SmolLM2's real
template and tokenizer, and what usage reports the kept marks wrote."""

from __future__ import annotations

import pytest

from kvgate.core.config import Config, EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.observe.metrics import Metrics
from kvgate.core.pipeline.pipeline import Pipeline
from kvgate.core.pipeline.retention_marks import retention_of, written_by_ttl
from kvgate.core.tokenizer.service import TokenizerService
from kvgate.core.types import ChatRequest, Message, RetentionHint
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.jinja_chat_format import JinjaChatFormat

SYSTEM = Message("system", "You review pull requests for a storage engine. Be precise.")
HISTORY = [SYSTEM, Message("user", "First question?"), Message("assistant", "First answer.")]


@pytest.fixture(scope="module")
def pipeline(smollm2_runtime):
    runtime, dialect = smollm2_runtime, ChatmlJson()
    chat_format = JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens)
    return Pipeline(runtime, Engine(runtime, EngineConfig()), TokenizerService(runtime.tokenizer), chat_format,
                    dialect, "test", Config(), Metrics())


def test_a_mark_ends_where_its_partial_conversation_ends_in_the_prompt(pipeline):
    hints = [RetentionHint("1h", 3600.0, messages=[SYSTEM]), RetentionHint("5m", 300.0, messages=HISTORY[:2]),
             RetentionHint("24h", 86400.0)]
    request = ChatRequest(model="smollm2", messages=[*HISTORY, Message("user", "Second?")], retention=hints)
    prompt = pipeline.encode_prompt(request)
    system, first_turn, whole = retention_of(pipeline, request, prompt).marks
    def text(position: int) -> str:
        return pipeline.runtime.tokenizer.decode(prompt[:position], skip_special_tokens=False)

    assert text(system.position).endswith("Be precise.<|im_end|>\n") and (system.ttl, system.ttl_seconds) == ("1h", 3600.0)
    assert text(first_turn.position).endswith("First question?<|im_end|>\n")
    assert whole.position == len(prompt) and whole.ttl == "24h"


def test_no_hint_no_retention(pipeline):
    request = ChatRequest(model="smollm2", messages=[Message("user", "hi")])
    assert retention_of(pipeline, request, pipeline.encode_prompt(request)) is None


def test_written_counts_each_kept_mark_from_where_the_cache_or_the_last_mark_ended():
    assert written_by_ttl([(40, "1h"), (100, "5m")], cached=16) == {"1h": 24, "5m": 60}
    assert written_by_ttl([(40, "1h"), (100, "5m")], cached=64) == {"5m": 36}
    assert written_by_ttl([(40, "1h")], cached=48) == {}
    assert written_by_ttl([(50, "5m"), (30, "5m")], cached=0) == {"5m": 50}
