"""The Qwen3, Qwen3-MoE, GLM-4.5 and DeepSeek V3 / V3.2 runtimes against transformers on tiny random fp32 models: one-shot
logits, prefills split anywhere, forks and truncations, chunk export/import, batched decode.

Tolerance: fp32 logits within 1e-4 absolute of transformers'; the runtime's own paths (split,
chunked, batched) agree with its one-shot prefill to the same bound.
"""

from __future__ import annotations

import pytest
import torch

from tests.models.tiny_models import reference_logits
from tests.models.tiny_families import FAMILY_CONFIGS, load_tiny_family

TOLERANCE = 1e-4
PROMPT = [5, 17, 3, 88, 42, 42, 7, 61, 29, 30, 31, 9, 2, 77, 14, 50, 23, 8, 11, 66, 70, 1, 4]
NAMES = list(FAMILY_CONFIGS)


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_logits_match_transformers(family_models, name):
    directory, model = family_models[name]
    runtime = load_tiny_family(directory)
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    expected = reference_logits(model, PROMPT)
    assert logits.shape == (len(PROMPT), runtime.info.vocab_size) and expected.std() > 0.1
    assert close(logits, expected)
    assert runtime.info.architecture == FAMILY_CONFIGS[name]["model_type"]


def test_layers_are_dense_or_sparse_as_configured(family_models):
    sparse = {name: [layer.moe is not None for layer in load_tiny_family(family_models[name][0]).weights.layers]
              for name in ("qwen3_moe_norm", "qwen3_moe_step", "qwen3_dense", "glm45", "deepseek_v3")}
    assert sparse == {"qwen3_moe_norm": [False, True, True], "qwen3_moe_step": [False, True, False, True],
                      "qwen3_dense": [False, False], "glm45": [False, True, True], "deepseek_v3": [False, True, True]}


@pytest.mark.parametrize("name", NAMES)
def test_prefill_split_at_every_position_equals_one_shot(family_models, name):
    runtime = load_tiny_family(family_models[name][0])
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    for split in range(1, len(PROMPT)):
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert close(torch.cat(parts), whole), f"split at {split}"
        runtime.release(session)


@pytest.mark.parametrize("name", ["qwen3_dense", "qwen3_moe_norm", "glm45", "deepseek_v3", "deepseek_v32"])
def test_fork_and_truncate_then_continue_equal_one_shot(family_models, name):
    runtime = load_tiny_family(family_models[name][0])
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:14] + [90, 91, 92])
    for length in (0, 1, 3, 4, 9, 14):
        fork = runtime.fork(base, length)
        if length:
            assert close(runtime.prefill(fork, PROMPT[length:], all_logits=True), whole[length:])
        truncated = runtime.fork(base)
        runtime.truncate(truncated, length)
        assert truncated.tokens == PROMPT[:length]
        tail = [runtime.decode([truncated], [token])[0] for token in PROMPT[length:length + 3]]
        if length:
            assert close(torch.stack(tail), whole[length:length + 3])
        runtime.release(fork)
        runtime.release(truncated)


@pytest.mark.parametrize("name", ["qwen3_dense", "qwen3_moe_step", "glm45_qk_norm", "deepseek_v3_no_q_lora",
                                  "deepseek_v32"])
def test_export_import_chunks_then_append_equals_full_prefill(family_models, name):
    runtime = load_tiny_family(family_models[name][0])
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
    assert close(runtime.prefill(restored, PROMPT[15:], all_logits=True), whole[15:])
    with pytest.raises(ValueError, match="bytes"):
        runtime.import_chunk(runtime.new_session(), PROMPT[:4], runtime.export_chunk(source, 0, 3))
    layouts = {"deepseek_v32": "mla-latent-indexed/1", "deepseek": "mla-latent/1", "glm": "glm4moe-kv/1",
               "qwen3": "qwen3-kv/1"}
    family = next(layout for prefix, layout in layouts.items() if name.startswith(prefix))
    assert runtime.state_format.startswith(f"{family} float32 ")


@pytest.mark.parametrize("name", ["qwen3_dense", "qwen3_moe_norm", "glm45", "deepseek_v3", "deepseek_v32"])
def test_batched_decode_over_different_lengths_equals_per_session_decode(family_models, name):
    runtime = load_tiny_family(family_models[name][0])
    lengths = [1, 4, 7, 10, 13]
    batch, single = [], []
    for length in lengths:
        for group in (batch, single):
            group.append(runtime.new_session())
            runtime.prefill(group[-1], PROMPT[:length])
    for step in range(5):
        tokens = [PROMPT[length + step] for length in lengths]
        together = runtime.decode(batch, tokens)
        alone = torch.cat([runtime.decode([session], [token]) for session, token in zip(single, tokens)])
        assert close(together, alone), f"step {step}"


@pytest.mark.parametrize("name", ["qwen3_dense", "qwen3_moe_norm", "qwen3_moe_step", "glm45", "glm45_qk_norm",
                                  "deepseek_v3", "deepseek_v3_no_q_lora"])
def test_gguf_written_by_the_gguf_package_loads_and_matches_its_hf_twin(family_models, name, tmp_path):
    from kvgate.models.formats import resolve_source
    from tests.models.tiny_gguf import write_tiny_gguf

    directory, model = family_models[name]
    path = write_tiny_gguf(directory, tmp_path / f"{name}.gguf")
    source = resolve_source(str(path))
    arch = {"glm": "glm4moe", "dee": "deepseek2"}.get(name[:3], "qwen3moe" if "moe" in name else "qwen3")
    assert (source.kind, source.architecture) == ("gguf", arch)
    runtime = load_tiny_family(path, cache_dir=tmp_path / "models")
    assert [layer.moe is None for layer in runtime.weights.layers] == \
        [layer.moe is None for layer in load_tiny_family(directory).weights.layers]
    assert close(runtime.prefill(runtime.new_session(), PROMPT, all_logits=True), reference_logits(model, PROMPT))


def test_each_family_is_its_own_runtime_plugin_with_its_architectures(family_models, tmp_path):
    import json

    from click.testing import CliRunner

    from kvgate.core.cli import build_cli
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.model_loading import load_runtime
    from kvgate.core.plugins import build_plugin_manager

    report = json.loads(CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output)["runtimes"]
    assert report["qwen3"] == {"plugin": "qwen3", "architectures": {"hf": ["qwen3", "Qwen3ForCausalLM"],
                                                                  "gguf": ["qwen3"]}}
    assert report["qwen3_moe"] == {"plugin": "qwen3_moe", "architectures": {
        "hf": ["qwen3_moe", "Qwen3MoeForCausalLM"], "gguf": ["qwen3moe"]}}
    assert report["glm4_moe"] == {"plugin": "glm4_moe", "architectures": {
        "hf": ["glm4_moe", "Glm4MoeForCausalLM"], "gguf": ["glm4moe"]}}
    assert report["deepseek_v3"] == {"plugin": "deepseek_v3", "architectures": {
        "hf": ["deepseek_v3", "kimi_k2", "DeepseekV3ForCausalLM"], "gguf": ["deepseek2"]}}
    directory, model = family_models["qwen3_moe_norm"]
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory), dtype="fp32"))
    runtime = load_runtime(config, build_plugin_manager())  # chosen by the declarations of the installed plugins
    assert runtime.parts.state_name == "qwen3-kv/1" and runtime.arch.moe is not None
    assert close(runtime.prefill(runtime.new_session(), PROMPT[:9]), reference_logits(model, PROMPT[:9])[-1])


@pytest.mark.parametrize("name", ["qwen3_moe_norm", "glm45", "deepseek_v3", "deepseek_v32"])
def test_bf16_runtime_is_close_to_fp32(family_models, name):
    directory, model = family_models[name]
    runtime = load_tiny_family(directory, dtype="bf16")
    session = runtime.new_session()
    logits = runtime.prefill(session, PROMPT[:20])
    decoded = runtime.decode([session], [PROMPT[20]])[0]
    expected = reference_logits(model, PROMPT[:21])
    assert logits.dtype == torch.float32 and runtime.state_format.split()[1] == "bfloat16"
    # bf16 keeps ~3 significant digits; the tiny model's logits are O(1)
    assert (logits - expected[19]).abs().max() < 0.1 and (decoded - expected[20]).abs().max() < 0.1


def test_mla_caches_the_latent_and_rope_key_only(family_models):
    """Per token and layer: kv_lora_rank + rope_dim values, against heads x 2 x head_dim for GQA."""
    runtime = load_tiny_family(family_models["deepseek_v3"][0])
    assert runtime.state_bytes(1000) == 1000 * 3 * (32 + 8) * 4
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:9])
    assert len(runtime.export_chunk(session, 0, 9)) == runtime.CHUNK_HEADER_BYTES + 9 * 3 * 40 * 4


def test_unsupported_configs_are_clear_errors():
    from kvgate.models.deepseek_v3.arch import DeepseekArch
    from kvgate.models.qwen3.families import qwen3_moe_arch

    base = {"model_type": "qwen3_moe", "vocab_size": 97, "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32}
    assert qwen3_moe_arch(base).moe.sparse_layers == (0, 1)
    with pytest.raises(ValueError, match="sliding_window"):
        qwen3_moe_arch({**base, "use_sliding_window": True})
    with pytest.raises(ValueError, match="top_k 5"):
        qwen3_moe_arch({**base, "num_experts_per_tok": 5})
    with pytest.raises(ValueError, match="bad DeepSeek V3 config.json"):
        DeepseekArch.from_hf_config({"model_type": "deepseek_v3", "vocab_size": 97})
