"""How the pipeline ends a response whose tool call the parser could not complete.

The pipeline stage after the engine (detokenizer, stop strings, the chatml_json parser, the finish
reason) runs for real on SmolLM2's tokenizer; the engine's token stream is scripted from a text,
because the model cannot be made to write a broken call (that is the fault under test). The
served path is covered in tests/adapters/test_openai_chat_server.py.
"""

from __future__ import annotations

import pytest

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.config import Config, EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.observe.metrics import Metrics
from kvgate.core.pipeline.pipeline import Pipeline, _Run
from kvgate.core.tokenizer.service import TokenizerService
from kvgate.core.types import ChatRequest, Message, SamplingParams, Tool
from kvgate.dialects.chatml_json import ChatmlJson

WEATHER = Tool("get_weather", "", {"type": "object", "properties": {"city": {"type": "string"}}})
HEAD = '<tool_call>\n{"name": "get_weather", "arguments": '
CUT = HEAD + '{"city": "Par'
BROKEN_THEN_TEXT = HEAD + '{"city": tru}}\n</tool_call>\nLet me try again.'


@pytest.fixture(scope="module")
def pipeline(smollm2_runtime):
    runtime, dialect, config = smollm2_runtime, ChatmlJson(), Config()
    chat_format = JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens)
    return Pipeline(runtime, Engine(runtime, EngineConfig()), TokenizerService(runtime.tokenizer), chat_format,
                    dialect, "test", config, Metrics())


def finished(pipeline, text: str, engine_reason: str):
    request = ChatRequest(model="smollm2", messages=[Message("user", "weather?")], tools=[WEATHER])
    seq = Sequence(prompt=[1], params=SamplingParams(), max_tokens=512, stop_token_ids=frozenset(),
                   deliver=lambda message: None)
    run = _Run(pipeline, request, seq)
    for token in pipeline.runtime.tokenizer.encode(text, add_special_tokens=False).ids:
        run.handle(TokenOut(token))
    return run.handle(SequenceDone(engine_reason))[-1]


@pytest.mark.parametrize("text, engine_reason, reason", [
    (CUT, "stop", "error"),  # the model stopped inside the call
    (CUT, "length", "length"),  # the output limit cut the last call: the protocols' own "incomplete"
    (BROKEN_THEN_TEXT, "length", "error"),  # the broken call was not the one the limit cut
    (HEAD + '{"city": "Paris"}}\n</tool_call>', "stop", "tool_calls"),
    (HEAD + '"{\\"city\\": \\"Paris\\"}"}\n</tool_call>', "stop", "tool_calls"),  # a variant read: a call
], ids=["stopped inside", "cut by the limit", "broken, then text", "complete", "string arguments"])
def test_finish_reason(pipeline, text, engine_reason, reason):
    done = finished(pipeline, text, engine_reason)
    assert done.reason == reason
    if reason == "error":
        assert done.error == "tool call 0 (get_weather) ended without valid arguments"
        assert done.issues[-1].message == done.error
