"""The DeepSeek V4 runtime on the tiny random fp32 model of tests/models/tiny_deepseek_v4.py (a
sliding, a CSA and an HCA layer; windows of 8, entries per 4 and 8 tokens), against transformers
5.24's DeepseekV4ForCausalLM run in one forward without a cache.

transformers' ``crop`` leaves compressed layers' state stale, so every split, fork, truncation and
import here is compared with a fresh one-shot forward of the same tokens, never with a cropped cache.
"""

from __future__ import annotations

import pytest
import torch

from kvgate.models.deepseek_v4.state import ENTRIES
from tests.models.tiny_deepseek_v4 import build_tiny_v4, load_tiny_v4, reference_logits

TOLERANCE = 1e-4
PROMPT = [(i * 37 + 11) % 97 for i in range(37)]  # crosses 9 CSA windows, 4 HCA windows, 4 sliding windows
OTHER = [(i * 53 + 5) % 97 for i in range(37)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v4")
    return directory, build_tiny_v4(directory)


@pytest.fixture(scope="module")
def runtime(tiny):
    return load_tiny_v4(tiny[0])


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_logits(tiny[1], PROMPT)


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_one_shot_prefill_matches_transformers_and_the_indexer_selection_matters(tiny, runtime, reference):
    _, model = tiny
    session = runtime.new_session()
    assert close(runtime.prefill(session, PROMPT, all_logits=True), reference)
    indexer = model.model.layers[1].self_attn.compressor.indexer
    try:
        indexer.index_topk = len(PROMPT)  # every visible entry: what the top-2 selection leaves out matters
        dense = reference_logits(model, PROMPT)
    finally:
        indexer.index_topk = 2
    assert (dense - reference).abs().max() > 100 * TOLERANCE
    runtime.release(session)


def test_a_prefill_split_at_every_position_then_continued_equals_one_shot(runtime, reference):
    for split in range(1, len(PROMPT)):
        session = runtime.new_session()
        first = runtime.prefill(session, PROMPT[:split], all_logits=True)
        rest = runtime.prefill(session, PROMPT[split:], all_logits=True)
        assert close(torch.cat([first, rest]), reference), split
        runtime.release(session)


def test_decode_token_by_token_equals_one_shot(runtime, reference):
    session = runtime.new_session()
    first = runtime.prefill(session, PROMPT[:1])
    decoded = [runtime.decode([session], [token])[0] for token in PROMPT[1:]]
    assert close(torch.stack([first] + decoded), reference)
    runtime.release(session)


def test_fork_and_truncate_at_every_length_then_continue_equal_one_shot(tiny, runtime, reference):
    _, model = tiny
    for length in range(len(PROMPT)):
        session = runtime.new_session()
        runtime.prefill(session, PROMPT)
        fork = runtime.fork(session, length)
        runtime.truncate(session, length)
        assert fork.length == session.length == length
        # the fork shares the compressed entries (copied only by the first of the two to append)
        assert fork.aux[ENTRIES][(2, "kv")].buffer is session.aux[ENTRIES][(2, "kv")].buffer
        assert close(runtime.prefill(fork, PROMPT[length:], all_logits=True), reference[length:]), length
        # the truncated session goes on with other tokens: nothing of the dropped ones may survive
        other = PROMPT[:length] + OTHER[length:]
        expected = reference_logits(model, other)[length:]
        assert close(runtime.prefill(session, other[length:], all_logits=True), expected), length
        runtime.release(session)
        runtime.release(fork)


def test_batched_decode_over_sessions_of_different_lengths_equals_per_session_decode(runtime, reference):
    lengths = [3, 9, 16, 22]
    batch = [runtime.new_session() for _ in lengths]
    alone = [runtime.new_session() for _ in lengths]
    for session, twin, length in zip(batch, alone, lengths):
        runtime.prefill(session, PROMPT[:length])
        runtime.prefill(twin, PROMPT[:length])
    for step in range(12):
        logits = runtime.decode(batch, [PROMPT[length + step] for length in lengths])
        for row, (twin, length) in enumerate(zip(alone, lengths)):
            single = runtime.decode([twin], [PROMPT[length + step]])[0]
            assert close(logits[row], single) and close(logits[row], reference[length + step])
    for session in batch + alone:
        runtime.release(session)


def test_export_then_import_then_append_equals_a_full_prefill(tiny, runtime, reference):
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:30])
    bounds = [0, 5, 13, 30]  # chunk ends inside CSA, HCA and sliding windows
    chunks = [runtime.export_chunk(source, a, b) for a, b in zip(bounds, bounds[1:])]
    restarted = load_tiny_v4(tiny[0])  # as after a restart: the chunks came from the SSD tier
    assert restarted.state_format == runtime.state_format
    restored = restarted.new_session()
    for (a, b), chunk in zip(zip(bounds, bounds[1:]), chunks):
        restarted.import_chunk(restored, PROMPT[a:b], chunk)
    assert close(restarted.prefill(restored, PROMPT[30:], all_logits=True), reference[30:])
    partial = restarted.new_session()  # restored part way, then truncated inside a chunk, as the cache does
    restarted.import_chunk(partial, PROMPT[:5], chunks[0])
    restarted.import_chunk(partial, PROMPT[5:13], chunks[1])
    restarted.truncate(partial, 11)
    assert close(restarted.prefill(partial, PROMPT[11:], all_logits=True), reference[11:])
    with pytest.raises(ValueError):
        restarted.import_chunk(restarted.new_session(), PROMPT[:6], chunks[0])
    runtime.release(source)


def test_an_interrupted_prefill_leaves_the_session_as_it_was(runtime, reference):
    from kvgate.core.runtime import PrefillInterrupted

    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:10])
    calls = []
    with pytest.raises(PrefillInterrupted):
        runtime.prefill(session, OTHER[10:], interrupted=lambda: calls.append(1) or len(calls) > 2)
    assert session.length == 10
    assert close(runtime.prefill(session, PROMPT[10:], all_logits=True), reference[10:])
    runtime.release(session)


def test_bf16_weights_load_and_stay_near_the_fp32_reference(tiny, reference):
    runtime = load_tiny_v4(tiny[0], dtype="bf16")
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    assert runtime.state_format.split()[1] == "bfloat16"
    assert (logits - reference).abs().max() < 0.1 * reference.abs().max()


def test_v4_is_its_own_runtime_plugin_for_hf_directories(tiny, tmp_path):
    import json

    from click.testing import CliRunner

    from kvgate.core.cli import build_cli
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.model_loading import load_runtime
    from kvgate.core.plugins import build_plugin_manager

    report = json.loads(CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output)["runtimes"]
    assert report["deepseek_v4"] == {"plugin": "deepseek_v4", "architectures": {
        "hf": ["deepseek_v4", "DeepseekV4ForCausalLM"], "gguf": []}}
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(tiny[0]), dtype="fp32"))
    runtime = load_runtime(config, build_plugin_manager())
    assert type(runtime).__name__ == "DeepseekV4Runtime" and runtime.info.architecture == "deepseek_v4"
    assert runtime.state_format == "deepseek-v4-state/2 float32 sch kv32 index16 window8 rates4/8"


def test_legacy_config_keys_read_the_same_architecture_and_bad_configs_are_clear_errors(tiny):
    import json

    from kvgate.models.deepseek_v4.arch import DeepseekV4Arch

    config = json.loads((tiny[0] / "config.json").read_text())
    arch = DeepseekV4Arch.from_hf_config(config)
    assert arch.kinds == ("sliding", "csa", "hca") and arch.hashed == (True, False, False)
    assert arch.rope_scaling["rope_type"] == "yarn" and arch.rope_scaling["attention_factor"] == 1.0
    modern = ("layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "partial_rotary_factor")
    legacy = {k: v for k, v in config.items() if k not in modern}
    legacy.update(compress_ratios=[0, 4, 128], compress_rate_hca=8, num_hash_layers=1, qk_rope_head_dim=8,
                  rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    assert DeepseekV4Arch.from_hf_config(legacy) == arch
    with pytest.raises(ValueError, match="not a DeepSeek V4 model"):
        DeepseekV4Arch.from_hf_config({**config, "model_type": "deepseek_v3", "architectures": []})
    with pytest.raises(ValueError, match="only sqrtsoftplus"):
        DeepseekV4Arch.from_hf_config({**config, "scoring_func": "softmax"})
    with pytest.raises(ValueError, match="bad DeepSeek V4 config.json.*index_topk"):
        DeepseekV4Arch.from_hf_config({k: v for k, v in config.items() if k != "index_topk"})
    with pytest.raises(ValueError, match="layer_types"):
        DeepseekV4Arch.from_hf_config({**config, "layer_types": ["sliding_attention", "full_attention"]})


def test_the_architecture_chooses_the_dsml_v4_dialect_and_the_deepseek_v4_chat_format(tiny, runtime):
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.dialect_choice import build_chat_format
    from kvgate.core.plugins import build_plugin_manager
    from kvgate.core.types import ChatRequest, Message

    assert runtime.chat_template is None  # the checkpoint ships no template: the dialect names the format
    config = Config(model=ModelConfig(path=str(tiny[0])))
    name, dialect, chat_format = build_chat_format(config, build_plugin_manager(), runtime)
    assert (name, dialect.variant) == ("deepseek_dsml", "v4")
    rendered = chat_format.render(ChatRequest("m", [Message("user", "hi")]))
    assert rendered.startswith("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>")


@pytest.mark.parametrize("dtype, message", [
    (torch.float8_e4m3fn, "wq_b.weight is torch.float8_e4m3fn but config.json has no quantization_config"),
    (torch.int8, "quantized DeepSeek V4 weights.*int8"),  # FP4 packing, undeclared
])
def test_undeclared_quantized_weights_are_a_clear_error(tiny, tmp_path, dtype, message):
    import shutil

    from safetensors.torch import load_file, save_file

    directory = tmp_path / "fp8"
    shutil.copytree(tiny[0], directory)
    tensors = load_file(str(directory / "model.safetensors"))
    name = "model.layers.0.attn.wq_b.weight"
    tensors[name] = tensors[name].to(dtype)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=message):
        load_tiny_v4(directory)
