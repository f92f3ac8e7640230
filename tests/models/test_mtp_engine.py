"""Speculative decoding with GLM-4.5's MTP layer on the real engine: a batch of prompts of different
lengths gives the output of plain decoding token for token (greedy and seeded sampling, unfenced
and under a required tool call's fence, one drafted token a step or three chained), and with an
MTP layer built to guess "the same token again" the acceptances are exactly the ones the plain
output allows."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from kvgate.core.config import Config, EngineConfig
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.fence import build_request_fence, tokenizer_info
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.types import ChatRequest, Message, SamplingParams, Tool, ToolChoice
from kvgate.dialects.glm_xml import GlmXml
from tests.models.mtp_engine_run import glm_with_mtp, run_batch
from tests.models.tiny_families import load_tiny_family

TEXTS = ["Hi", "Forecast for Lyon, 3 days?",
         "Tell me a story about a cat who lived in Paris and liked the rain, the river and the old bridges."]
FORECAST = Tool("get_forecast", "Weather forecast", {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"], "additionalProperties": False})


@pytest.fixture(scope="module")
def runtimes(tmp_path_factory):
    """The tiny GLM-4.5 with a random MTP layer, and with one that guesses its input token again."""
    out = {}
    for head in ("random", "same-token"):
        directory, model, _ = glm_with_mtp(tmp_path_factory.mktemp(head))
        if head == "same-token":
            same_token_head(directory, model.config.num_hidden_layers)
        out[head] = (load_tiny_family(directory, speculative="mtp", max_context=1024), model)
    return out


def prompts_of(runtime) -> list[list[int]]:
    return [runtime.tokenizer.encode(text).ids for text in TEXTS]


def tool_fences(runtime, count: int) -> list:
    pm = build_plugin_manager()
    config = bind_plugin_sections(Config(), pm)
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    request = ChatRequest(model="m", messages=[Message("user", "Forecast?")], tools=[FORECAST],
                          tool_choice=ToolChoice("required"), sampling=SamplingParams(temperature=0.0))
    return [build_request_fence(request, GlmXml("glm45"), info, config, pm) for _ in range(count)]


@pytest.mark.parametrize("head", ["random", "same-token"])
@pytest.mark.parametrize("draft", [1, 3])
@pytest.mark.parametrize("mode", ["greedy", "sampled", "tool-required"])
def test_mtp_speculation_gives_the_plain_output(runtimes, mode, draft, head):
    runtime, _ = runtimes[head]
    prompts, fenced = prompts_of(runtime), mode == "tool-required"
    fences = (lambda: tool_fences(runtime, len(prompts))) if fenced else (lambda: None)
    options = dict(temperature=1.0 if mode == "sampled" else 0.0, max_tokens=120 if fenced else 40)
    plain, reasons, _ = run_batch(runtime, EngineConfig(max_batch=8), prompts, fences(), **options)
    config = EngineConfig(max_batch=8, speculative="mtp", speculative_mtp=draft)
    spec, spec_reasons, step = run_batch(runtime, config, prompts, fences(), **options)
    assert spec == plain and spec_reasons == reasons
    if head == "same-token" and mode != "sampled":  # the outputs repeat tokens: drafts were kept
        assert step.stats.accepted > 0
    elif not fenced:  # (the fence refuses the random layer's guesses where it leaves a choice)
        assert step.stats.drafted > 0
    if fenced:  # the fence ends each output with a complete call
        assert reasons == ["stop"] * len(prompts)
        assert all(runtime.tokenizer.decode(out).strip().startswith("<tool_call>get_forecast") for out in plain)


def same_token_head(directory, layers: int) -> None:
    """Rewrite the MTP layer so that it predicts its input token: eh_proj passes the embedding half
    through, the block adds nothing (zero output projections), the norms are ones and the head is
    the embedding, so the logits are embed @ rmsnorm(embed[token])."""
    tensors = load_file(str(directory / "model.safetensors"))
    prefix = f"model.layers.{layers}."
    embed = tensors["model.embed_tokens.weight"]
    hidden = embed.shape[1]
    for name in list(tensors):
        if name.startswith(prefix) and (name.endswith("down_proj.weight") or name.endswith("o_proj.weight")):
            tensors[name] = torch.zeros_like(tensors[name])
        elif name.startswith(prefix) and name.endswith("norm.weight"):
            tensors[name] = torch.ones_like(tensors[name])
    tensors[prefix + "eh_proj.weight"] = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], 1)
    tensors[prefix + "shared_head.head.weight"] = embed.clone()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def expected_acceptances(out: list[int], guess, stop_ids, max_tokens: int) -> tuple[int, int]:
    """(drafted, accepted) of one-token drafts ``guess(last)`` over a plain output: a step after
    token ``i`` drafts when there is room for the draft and a bonus token; an accepted draft
    brings the token after it along."""
    drafted = accepted = 0
    i = 0
    while i < len(out) - 1 and max_tokens - (i + 1) - 1 > 0:
        draft = guess(out[i])
        if draft in stop_ids:
            i += 1
            continue
        drafted += 1
        if out[i + 1] == draft:
            accepted, i = accepted + 1, i + 2
        else:
            i += 1
    return drafted, accepted


def test_acceptance_is_counted_exactly_when_the_mtp_layer_guesses_well(runtimes):
    runtime, model = runtimes["same-token"]
    prompts = prompts_of(runtime)
    plain, _, _ = run_batch(runtime, EngineConfig(max_batch=8), prompts)
    spec, _, step = run_batch(runtime, EngineConfig(max_batch=8, speculative="mtp"), prompts)
    assert spec == plain
    embed = model.model.embed_tokens.weight.detach()
    normed = embed * torch.rsqrt(embed.pow(2).mean(-1, keepdim=True) + model.config.rms_norm_eps)

    def guess(token: int) -> int:
        return int(torch.argmax(embed @ normed[token]))

    stops = set(runtime.info.eos_token_ids)
    counts = [expected_acceptances(out, guess, stops, 40) for out in plain]
    assert (step.stats.drafted, step.stats.accepted) == tuple(map(sum, zip(*counts)))
    assert step.stats.accepted > 0
