"""The runtime on the real embedded SmolLM2-135M (GGUF) against transformers loading the same GGUF.

Tolerance: fp32 logits within 1e-3 absolute of transformers' (measured ~5e-5; logits reach ~35).
"""

from __future__ import annotations

import os

import jinja2
import pytest
import torch

pytestmark = pytest.mark.slow

SECTION_D_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
                 19712, 8182, 2, 198, 1, 4093, 198, 26843, 2, 198, 1, 520, 9531, 198]
TOLERANCE = 1e-3


def render(runtime, messages) -> str:
    template = jinja2.Environment().from_string(runtime.chat_template)
    return template.render(messages=messages, add_generation_prompt=True, **runtime.special_tokens)


@pytest.fixture(scope="module")
def hf_smollm2():
    from transformers import AutoModelForCausalLM

    from kvgate.models.embedded import embedded_gguf_path

    path = embedded_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    return model.eval()


def hf_logits(model, tokens, keep=0):
    with torch.no_grad():
        return model(torch.tensor([tokens]), logits_to_keep=keep).logits[0]


def greedy(runtime, sessions, first_logits, steps):
    outputs = [[int(row.argmax())] for row in first_logits]
    for _ in range(steps - 1):
        logits = runtime.decode(sessions, [out[-1] for out in outputs])
        for out, row in zip(outputs, logits):
            out.append(int(row.argmax()))
    return outputs


def test_tokenizer_matches_section_d_and_splits_digits(smollm2_runtime):
    text = render(smollm2_runtime, [{"role": "user", "content": "Hi"}])
    assert smollm2_runtime.tokenizer.encode(text).ids == SECTION_D_IDS
    digits = smollm2_runtime.tokenizer.encode("year 2024").tokens
    assert digits[-4:] == ["2", "0", "2", "4"]
    assert smollm2_runtime.info.eos_token_ids == [2] and smollm2_runtime.info.bos_token_id == 1


def test_logits_match_transformers(smollm2_runtime, hf_smollm2):
    runtime = smollm2_runtime
    tokens = runtime.tokenizer.encode("The capital of France is Paris.\n\n1. Apples cost 12,345 euros; " * 4).ids
    session = runtime.new_session()
    try:
        ours = torch.cat([runtime.prefill(session, tokens[:40], all_logits=True),
                          runtime.prefill(session, tokens[40:], all_logits=True)])
        assert (ours - hf_logits(hf_smollm2, tokens)).abs().max() < TOLERANCE
    finally:
        runtime.release(session)


def test_long_append_prefill_matches_transformers_last_logits(smollm2_runtime, hf_smollm2):
    runtime = smollm2_runtime
    tokens = runtime.tokenizer.encode(" ".join(f"item {i} is {i * 37 % 101};" for i in range(60))).ids[:400]
    session = runtime.new_session()
    try:
        for start in range(0, len(tokens), 128):
            last = runtime.prefill(session, tokens[start:start + 128])
        assert (last - hf_logits(hf_smollm2, tokens, keep=1)[-1]).abs().max() < TOLERANCE
    finally:
        runtime.release(session)


def test_batched_greedy_matches_transformers(smollm2_runtime, hf_smollm2):
    runtime = smollm2_runtime
    prompts = ["Write a haiku about the sea.", "List three primary colors.", "What is 17 + 25?"]
    encoded = [runtime.tokenizer.encode(render(runtime, [{"role": "user", "content": p}])).ids for p in prompts]
    sessions = [runtime.new_session() for _ in prompts]
    try:
        first = torch.stack([runtime.prefill(s, ids) for s, ids in zip(sessions, encoded)])
        ours = greedy(runtime, sessions, first, steps=6)
    finally:
        for session in sessions:
            runtime.release(session)
    for ids, out in zip(encoded, ours):
        with torch.no_grad():
            reference = hf_smollm2.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids):]
        assert out == reference.tolist()[: len(out)]


@pytest.mark.parametrize("fixture", ["smollm2_runtime", "smollm2_runtime_bf16"])
def test_answers_paris(request, fixture):
    runtime = request.getfixturevalue(fixture)
    prompt = render(runtime, [{"role": "user", "content": "What is the capital city of France? Answer in one word."}])
    session = runtime.new_session()
    try:
        first = runtime.prefill(session, runtime.tokenizer.encode(prompt).ids)
        (answer,) = greedy(runtime, [session], first[None], steps=10)
    finally:
        runtime.release(session)
    assert "Paris" in runtime.tokenizer.decode(answer)


@pytest.fixture(scope="module")
def smollm2_torch_bf16(smollm2_model_cache):
    """The embedded model in bf16 on torch's path (not the native layer, which has its own attention)."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    return load_runtime(resolve_source(""), ModelConfig(dtype="bf16", max_context=8192, native_layers=False),
                        EngineConfig(), smollm2_model_cache)


def test_bf16_prefill_with_fp32_attention_stays_as_close_to_transformers(smollm2_torch_bf16, hf_smollm2):
    """Long bf16 prefills on torch's path run attention in fp32 on CPUs without AMX
    (models/prefill_attention.py). Forced on from the first key here, fresh and appended prefill stay as
    close to transformers' fp32 logits as the all-bf16 path (bf16 logits are ~0.09 off on average,
    whichever path)."""
    runtime = smollm2_torch_bf16
    assert runtime.forward.native is None
    tokens = runtime.tokenizer.encode(" ".join(f"item {i} is {i * 37 % 101};" for i in range(60))).ids[:400]
    reference = hf_logits(hf_smollm2, tokens)
    saved = runtime.forward.fp32_attention_keys
    errors, agreement = {}, {}
    try:
        for threshold in (None, 1):
            runtime.forward.fp32_attention_keys = threshold
            session = runtime.new_session()
            try:
                ours = torch.cat([runtime.prefill(session, tokens[:250], all_logits=True),
                                  runtime.prefill(session, tokens[250:], all_logits=True)])
            finally:
                runtime.release(session)
            errors[threshold] = (ours - reference).abs().mean().item()
            agreement[threshold] = (ours.argmax(-1) == reference.argmax(-1)).float().mean().item()
    finally:
        runtime.forward.fp32_attention_keys = saved
    assert errors[None] < 0.15 and errors[1] < 1.1 * errors[None]
    assert agreement[1] >= agreement[None] - 0.02 and agreement[1] > 0.9


def test_an_interrupted_prefill_leaves_the_session_as_it_was(smollm2_runtime):
    from kvgate.core.runtime import PrefillInterrupted

    runtime = smollm2_runtime
    tokens = runtime.tokenizer.encode("The capital of France is Paris.\n\n1. Apples cost 12,345 euros; " * 4).ids
    polls = []
    session, fresh = runtime.new_session(), runtime.new_session()
    try:
        runtime.prefill(session, tokens[:40])
        blocks_before, free_before = list(session.block_table), runtime.pool_stats()["blocks_free"]
        with pytest.raises(PrefillInterrupted):
            runtime.prefill(session, tokens[40:], interrupted=lambda: polls.append(1) or len(polls) > 5)
        assert len(polls) == 6  # stopped before the sixth layer
        assert session.length == 40 and session.block_table == blocks_before
        assert runtime.pool_stats()["blocks_free"] == free_before
        resumed = runtime.prefill(session, tokens[40:], all_logits=True)
        expected = runtime.prefill(fresh, tokens, all_logits=True)[40:]
        assert torch.equal(resumed, expected)  # the deterministic default: split-invariant
    finally:
        runtime.release(session)
        runtime.release(fresh)
