"""A tiny random Qwen3, Qwen3-MoE, GLM-4.5, DeepSeek V3 and V3.2 model served by a real server: Chat
Completions, Anthropic Messages and Responses with a required tool call, fenced in the model's
dialect (chatml_json qwen3 variant; glm_xml and deepseek_dsml v32, chosen by the architecture, with
the glm45 / deepseek_v32 chat formats), schema-valid; for Qwen3-MoE, DeepSeek V3 and V3.2 (whose
indexer keeps fewer tokens than the prompt has) a second turn after a restart is served from SSD.

The checkpoints are random (no real checkpoint of these fits this machine); they carry the SmolLM2
tokenizer (ChatML special tokens; GLM's and DeepSeek's role tokens added) and, for Qwen3, a
Qwen3-style ChatML template, so what the fence forces is all there is.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from tests.harness import ServerProcess
from tests.models.served import post

pytestmark = pytest.mark.slow

# A Qwen3-style ChatML template (the chatml_json dialect renders tools and tool turns into messages)
TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon", "Oslo"]},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 9}},
              "required": ["city", "days"], "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "get_forecast", "description": "Weather forecast",
                                         "parameters": PARAMETERS}}
FAMILIES = {
    "qwen3": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
    "qwen3_moe": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=[0],
                      tie_word_embeddings=True),
    "glm4_moe": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=True,
                     n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                     first_k_dense_replace=1, norm_topk_prob=True, tie_word_embeddings=True),
    "deepseek_v3": dict(num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32,
                        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_group=2,
                        topk_group=1, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                        first_k_dense_replace=1, norm_topk_prob=True, tie_word_embeddings=True),
    # V3.2: the same MLA and experts plus the indexer, keeping 32 of the prompt's hundreds of tokens
    "deepseek_v32": dict(num_attention_heads=4, num_key_value_heads=4, q_lora_rank=24, kv_lora_rank=32,
                         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8, n_group=2,
                         topk_group=1, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                         first_k_dense_replace=1, norm_topk_prob=True, tie_word_embeddings=True,
                         index_topk=32, index_head_dim=16, index_n_heads=4),
}
ROLE_TOKENS = {  # special tokens added to the tokenizer, and the end-of-turn token
    "glm4_moe": (["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"], "<|user|>"),
    "deepseek_v3": (["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
                    "<｜end▁of▁sentence｜>"),
}
ROLE_TOKENS["deepseek_v32"] = ROLE_TOKENS["deepseek_v3"]
CHAT_FORMATS = {"glm4_moe": "glm45", "deepseek_v3": "deepseek_v32", "deepseek_v32": "deepseek_v32"}
EXPECTED = {"qwen3": "dialect chatml_json", "qwen3_moe": "dialect chatml_json", "glm4_moe": "dialect glm_xml",
            "deepseek_v3": "dialect deepseek_dsml", "deepseek_v32": "dialect deepseek_dsml"}


def write_checkpoint(directory, model_type: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.core.tokenizer.tokenizers_for_tests import smollm2_from_gguf

    tokenizer = smollm2_from_gguf()
    added, eos = ROLE_TOKENS.get(model_type, ([], "<|im_end|>"))
    tokenizer.add_special_tokens(added)
    config = AutoConfig.for_model(model_type, vocab_size=tokenizer.get_vocab_size(), hidden_size=64,
                                  intermediate_size=96, num_hidden_layers=2, max_position_embeddings=1024,
                                  bos_token_id=None, eos_token_id=tokenizer.token_to_id(eos),
                                  **FAMILIES[model_type])
    torch.manual_seed(len(model_type))
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    template = {} if model_type in CHAT_FORMATS else {"chat_template": TEMPLATE}  # else the chat format renders
    (directory / "tokenizer_config.json").write_text(json.dumps({**template, "eos_token": eos}))
    return directory


def chat_calls(server, model_type: str, messages: list) -> tuple[list, dict]:
    body = {"model": f"tiny-{model_type}", "messages": messages, "tools": [TOOL], "tool_choice": "required",
            "max_tokens": 200, "temperature": 0,
            "chat_template_kwargs": {"enable_thinking": False}}  # a random model would think on and on
    reply = post(server, "/v1/chat/completions", body)
    assert reply["choices"][0]["finish_reason"] == "tool_calls", reply
    calls = reply["choices"][0]["message"]["tool_calls"]
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls], reply


def anthropic_calls(server, model_type: str) -> list:
    tool = {"name": "get_forecast", "description": "Weather forecast", "input_schema": PARAMETERS}
    body = {"model": f"tiny-{model_type}", "max_tokens": 200, "messages": ASK, "tools": [tool],
            "tool_choice": {"type": "any"}, "thinking": {"type": "disabled"}, "temperature": 0}
    reply = post(server, "/v1/messages", body)
    assert reply["stop_reason"] == "tool_use", reply
    return [(block["name"], block["input"]) for block in reply["content"] if block["type"] == "tool_use"]


def responses_calls(server, model_type: str) -> list:
    tool = {"type": "function", "name": "get_forecast", "description": "Weather forecast", "parameters": PARAMETERS}
    body = {"model": f"tiny-{model_type}", "max_output_tokens": 200, "input": ASK, "tools": [tool],
            "tool_choice": "required", "reasoning": {"effort": "none"}, "temperature": 0}
    reply = post(server, "/v1/responses", body)
    return [(item["name"], json.loads(item["arguments"])) for item in reply["output"] if item["type"] == "function_call"]


def assert_valid(calls: list) -> None:
    assert calls and all(name == "get_forecast" for name, _ in calls)
    for _, arguments in calls:
        jsonschema.validate(arguments, PARAMETERS)


ASK = [{"role": "user", "content": "Forecast for Lyon, 3 days?"}]
RESTARTED = ("qwen3_moe", "deepseek_v3", "deepseek_v32")  # KV, MLA's latent, latent + indexer key via SSD


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_three_protocols_give_schema_valid_tool_calls_and_a_restart_restores_from_ssd(tmp_path, model_type):
    directory = write_checkpoint(tmp_path / model_type, model_type)
    model = {"path": str(directory), "name": f"tiny-{model_type}", "dtype": "fp32", "max_context": 1024}
    if model_type in CHAT_FORMATS and model_type != "deepseek_v32":  # V3.2: its dialect names the format
        model["chat_format"] = CHAT_FORMATS[model_type]
    settings = {"model": model, "cache": {"chunk_tokens": 64}}
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "one", settings=settings, state_dir=state) as server:
        calls, reply = chat_calls(server, model_type, ASK)
        assert_valid(calls)
        assert reply["usage"]["prompt_tokens"] > FAMILIES[model_type].get("index_topk", 0)  # V3.2: sparse
        assert_valid(anthropic_calls(server, model_type))
        assert_valid(responses_calls(server, model_type))
        assert f"with the {model_type} runtime" in server.log() and EXPECTED[model_type] in server.log()
    if model_type not in RESTARTED:
        return
    call = reply["choices"][0]["message"]["tool_calls"][0]
    second = ASK + [reply["choices"][0]["message"], {"role": "tool", "tool_call_id": call["id"], "content": "Sunny"}]
    with ServerProcess(tmp_path / "two", settings=settings, state_dir=state) as server:
        calls, again = chat_calls(server, model_type, second)
    assert_valid(calls)
    assert again["usage"]["kvgate"]["cached_tokens_ssd"] >= 64, again["usage"]
