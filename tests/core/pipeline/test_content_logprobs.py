"""Which tokens' logprobs go with which answer-text delta, through the real pipeline run (detokenizer,
stop strings, the chatml_json parser) over the real SmolLM2 tokenizer: the generated ids are fed as
engine messages, each with a distinct logprob (minus its index) that says which token it was.

The oracle is independent of the mapping: a token's characters are where ``tokenizer.decode`` of the
ids before it ends, and a token is answer text when one of its characters lies in the answer.
"""

from __future__ import annotations

import pytest

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.config import Config, EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sampling import TokenLogprobs
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.observe.metrics import Metrics
from kvgate.core.pipeline.pipeline import Pipeline, _Run
from kvgate.core.tokenizer.service import TokenizerService
from kvgate.core.types import ChatRequest, Message, SamplingParams, TextDelta, Tool, ToolCallStart
from kvgate.dialects.chatml_json import ChatmlJson

WEATHER = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}}})
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def pipeline(smollm2_runtime):
    runtime, dialect, config = smollm2_runtime, ChatmlJson(), Config()
    return Pipeline(runtime, Engine(runtime, EngineConfig()), TokenizerService(runtime.tokenizer), JinjaChatFormat(
        runtime.chat_template, dialect, runtime.special_tokens), dialect, "test", config, Metrics())


def events_of(pipeline, ids: list[int], stop: tuple[str, ...] = ()) -> list:
    sampling = SamplingParams(logprobs=True, stop=list(stop))
    request = ChatRequest(model="m", messages=[Message("user", "hi")], tools=[WEATHER], sampling=sampling)
    seq = Sequence(prompt=[1], params=sampling, max_tokens=len(ids), stop_token_ids=frozenset(),
                   deliver=lambda message: None)
    run = _Run(pipeline, request, seq)
    events = []
    for index, token in enumerate(ids):
        events += run.handle(TokenOut(token, TokenLogprobs(-float(index))))
    return events + run.handle(SequenceDone("stop"))


def reported(events) -> list[int]:
    return [int(-t.logprob) for e in events if isinstance(e, TextDelta) for t in e.logprobs]


def overlapping(tokenizer, ids: list[int], start: int, end: int) -> list[int]:
    """Tokens with a character in [start, end) of the decoded text (ASCII text: one char per byte)."""
    bounds = [len(tokenizer.decode(ids[:i], skip_special_tokens=False)) for i in range(len(ids) + 1)]
    return [i for i in range(len(ids)) if bounds[i] < end and bounds[i + 1] > start]


@pytest.mark.parametrize("text, answer", [
    ("It is sunny in Paris today." + CALL, "It is sunny in Paris today."),
    ("Sunny <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", "Sunny "),
    ("<think>\nwarm or not\n</think>\n\nIt is warm.", "It is warm."),
])
def test_only_tokens_of_answer_text_are_reported(pipeline, text, answer):
    tokenizer = pipeline.runtime.tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    events = events_of(pipeline, ids)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == answer
    start = text.index(answer)
    assert reported(events) == overlapping(tokenizer, ids, start, start + len(answer))
    assert len(reported(events)) < len(ids)  # the tag, the call, the reasoning were really there
    if CALL[:11] in text:
        assert any(isinstance(e, ToolCallStart) for e in events)


def test_a_token_split_between_answer_and_tag_is_reported_once(pipeline):
    tokenizer = pipeline.runtime.tokenizer
    ids = tokenizer.encode("Sunny <tool_call>", add_special_tokens=False).ids
    pieces = [tokenizer.decode([i]) for i in ids]
    assert " <" in pieces  # the token " <" holds the answer's last space and the tag's first character
    assert reported(events_of(pipeline, ids)) == list(range(pieces.index(" <") + 1))


def test_a_stop_string_cuts_the_tokens_after_it(pipeline):
    tokenizer = pipeline.runtime.tokenizer
    text = "Hello there, world. END and then more words"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    events = events_of(pipeline, ids, stop=("END",))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert answer == "Hello there, world. "
    assert reported(events) == overlapping(tokenizer, ids, 0, len(answer))


def test_tokens_inside_a_character_share_its_delta_and_keep_their_raw_bytes(pipeline):
    tokenizer = pipeline.runtime.tokenizer
    text = "Caf\u00e9 \U0001f642 \u4e16\u754c done"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    events = events_of(pipeline, ids)
    tokens = [t for e in events if isinstance(e, TextDelta) for t in e.logprobs]
    assert [int(-t.logprob) for t in tokens] == list(range(len(ids)))
    assert b"".join(t.bytes for t in tokens) == text.encode("utf-8")
    partial = [t for t in tokens if not is_utf8(t.bytes)]
    assert partial and all(t.token == tokenizer.decode([ids[int(-t.logprob)]]) for t in partial)
    for delta in (e for e in events if isinstance(e, TextDelta)):  # each delta holds its tokens' characters
        assert b"".join(t.bytes for t in delta.logprobs).decode("utf-8") == delta.text


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
