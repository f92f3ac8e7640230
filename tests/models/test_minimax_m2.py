"""The MiniMax M2 runtime against transformers on tiny random fp32 checkpoints (partial and whole-head
RoPE, q/k norms over the whole projections, sigmoid routing with correction biases): one-shot logits,
prefills split at every position, forks and truncations, chunk export/import, batched decode; and the
config keys it refuses at load.

Tolerance: fp32 logits within 1e-4 absolute of transformers'. The runtime's own paths (split,
forked, truncated, exported and imported, batched) are bit-identical to its one-shot prefill in the
deterministic mode (the default: its experts run the invariant ``moe_mlp``), and within 1e-4
without it.
"""

from __future__ import annotations

import pytest
import torch

from tests.models.tiny_minimax_m2 import CONFIGS, build_tiny_minimax_m2, load_tiny_minimax_m2
from tests.models.tiny_models import reference_logits

TOLERANCE = 1e-4
PROMPT = [5, 17, 3, 88, 42, 42, 7, 61, 29, 30, 31, 9, 2, 77, 14, 50, 23, 8, 11, 66, 70, 1, 4]
NAMES = list(CONFIGS)
MODES = [(name, deterministic) for name in NAMES for deterministic in (True, False)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """name -> (directory, transformers model, runtime, one-shot logits)."""
    built = {}
    for name in NAMES:
        directory = tmp_path_factory.mktemp(name)
        model = build_tiny_minimax_m2(directory, name)
        runtime = load_tiny_minimax_m2(directory)
        built[name] = (directory, model, runtime, runtime.prefill(runtime.new_session(), PROMPT, all_logits=True))
    return built


@pytest.fixture(scope="module")
def runtimes(tiny):
    """(name, deterministic) -> (runtime, its one-shot logits)."""
    built = {}
    for name, deterministic in MODES:
        runtime = tiny[name][2] if deterministic else load_tiny_minimax_m2(tiny[name][0], deterministic=False)
        built[name, deterministic] = runtime, runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    return built


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def same(a, b, deterministic):
    return torch.equal(a, b) if deterministic else close(a, b)


def test_no_parameter_keeps_its_constant_initialisation(tiny):
    for name in NAMES:
        model = tiny[name][1]
        for param_name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if "rotary_emb" not in param_name:
                assert tensor.std() > 0, (name, param_name)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_logits_match_transformers(tiny, name):
    _, model, runtime, logits = tiny[name]
    expected = reference_logits(model, PROMPT)
    assert logits.shape == (len(PROMPT), runtime.info.vocab_size) and expected.std() > 0.1
    assert close(logits, expected)
    assert runtime.info.architecture == "minimax_m2" and runtime.parts.state_name == "minimax-m2-kv/1"
    assert runtime.deterministic  # the default, and invariant
    assert runtime.arch.rotary_dim == {"partial_rotary": 8, "full_rotary": 24}[name]
    assert all(layer.moe is not None and layer.moe.shared_gate_up is None for layer in runtime.weights.layers)


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_transformers(tiny, name):
    _, model, runtime, _ = tiny[name]
    expected = reference_logits(model, PROMPT)
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:10])
    steps = torch.stack([runtime.decode([session], [token])[0] for token in PROMPT[10:]])
    assert close(steps, expected[10:])


@pytest.mark.parametrize("name,deterministic", MODES)
def test_prefill_split_at_every_position_equals_one_shot(runtimes, name, deterministic):
    runtime, whole = runtimes[name, deterministic]
    for split in range(1, len(PROMPT)):
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert same(torch.cat(parts), whole, deterministic), f"split at {split}"
        runtime.release(session)


@pytest.mark.parametrize("name,deterministic", MODES)
def test_fork_and_truncate_then_continue_equal_one_shot(runtimes, name, deterministic):
    runtime, whole = runtimes[name, deterministic]
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:14] + [90, 91, 92])
    for length in (0, 1, 3, 4, 9, 14):
        fork = runtime.fork(base, length)
        if length:
            assert same(runtime.prefill(fork, PROMPT[length:], all_logits=True), whole[length:], deterministic)
        truncated = runtime.fork(base)
        runtime.truncate(truncated, length)
        assert truncated.tokens == PROMPT[:length]
        tail = [runtime.decode([truncated], [token])[0] for token in PROMPT[length:length + 3]]
        if length:
            assert same(torch.stack(tail), whole[length:length + 3], deterministic)
        runtime.release(fork)
        runtime.release(truncated)
    runtime.release(base)


@pytest.mark.parametrize("name,deterministic", MODES)
def test_export_import_chunks_then_append_equals_full_prefill(runtimes, name, deterministic):
    runtime, whole = runtimes[name, deterministic]
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:15])
    bounds = [0, 3, 4, 11, 15]
    restored = runtime.new_session()
    for start, end in zip(bounds, bounds[1:]):
        chunk = runtime.export_chunk(source, start, end)
        assert len(chunk) == runtime.CHUNK_HEADER_BYTES + runtime.state_bytes(end - start)
        runtime.import_chunk(restored, PROMPT[start:end], chunk)
    assert restored.tokens == PROMPT[:15]
    assert same(runtime.prefill(restored, PROMPT[15:], all_logits=True), whole[15:], deterministic)
    with pytest.raises(ValueError, match="bytes"):
        runtime.import_chunk(runtime.new_session(), PROMPT[:4], runtime.export_chunk(source, 0, 3))
    arch = runtime.arch
    assert runtime.state_format == f"minimax-m2-kv/1 float32 {arch.layers}x{arch.kv_heads}x{arch.head_dim}"


@pytest.mark.parametrize("name,deterministic", MODES)
def test_batched_decode_over_different_lengths_equals_per_session_decode(runtimes, name, deterministic):
    runtime, whole = runtimes[name, deterministic]
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
        assert same(together, alone, deterministic), f"step {step}"
        if deterministic:  # and each row equals the one-shot prefill's
            assert torch.equal(together, torch.stack([whole[length + step] for length in lengths]))
    for session in batch + single:
        runtime.release(session)


def test_bf16_runtime_is_close_to_fp32(tiny):
    directory, model, _, _ = tiny["partial_rotary"]
    runtime = load_tiny_minimax_m2(directory, dtype="bf16")
    session = runtime.new_session()
    logits = runtime.prefill(session, PROMPT[:20])
    decoded = runtime.decode([session], [PROMPT[20]])[0]
    expected = reference_logits(model, PROMPT[:21])
    assert runtime.state_format.split()[1] == "bfloat16"
    assert (logits - expected[19]).abs().max() < 0.1 and (decoded - expected[20]).abs().max() < 0.1


def test_the_plugin_loads_the_architecture_and_it_selects_the_minimax_m2_dialect_and_format(tiny, tmp_path):
    import json

    from click.testing import CliRunner

    from kvgate.core.cli import build_cli
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.dialect_choice import build_chat_format
    from kvgate.core.loading.model_loading import load_runtime
    from kvgate.core.plugins import build_plugin_manager

    report = json.loads(CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output)["runtimes"]
    assert report["minimax_m2"] == {"plugin": "minimax_m2_runtime", "architectures": {
        "hf": ["minimax_m2", "MiniMaxM2ForCausalLM"], "gguf": []}}
    directory, model, _, _ = tiny["partial_rotary"]
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory), dtype="fp32"))
    pm = build_plugin_manager()
    runtime = load_runtime(config, pm)  # chosen by the declarations of the installed plugins
    assert runtime.parts.state_name == "minimax-m2-kv/1"
    assert close(runtime.prefill(runtime.new_session(), PROMPT[:9]), reference_logits(model, PROMPT[:9])[-1])
    name, dialect, chat_format = build_chat_format(config, pm, runtime)  # the checkpoint has no template
    assert (name, dialect.name, chat_format.name) == ("minimax_m2", "minimax_m2", "minimax_m2")


BASE = {"model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"], "vocab_size": 97, "hidden_size": 64,
        "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 8, "sliding_window": None,
        "attn_type_list": [1, 1], "use_qk_norm": True, "qk_norm_type": "per_layer", "scoring_func": "sigmoid",
        "shared_intermediate_size": 0, "layernorm_mlp_beta": 1.0}


@pytest.mark.parametrize("override,key", [
    ({"sliding_window": 4096}, "sliding_window"), ({"attn_type_list": [0, 1]}, "attn_type_list"),
    ({"use_qk_norm": False}, "use_qk_norm"), ({"qk_norm_type": "per_head"}, "qk_norm_type"),
    ({"scoring_func": "softmax"}, "scoring_func"), ({"shared_intermediate_size": 64}, "shared_intermediate_size"),
    ({"attention_bias": True}, "attention_bias"), ({"hidden_act": "gelu"}, "hidden_act"),
    ({"layernorm_full_attention_alpha": 3.5}, "layernorm_full_attention_alpha"), ({"rotary_dim": 7}, "rotary dims"),
    ({"num_experts_per_tok": 5}, "top_k 5"), ({"num_local_experts": None}, "bad MiniMax M2 config.json"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "partial rotary")])
def test_configs_it_cannot_serve_exactly_are_refused_naming_the_key(override, key):
    from kvgate.models.minimax_m2.arch import minimax_m2_arch

    arch = minimax_m2_arch(BASE)
    assert (arch.rotary_dim, arch.moe.scoring, arch.moe.norm_topk_prob, arch.moe.sparse_layers) == \
        (8, "sigmoid", True, (0, 1))
    with pytest.raises(ValueError, match=key):
        minimax_m2_arch({**BASE, **override})


def test_a_block_scaled_fp8_checkpoint_loads_as_its_dequantized_values(tiny, tmp_path):
    """MiniMax's FP8 release: its attention and expert linears float8 with per-block inverse scales
    (``weight_scale_inv``), routers, norms and embeddings kept; served as the fp32 checkpoint of those values."""
    import re

    from transformers import AutoModelForCausalLM

    from tests.models.fp8_checkpoints import write_dequantized, write_fp8_copy

    source = tiny["partial_rotary"][0]
    linear = re.compile(r"\.self_attn\.[qkvo]_proj\.weight$|\.experts\.\d+\.w[123]\.weight$")
    stored = write_fp8_copy(source, tmp_path / "fp8", lambda name, _: bool(linear.search(name)), (8, 8))
    assert len(stored) == 2 * (4 + 6 * 3)
    write_dequantized(source, tmp_path / "values", stored, (8, 8))
    runtime = load_tiny_minimax_m2(tmp_path / "fp8")
    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "values", dtype=torch.float32).eval()
    assert close(runtime.prefill(runtime.new_session(), PROMPT, all_logits=True), reference_logits(reference, PROMPT))
