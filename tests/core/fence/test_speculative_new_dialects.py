"""The new dialects' fences on the real engine and model (SmolLM2, never trained on these syntaxes):
every mode gives output that parses into valid calls (or plain text), and n-gram speculation
changes nothing under greedy decoding."""

from __future__ import annotations

import pytest

from bench.fence_check import check_calls
from kvgate.core.config import Config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.fence import tokenizer_info
from kvgate.core.types import ChatRequest, Message, SamplingParams, ToolChoice
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml
from tests.core.fence.conftest import CLOCK, WEATHER
from tests.core.fence.engine_run import generate

DIALECTS = {"qwen3_coder": Qwen3CoderXml(), "v31": DeepseekV31("v31"), "r1": DeepseekV31("r1"),
            "kimi": KimiK2("instruct")}
# SmolLM2 spells every DeepSeek marker in ~22 byte tokens: the calls need room
LIMITS = {"qwen3_coder": 160, "v31": 200, "r1": 224, "kimi": 160}
# required on every dialect; named and none on the cheapest one (CI time: ~1 min per dialect on 2
# cores); every mode of every dialect is driven token by token in tests/core/fence/test_fence_new_dialects.py
MODES = {key: [("required", None)] for key in DIALECTS}
MODES["qwen3_coder"] += [("named", "get_time"), ("none", None)]


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(DIALECTS))
def test_fenced_calls_are_valid_with_and_without_speculation(smollm2_runtime, engines, pm, key):
    runtime, config, dialect = smollm2_runtime, bind_plugin_sections(Config(), pm), DIALECTS[key]
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    plain, spec = engines
    for mode, name in MODES[key]:
        request = ChatRequest(model="m", messages=[Message("user", "Weather in Paris for 3 days, and the time?")],
                              tools=[WEATHER, CLOCK], tool_choice=ToolChoice(mode, name),
                              sampling=SamplingParams(temperature=0.0), parallel_tool_calls=False)
        limit = 12 if mode == "none" else LIMITS[key]
        without, done_a, _ = generate(plain, runtime, dialect, request, info, config, pm, limit)
        with_spec, done_b, _ = generate(spec, runtime, dialect, request, info, config, pm, limit)
        text = runtime.tokenizer.decode(without, skip_special_tokens=False)
        assert with_spec == without, (mode, text, runtime.tokenizer.decode(with_spec))
        verdict = check_calls(dialect, request.tools, text)
        assert verdict.ok, (mode, verdict.problems, text)
        if mode in ("required", "named"):
            assert done_a.reason != "length" and verdict.calls, (mode, text)
        if mode == "named":
            assert {n for n, _ in verdict.calls} == {"get_time"}
        if mode == "none":
            assert not verdict.calls and dialect.trigger not in text
