"""Where a model's own Jinja template leaves the model: a generation prompt that opens a thinking
block and leaves it open makes the parser start in reasoning, so the model's first words are never
shown as answer text."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.types import ChatRequest, Message, ReasoningDelta, TextDelta
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.minimax_m2 import MinimaxM2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

MINIMAX_TEMPLATE = (Path(__file__).parents[1] / "dialects" / "templates" / "minimax_m2.jinja").read_text()
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# the Qwen3.5 style: thinking opens the answer unless switched off, then an empty closed block
THINKING = (CHATML.replace("assistant\n{% endif %}", "assistant\n{% if enable_thinking is defined and "
                           "enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}"))
REFUSES = "{{ raise_exception('no') }}"


def start(template: str, dialect, reasoning=None) -> str:
    chat_format = JinjaChatFormat(template, dialect, {})
    return chat_format.parser_start(ChatRequest("m", [Message(role="user", content="hi")], reasoning=reasoning))


def test_minimax_m2s_official_template_leaves_the_model_in_reasoning():
    assert start(MINIMAX_TEMPLATE, MinimaxM2()) == "reasoning"


@pytest.mark.parametrize("reasoning,expected", [(None, "reasoning"), (True, "reasoning"), (False, "content")])
def test_an_open_think_block_follows_the_reasoning_switch(reasoning, expected):
    assert start(THINKING, Qwen3CoderXml(), reasoning) == expected


def test_templates_that_open_no_block_and_dialects_without_think_tags_start_in_content():
    assert start(CHATML, ChatmlJson()) == "content"
    assert start(REFUSES, ChatmlJson()) == "content"  # nothing can be known from a template that refuses


def test_the_parser_then_reads_the_first_words_as_reasoning():
    dialect = Qwen3CoderXml()
    parser = dialect.new_parser([], lambda: "call_1", start_in=start(THINKING, dialect))
    events = parser.feed("Let me think.</think>\n\nHello.") + parser.finish()
    assert [type(event) for event in events] == [ReasoningDelta, TextDelta]
    assert (events[0].text, events[1].text) == ("Let me think.", "Hello.")
