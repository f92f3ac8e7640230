"""The Gemma 4 text runtime against transformers (eager attention) on tiny random fp32 models: a
dense one (sliding window 8 under 60-token prompts, wider full-layer heads with proportional rope,
per-layer inputs, logit soft-capping) and one with KV-shared layers, keys as values, attention biases
and the MoE block (see :mod:`tests.models.tiny_gemma4`).

Tolerance against transformers: fp32 logits within 1e-4. The runtime's own paths (prefill split at
every position, forks and truncations at every length, batched decode, exported and imported
chunks) are bit-identical to a cold prefill in the deterministic mode (the default, MoE block included)
and within 1e-4 without it.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.models.tiny_gemma4 import build_tiny_gemma4, build_tiny_gemma4_multimodal, load_tiny_gemma4
from tests.models.tiny_models import VOCAB, reference_logits

TOLERANCE = 1e-4
PROMPT = torch.randint(3, VOCAB, (60,), generator=torch.Generator().manual_seed(7)).tolist()
MODES = [("dense", True), ("dense", False), ("shared_moe", True), ("shared_moe", False)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for name in ("dense", "shared_moe"):
        directory = tmp_path_factory.mktemp(name)
        out[name] = directory, build_tiny_gemma4(directory, name)
    return out


@pytest.fixture(scope="module", params=MODES, ids=lambda m: f"{m[0]}-{'det' if m[1] else 'fast'}")
def loaded(request, built):
    name, deterministic = request.param
    runtime = load_tiny_gemma4(built[name][0], deterministic=deterministic)
    whole = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    return runtime, whole, reference_logits(built[name][1], PROMPT)


def same(runtime, a, b) -> bool:
    return torch.equal(a, b) if runtime.deterministic else torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_no_parameter_keeps_its_constant_initialisation(built):
    for _, model in built.values():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if name.endswith(("weight", "scale", "layer_scalar", "bias")):
                assert tensor.numel() == 1 or tensor.std() > 0, name
            if name.endswith("layer_scalar"):
                assert tensor.item() != 1.0, name


def test_prefill_logits_match_transformers(loaded):
    runtime, whole, expected = loaded
    assert whole.shape == (len(PROMPT), VOCAB) and expected.std() > 0.1
    assert torch.allclose(whole, expected, atol=TOLERANCE, rtol=0)
    assert runtime.info.architecture == "gemma4"
    assert runtime.deterministic == runtime.forward.deterministic


def test_decode_matches_transformers(loaded):
    runtime, _, expected = loaded
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:20])
    steps = torch.stack([runtime.decode([session], [token])[0] for token in PROMPT[20:35]])
    assert torch.allclose(steps, expected[20:35], atol=TOLERANCE, rtol=0)
    runtime.release(session)


def test_prefill_split_at_every_position(loaded):
    runtime, whole, _ = loaded
    for split in range(1, len(PROMPT)):
        session = runtime.new_session()
        parts = [runtime.prefill(session, PROMPT[:split], all_logits=True),
                 runtime.prefill(session, PROMPT[split:], all_logits=True)]
        assert same(runtime, torch.cat(parts), whole), f"split at {split}"
        runtime.release(session)


def test_fork_and_truncate_at_every_length(loaded):
    runtime, whole, _ = loaded
    base = runtime.new_session()
    runtime.prefill(base, PROMPT[:50] + [5, 6, 7])
    for length in range(0, 51, 3):
        fork = runtime.fork(base, length)
        if length:
            assert same(runtime, runtime.prefill(fork, PROMPT[length:], all_logits=True), whole[length:]), length
        truncated = runtime.fork(base)
        runtime.truncate(truncated, length)
        assert truncated.tokens == PROMPT[:length]
        tail = torch.stack([runtime.decode([truncated], [token])[0] for token in PROMPT[length:length + 2]])
        if length:
            assert same(runtime, tail, whole[length:length + 2]), f"truncated to {length}"
        runtime.release(fork)
        runtime.release(truncated)
    runtime.release(base)


def test_batched_decode_equals_one_by_one(loaded):
    runtime, whole, _ = loaded
    starts = [3, 17, 40]
    sessions = [runtime.new_session() for _ in starts]
    for session, start in zip(sessions, starts):
        runtime.prefill(session, PROMPT[:start])
    for step in range(4):
        logits = runtime.decode(sessions, [PROMPT[start + step] for start in starts])
        for row, start in enumerate(starts):
            assert same(runtime, logits[row], whole[start + step]), (start, step)
    for session in sessions:
        runtime.release(session)


def test_export_import_round_trip_then_append(loaded):
    runtime, whole, _ = loaded
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:45])
    bounds = [0, 13, 30, 45]
    chunks = [runtime.export_chunk(source, a, b) for a, b in zip(bounds, bounds[1:])]
    assert len(chunks[0]) == 16 + runtime.state_bytes(13)
    target = runtime.new_session()
    with pytest.raises(ValueError):
        runtime.import_chunk(target, PROMPT[:12], chunks[0])
    assert target.length == 0
    for (a, b), data in zip(zip(bounds, bounds[1:]), chunks):
        runtime.import_chunk(target, PROMPT[a:b], data)
    assert same(runtime, runtime.prefill(target, PROMPT[45:], all_logits=True), whole[45:])
    assert runtime.state_format.startswith("gemma4-kv/1 float32")
    runtime.release(source)
    runtime.release(target)


def test_kv_shared_layers_keep_no_state_of_their_own(built):
    runtime = load_tiny_gemma4(built["shared_moe"][0], deterministic=False)
    assert runtime.arch.kv_sources == (0, 1, 0, 1) and runtime.pool.layers == 2
    assert [s.shape[3:] for s in runtime.pool.storages] == [(2, 16), (1, 32)]  # the full layer: one KV head of 32


@pytest.mark.parametrize("key, value, message", [
    ("use_bidirectional_attention", "all", "use_bidirectional_attention"),
    ("hidden_activation", "relu", "hidden_activation"),
    ("num_kv_shared_layers", 4, "num_kv_shared_layers"),
    ("rope_parameters", {"sliding_attention": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}}, "rope_type"),
    ("per_layer_config", {"1": {"head_dim": 32, "intermediate_size": 8}}, "per_layer_config"),
    ("vocab_size_per_layer_input", 50, "vocab_size_per_layer_input"),
])
def test_configs_it_cannot_serve_exactly_are_refused_naming_the_key(built, tmp_path, key, value, message):
    import shutil

    shutil.copytree(built["dense"][0], tmp_path, dirs_exist_ok=True)
    config = json.loads((tmp_path / "config.json").read_text())
    config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message):
        load_tiny_gemma4(tmp_path)


def test_conditional_generation_checkpoint_serves_its_language_model(tmp_path, caplog):
    import logging

    model = build_tiny_gemma4_multimodal(tmp_path)
    with caplog.at_level(logging.INFO, logger="kvgate"):
        runtime = load_tiny_gemma4(tmp_path)
    assert "vision / audio towers are left unloaded" in caplog.text
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([PROMPT])).logits[0]
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert torch.allclose(logits, expected, atol=TOLERANCE, rtol=0) and expected.std() > 0.1


def test_bf16_runs_and_stays_finite(built):
    for name in ("dense", "shared_moe"):
        runtime = load_tiny_gemma4(built[name][0], dtype="bf16")
        session = runtime.new_session()
        logits = runtime.prefill(session, PROMPT, all_logits=True)
        assert torch.isfinite(logits).all() and torch.isfinite(runtime.decode([session], [5])).all()
