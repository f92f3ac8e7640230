"""N-gram speculative decoding: proposals, and equality with plain decoding under greedy sampling
on the real engine and model, fenced and unfenced."""

from __future__ import annotations

import pytest

from kvgate.core.config import Config
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.engine import speculative
from kvgate.core.fence import tokenizer_info
from kvgate.core.types import ChatRequest, Message, SamplingParams, ToolChoice
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.plugins.drafter_ngram import propose_ngram
from tests.core.fence.conftest import WEATHER
from tests.core.fence.engine_run import generate, make_engine


def test_propose_ngram_continues_the_latest_match():
    tokens = [1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert propose_ngram(tokens, 2) == [7, 8]
    assert propose_ngram(tokens, 10, ngram=3) == [7, 8, 1, 2, 3]
    assert propose_ngram([1, 2, 3], 4) == []
    assert propose_ngram([5, 6, 5], 3) == [6, 5]  # falls back to shorter n-grams
    assert propose_ngram(tokens, 0) == []


REPEAT = "Repeat this list exactly three times: apple, banana, cherry, date, elderberry."


def requests() -> list[tuple[str, ChatRequest, bool]]:
    greedy = SamplingParams(temperature=0.0)
    plain = ChatRequest(model="m", messages=[Message("user", REPEAT)], sampling=greedy)
    tool = ChatRequest(model="m", messages=[Message("user", "Weather in Paris and Rome for 3 days?")],
                       tools=[WEATHER], tool_choice=ToolChoice("required"), sampling=greedy)
    named = ChatRequest(model="m", messages=[Message("user", "Weather in Oslo?")], tools=[WEATHER],
                        tool_choice=ToolChoice("named", "get_weather"), sampling=greedy)
    return [("unfenced", plain, False), ("guarded", plain, True), ("tool-required", tool, True),
            ("tool-named", named, True)]


@pytest.mark.slow
@pytest.mark.parametrize("label,request_,fenced", requests(), ids=[r[0] for r in requests()])
def test_speculation_changes_nothing_under_greedy(smollm2_runtime, engines, pm, accepted_drafts, label, request_,
                                                   fenced):
    runtime, config = smollm2_runtime, bind_plugin_sections(Config(), pm)
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    plain, spec = engines
    dialect = ChatmlJson()
    without, done_a, _ = generate(plain, runtime, dialect, request_, info, config, pm, 48, fenced)
    with_spec, done_b, fence = generate(spec, runtime, dialect, request_, info, config, pm, 48, fenced)
    assert with_spec == without, (runtime.tokenizer.decode(without), runtime.tokenizer.decode(with_spec))
    assert done_a.reason == done_b.reason
    assert sum(accepted_drafts) > 0  # drafts were really accepted, so the comparison means something


def test_a_draft_that_completes_a_loop_is_cut_where_the_guard_bans_it(smol_info, pm):
    """Verification samples fenced logits, so a drafted loop token is rejected at its position."""
    import torch

    from kvgate.core.engine.sequence import Sequence
    from kvgate.core.fence import build_request_fence

    config = bind_plugin_sections(Config(), pm)
    config.section("guard").max_token_repeats = 4
    plain = ChatRequest(model="m", messages=[Message("user", "x")])
    fence = build_request_fence(plain, ChatmlJson(), smol_info, config, pm)
    seq = Sequence(prompt=[1, 2], params=SamplingParams(temperature=0.0), max_tokens=20,
                   stop_token_ids=frozenset([2]), deliver=lambda m: None, fence=fence)
    for token in (7, 7):
        seq.output.append(token)
        fence.advance(token)
    rows = torch.zeros(4, smol_info.vocab_size)
    rows[:, 7] = 10.0  # the model would repeat 7 forever
    rows[:, 8] = 5.0
    chosen, work = speculative.verify(seq, rows, [7, 7, 7], 0)
    assert chosen == [7, 7, 8]  # a fifth 7 in a row is the guard's to refuse; 8 replaces it
    fence.take_state(work)
    assert fence.interventions == 1 and fence.position == 5


@pytest.fixture(scope="module")
def fast_mode_runtime(smollm2_model_cache):
    """The serving setup a user gets with ``deterministic = false`` and n-gram speculation: bf16, the
    native layer over the file's Q4_1 blocks (int4 parts where it does not build), loaded with the
    invariant arithmetic all the same (the config asks for it)."""
    from kvgate.core.config import EngineConfig, ModelConfig
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    return load_runtime(resolve_source(""), ModelConfig(dtype="bf16", max_context=8192),
                        EngineConfig(deterministic=False, speculative_ngram=4), smollm2_model_cache)


@pytest.mark.slow
def test_speculation_keeps_plain_greedy_output_with_deterministic_off(fast_mode_runtime, pm):
    runtime, config = fast_mode_runtime, bind_plugin_sections(Config(), pm)
    assert runtime.deterministic and runtime.weights.format == ("int4+kquant" if runtime.forward.native else "int4")
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    plain, spec = make_engine(runtime, 0), make_engine(runtime, 4)
    try:
        story = " ".join(f"Step {i}: the {['red', 'blue', 'green'][i % 3]} box holds {i * 7} marbles." for i in range(60))
        for text in (REPEAT, story + " Repeat the last three steps exactly."):
            request_ = ChatRequest(model="m", messages=[Message("user", text)], sampling=SamplingParams(temperature=0.0))
            without, done_a, _ = generate(plain, runtime, ChatmlJson(), request_, info, config, pm, 64, False)
            with_spec, done_b, _ = generate(spec, runtime, ChatmlJson(), request_, info, config, pm, 64, False)
            assert with_spec == without and done_a.reason == done_b.reason, runtime.tokenizer.decode(with_spec)
    finally:
        plain.stop(), spec.stop()
