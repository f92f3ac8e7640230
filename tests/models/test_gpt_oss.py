"""The gpt-oss runtime against transformers on tiny random fp32 models (eager attention, sinks in its
softmax): one-shot logits, an MXFP4 checkpoint, prefills split anywhere, forks and truncations,
chunk export/import, batched decode; MXFP4 dequantization against transformers' own.

Tolerance: fp32 logits within 1e-4 absolute of transformers'. The runtime's own paths (split,
chunked, forked, batched) give bit-identical logits in the deterministic mode (the default) and
agree within the same 1e-4 without it. The prompts are longer than the 5-token window of the
sliding layers.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.models.tiny_gpt_oss import (CONFIG, build_tiny_gpt_oss, load_tiny_gpt_oss, random_mxfp4, tiny_model,
                                       write_mxfp4)
from tests.models.tiny_models import reference_logits

TOLERANCE = 1e-4
PROMPT = [5, 17, 3, 88, 42, 42, 7, 61, 29, 30, 31, 9, 2, 77, 14, 50, 23, 8, 11, 66, 70, 1, 4]


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gpt_oss")
    return directory, build_tiny_gpt_oss(directory)


@pytest.fixture(scope="module", params=[True, False], ids=["deterministic", "fast"])
def runtime(tiny, request):
    return load_tiny_gpt_oss(tiny[0], deterministic=request.param)


def same(runtime):
    """How the runtime's own paths must agree: bit for bit in the deterministic mode."""
    return torch.equal if runtime.deterministic else close


def test_prefill_logits_match_transformers_and_the_window_matters(tiny, runtime):
    directory, model = tiny
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    expected = reference_logits(model, PROMPT)
    assert logits.shape == (len(PROMPT), runtime.info.vocab_size) and expected.std() > 0.1
    assert close(logits, expected)
    assert runtime.info.architecture == "gpt_oss" and runtime.arch.sliding == (True, False, True)
    assert runtime.arch.rope_scaling["rope_type"] == "yarn" and runtime.state_format.startswith("gpt_oss-kv/1 float32")
    model.config.sliding_window = 1000  # the same weights without a window answer otherwise past it
    try:
        unwindowed = reference_logits(model, PROMPT)
    finally:
        model.config.sliding_window = CONFIG["sliding_window"]
    assert close(unwindowed[:5], expected[:5]) and not close(unwindowed[5:], expected[5:])


def test_prefill_split_at_every_position_equals_one_shot(runtime):
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    for split in range(1, len(PROMPT)):
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert same(runtime)(torch.cat(parts), whole), f"split at {split}"
        runtime.release(session)


def test_fork_and_truncate_then_continue_equal_one_shot(runtime):
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:14] + [90, 91, 92])
    for length in (0, 1, 3, 4, 6, 9, 14):
        fork = runtime.fork(base, length)
        if length:
            assert same(runtime)(runtime.prefill(fork, PROMPT[length:], all_logits=True), whole[length:])
        truncated = runtime.fork(base)
        runtime.truncate(truncated, length)
        assert truncated.tokens == PROMPT[:length]
        tail = [runtime.decode([truncated], [token])[0] for token in PROMPT[length:length + 8]]
        if length:
            assert same(runtime)(torch.stack(tail), whole[length:length + 8])
        runtime.release(fork)
        runtime.release(truncated)


def test_export_import_chunks_then_append_equals_full_prefill(runtime):
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:15])
    bounds = [0, 3, 4, 11, 15]
    restored = runtime.new_session()
    for start, end in zip(bounds, bounds[1:]):
        chunk = runtime.export_chunk(source, start, end)
        assert len(chunk) == runtime.CHUNK_HEADER_BYTES + runtime.state_bytes(end - start)
        runtime.import_chunk(restored, PROMPT[start:end], chunk)
    assert restored.tokens == PROMPT[:15]
    assert same(runtime)(runtime.prefill(restored, PROMPT[15:], all_logits=True), whole[15:])
    assert runtime.state_bytes(1) == 3 * 2 * 2 * 16 * 4  # every layer's K/V, sliding ones included
    with pytest.raises(ValueError, match="bytes"):
        runtime.import_chunk(runtime.new_session(), PROMPT[:4], runtime.export_chunk(source, 0, 3))


def test_batched_decode_over_different_lengths_equals_per_session_decode(runtime):
    lengths = [1, 4, 7, 10, 13]
    batch, single = [], []
    for length in lengths:
        for group in (batch, single):
            group.append(runtime.new_session())
            runtime.prefill(group[-1], PROMPT[:length])
    for step in range(8):
        tokens = [PROMPT[length + step] for length in lengths]
        together = runtime.decode(batch, tokens)
        alone = torch.cat([runtime.decode([session], [token]) for session, token in zip(single, tokens)])
        assert same(runtime)(together, alone), f"step {step}"


def test_mxfp4_dequantization_equals_transformers():
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from kvgate.models import mxfp4

    assert mxfp4.e2m1_values().tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                            -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    blocks, scales = random_mxfp4((3, 40, 4), torch.Generator().manual_seed(1))
    scales[0, 0] = torch.tensor([0, 100, 127, 150], dtype=torch.uint8)  # tiny, small, one, large scales
    for dtype in (torch.float32, torch.bfloat16):
        ours = mxfp4.dequantize_checkpoint({"w_blocks": blocks, "w_scales": scales}, dtype)["w"]
        theirs = convert_moe_packed_tensors(blocks, scales, dtype=dtype)
        assert ours.dtype == dtype and ours.shape == (3, 128, 40) and torch.equal(ours, theirs)


def test_an_mxfp4_checkpoint_loads_dequantized_and_matches_transformers(tmp_path):
    model = build_tiny_gpt_oss(tmp_path, seed=11)
    write_mxfp4(tmp_path, model)
    runtime = load_tiny_gpt_oss(tmp_path)
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert close(logits, reference_logits(model, PROMPT))
    config = json.loads((tmp_path / "config.json").read_text())
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["model.layers.1.mlp.experts.down_proj_scales"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="down_proj_blocks has no model.layers.1.mlp.experts.down_proj_scales"):
        load_tiny_gpt_oss(tmp_path)
    assert config["quantization_config"]["quant_method"] == "mxfp4"


def test_bf16_runtime_is_close_to_fp32(tiny):
    directory, model = tiny
    runtime = load_tiny_gpt_oss(directory, dtype="bf16")
    session = runtime.new_session()
    logits = runtime.prefill(session, PROMPT[:20])
    decoded = runtime.decode([session], [PROMPT[20]])[0]
    expected = reference_logits(model, PROMPT[:21])
    assert runtime.state_format.split()[1] == "bfloat16"
    assert (logits - expected[19]).abs().max() < 0.1 and (decoded - expected[20]).abs().max() < 0.1


def test_the_deterministic_mode_is_the_default_and_its_state_is_its_own(tiny):
    default, fast = load_tiny_gpt_oss(tiny[0]), load_tiny_gpt_oss(tiny[0], deterministic=False)
    assert default.deterministic and not fast.deterministic
    assert default.fingerprint != fast.fingerprint  # K/V of one arithmetic never serves the other


def test_a_prompt_longer_than_a_key_tile_is_exact_in_the_deterministic_mode(tiny):
    """300 tokens: past one 256-key tile of the deterministic attention, and past its 128-query chunk."""
    directory, model = tiny
    runtime = load_tiny_gpt_oss(directory)
    prompt = [(7 * i + 3) % 97 for i in range(300)]
    whole = runtime.prefill(runtime.new_session(), prompt, all_logits=True)
    assert close(whole, reference_logits(model, prompt))
    session = runtime.new_session()
    runtime.prefill(session, prompt[:261])
    assert torch.equal(runtime.prefill(session, prompt[261:], all_logits=True), whole[261:])


# gpt-oss-20b's config.json as published (legacy rope_scaling and top-level rope_theta; no swiglu_alpha)
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "attention_bias": True, "head_dim": 64, "hidden_size": 2880,
               "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
               "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
               "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
               "quantization_config": {"quant_method": "mxfp4"}, "rms_norm_eps": 1e-05,
               "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
               "rope_theta": 150000, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
               "vocab_size": 201088}


def test_configs_are_read_and_unservable_ones_are_clear_errors():
    from kvgate.models.gpt_oss.arch import GptOssArch

    real = GptOssArch.from_hf_config(GPT_OSS_20B)
    assert (real.sliding[:3], real.sliding_window, real.swiglu_alpha, real.rope_theta) == \
        ((True, False, True), 128, 1.702, 150000.0)
    assert real.rope_scaling["factor"] == 32.0 and real.rope_scaling["truncate"] is False
    assert real.moe.top_k == 4 and real.expert_width == 2880
    base = tiny_model(num_hidden_layers=2).config.to_dict()
    assert GptOssArch.from_hf_config(base).sliding == (True, False)
    with pytest.raises(ValueError, match="layer_types"):
        GptOssArch.from_hf_config({**base, "layer_types": ["sliding_attention", "chunked_attention"]})
    with pytest.raises(ValueError, match="sliding_window"):
        GptOssArch.from_hf_config({**base, "sliding_window": 0})
    with pytest.raises(ValueError, match="top_k 5"):
        GptOssArch.from_hf_config({**base, "num_experts_per_tok": 5})
    with pytest.raises(ValueError, match="bad gpt-oss config.json"):
        GptOssArch.from_hf_config({"model_type": "gpt_oss", "vocab_size": 97})
    with pytest.raises(ValueError, match="rope scaling type 'longrope'"):
        GptOssArch.from_hf_config({**base, "rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}})


def test_unknown_quantization_is_refused_at_load(tmp_path):
    build_tiny_gpt_oss(tmp_path, num_hidden_layers=2)
    config = json.loads((tmp_path / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "bitsandbytes"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="'bitsandbytes' is not supported"):
        load_tiny_gpt_oss(tmp_path)


def test_gpt_oss_is_its_own_runtime_plugin_and_chosen_by_its_architecture(tiny, tmp_path):
    from click.testing import CliRunner

    from kvgate.core.cli import build_cli
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.model_loading import load_runtime
    from kvgate.core.plugins import build_plugin_manager

    report = json.loads(CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output)["runtimes"]
    assert report["gpt_oss"] == {"plugin": "gpt_oss", "architectures": {"hf": ["gpt_oss", "GptOssForCausalLM"],
                                                                        "gguf": []}}
    directory, model = tiny
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory), dtype="fp32"))
    runtime = load_runtime(config, build_plugin_manager())
    assert runtime.parts.state_name == "gpt_oss-kv/1"
    assert close(runtime.prefill(runtime.new_session(), PROMPT[:9]), reference_logits(model, PROMPT[:9])[-1])


def test_kvgate_plugins_describes_a_gpt_oss_model_without_loading_it(tiny, tmp_path):
    import shutil

    from kvgate.plugins.plugin_list import served_model as _served_model
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.plugins import build_plugin_manager, collect
    from tests.models.tiny_gpt_oss import CHATML

    directory = tmp_path / "with_template"
    shutil.copytree(tiny[0], directory)
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    pm = build_plugin_manager()
    report = _served_model(Config(model=ModelConfig(path=str(directory), name="tiny")), pm)
    harmony = "harmony" in collect(pm, "register_dialects", "dialect")
    assert report["architecture"] == "gpt_oss", report
    assert report["dialect"] == ("harmony" if harmony else "chatml_json"), report


def test_the_architecture_selects_the_harmony_dialect_once_registered():
    from kvgate.core.config import ModelConfig
    from kvgate.core.loading.dialect_choice import choose_dialect_name
    from kvgate.core.plugins import build_plugin_manager, collect

    dialects = collect(build_plugin_manager(), "register_dialects", "dialect")
    if "harmony" not in dialects:
        pytest.skip("the harmony dialect is not registered yet")
    assert choose_dialect_name(ModelConfig(), dialects, "gpt_oss", "") == "harmony"
    assert dialects.get("harmony")().chat_format_without_template() == "harmony"
