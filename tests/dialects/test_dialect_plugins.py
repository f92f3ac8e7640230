"""The dialects and chat formats are found through the kvgate entry points, with their variants."""

import pytest

from kvgate.core.dialect import Dialect
from kvgate.core.plugins import build_plugin_manager, collect
from kvgate.core.types import ChatRequest, Message


@pytest.fixture(scope="module")
def registries():
    pm = build_plugin_manager()
    return collect(pm, "register_dialects", "dialect"), collect(pm, "register_chat_formats", "chat format")


@pytest.mark.parametrize("name,variants", [("chatml_json", ["qwen3", "qwen25"]),
                                           ("glm_xml", ["glm45", "glm46", "glm47"]),
                                           ("deepseek_dsml", ["v32", "v4", "v41"]),
                                           ("qwen3_coder_xml", ["qwen3_coder"]),
                                           ("deepseek_v31", ["v31", "r1"]),
                                           ("kimi_k2", ["instruct", "thinking"])])
def test_dialects_registered_with_variants(registries, name, variants):
    factory = registries[0].get(name)
    for variant in variants:
        dialect = factory(variant=variant)
        assert isinstance(dialect, Dialect) and dialect.name == name and dialect.trigger
    with pytest.raises(ValueError, match="variant"):
        factory(variant="nope")


@pytest.mark.parametrize("name,dialect_name,start", [("glm45", "glm_xml", "<|user|>\nhi"),
                                                     ("glm47", "glm_xml", "<|user|>hi"),
                                                     ("deepseek_v32", "deepseek_dsml", "<｜User｜>hi"),
                                                     ("deepseek_v4", "deepseek_dsml", "<｜User｜>hi"),
                                                     ("deepseek_v31", "deepseek_v31", "<｜User｜>hi"),
                                                     ("deepseek_r1", "deepseek_v31", "<｜User｜>hi"),
                                                     ("kimi_k2", "kimi_k2", "<|im_user|>user<|im_middle|>hi")])
def test_chat_formats_render(registries, name, dialect_name, start):
    dialects, formats = registries
    fmt = formats.get(name)(None, dialects.get(dialect_name)())
    prompt = fmt.render(ChatRequest("m", [Message("user", "hi")]))
    assert start in prompt and fmt.parser_start(ChatRequest("m", [])) in ("content", "reasoning", "after_reasoning")


def test_six_dialect_plugins(registries):
    assert {"chatml_json", "glm_xml", "deepseek_dsml", "qwen3_coder_xml", "deepseek_v31",
            "kimi_k2"} <= set(registries[0].names())


def test_new_dialects_serve_their_templates():
    from kvgate.dialects.deepseek_v31 import DeepseekV31
    from kvgate.dialects.kimi_k2 import KimiK2
    from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

    coder = "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + args_name + '>\\n' }}"
    assert Qwen3CoderXml.serves("qwen3_moe", coder) > 10 and Qwen3CoderXml.serves("qwen3_moe", "<tool_call>") == 0
    v31 = "{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>'"
    r1 = v31.replace("'+ tool", "' + tool['type'] + '<｜tool▁sep｜>' + tool") + " + '```json' + '\\n'"
    assert DeepseekV31.serves("deepseek_v3", v31) > 100 and DeepseekV31.serves("llama", "") == 0
    assert DeepseekV31.variant_for("deepseek_v3", v31) == "v31" and DeepseekV31.variant_for("deepseek_v3", r1) == "r1"
    kimi = "<|tool_calls_section_begin|>{%- for tool_call in message['tool_calls'] -%}"
    from kvgate.dialects.deepseek_dsml import DeepseekDsml

    assert KimiK2.serves("DeepseekV3ForCausalLM", kimi) > DeepseekDsml.serves("DeepseekV3ForCausalLM", kimi)
    assert DeepseekV31.serves("DeepseekV3ForCausalLM", v31) > DeepseekDsml.serves("DeepseekV3ForCausalLM", v31)
    assert KimiK2.variant_for("kimi_k2", kimi) == "instruct"
    assert KimiK2.variant_for("kimi_k2", kimi + "<think>") == "thinking"
