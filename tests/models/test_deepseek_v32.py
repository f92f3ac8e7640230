"""DeepSeek V3.2's lightning indexer, on the tiny random fp32 ``deepseek_v32`` model of
tests/models/tiny_families.py (the shared paths -- split prefills, forks, chunks, batched decode --
run in test_families_tiny.py): the sparse selection changes the logits and the runtime follows it,
decode across ``index_topk`` matches transformers, the indexer key is part of each token's exported
state, the selection's rules, the plugin's declarations and config errors.

The reference is transformers 5.24's own DeepseekV32ForCausalLM, run on CPU in fp32: its SDPA path
needs no kernel (the indexer's top-k is scattered into a boolean attention mask).
"""

from __future__ import annotations

import pytest
import torch

from tests.models.tiny_families import FAMILY_CONFIGS, build_tiny_family, load_tiny_family
from tests.models.tiny_models import reference_logits

TOLERANCE = 1e-4
PROMPT = [5, 17, 3, 88, 42, 42, 7, 61, 29, 30, 31, 9, 2, 77, 14, 50, 23, 8, 11, 66, 70, 1, 4]
TOP_K = FAMILY_CONFIGS["deepseek_v32"]["index_topk"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v32")
    return directory, build_tiny_family(directory, "deepseek_v32")


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def dense_reference(model, tokens):
    """transformers' logits with every causal token selected (index_topk past the prompt)."""
    indexers = [layer.self_attn.indexer for layer in model.model.layers]
    try:
        for indexer in indexers:
            indexer.index_topk = len(tokens)
        return reference_logits(model, tokens)
    finally:
        for indexer in indexers:
            indexer.index_topk = TOP_K


def test_the_sparse_selection_changes_the_logits_and_the_runtime_follows_it(tiny):
    directory, model = tiny
    runtime = load_tiny_family(directory)
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    sparse, dense = reference_logits(model, PROMPT), dense_reference(model, PROMPT)
    assert TOP_K < len(PROMPT) and runtime.arch.index_topk == TOP_K
    assert close(logits, sparse)
    # up to index_topk tokens every causal token is selected; past it the selection matters
    assert close(sparse[:TOP_K], dense[:TOP_K]) and (sparse[TOP_K:] - dense[TOP_K:]).abs().max() > 100 * TOLERANCE


def test_decode_across_index_topk_matches_transformers(tiny):
    directory, model = tiny
    runtime = load_tiny_family(directory)
    session = runtime.new_session()
    first = runtime.prefill(session, PROMPT[:3])
    decoded = [runtime.decode([session], [token])[0] for token in PROMPT[3:]]
    assert close(torch.stack([first] + decoded[:-1]), reference_logits(model, PROMPT)[2:-1])


def test_the_indexer_key_is_part_of_each_tokens_exported_state(tiny, family_models):
    directory, model = tiny
    runtime = load_tiny_family(directory)
    layers, latent, index_dim = 3, 32 + 8, 16
    assert runtime.state_bytes(1000) == 1000 * layers * (latent + index_dim) * 4
    v3 = load_tiny_family(family_models["deepseek_v3"][0])  # the same MLA sizes without an indexer
    assert v3.state_bytes(1000) == 1000 * layers * latent * 4 and v3.state_format != runtime.state_format
    source = runtime.new_session()
    runtime.prefill(source, PROMPT[:15])
    chunk = runtime.export_chunk(source, 0, 15)
    restarted = load_tiny_family(directory)  # as after a restart: the chunk came from the SSD tier
    restored = restarted.new_session()
    restarted.import_chunk(restored, PROMPT[:15], chunk)
    assert close(restarted.prefill(restored, PROMPT[15:], all_logits=True), reference_logits(model, PROMPT)[15:])
    header = runtime.CHUNK_HEADER_BYTES
    state = torch.frombuffer(bytearray(chunk[header:]), dtype=torch.float32).view(layers, 15, latent + index_dim)
    state[:, :, latent:] = 0  # the indexer keys alone wiped
    wiped = restarted.new_session()
    restarted.import_chunk(wiped, PROMPT[:15], chunk[:header] + state.numpy().tobytes())
    moved = restarted.prefill(wiped, PROMPT[15:], all_logits=True) - reference_logits(model, PROMPT)[15:]
    assert moved.abs().max() > 100 * TOLERANCE


def test_selection_keeps_every_visible_token_up_to_k_and_breaks_ties_to_the_earliest():
    from kvgate.models.deepseek_v32.indexer import top_k_mask

    scores = torch.tensor([[0.5, 2.0, 1.0, 1.0, 1.0, 3.0, 9.0],
                           [0.5, 2.0, 1.0, 1.0, 1.0, 3.0, 9.0],
                           [4.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    visible = torch.tensor([[True] * 6 + [False], [True] * 7, [True, True, False, False, False, False, False]])
    mask = top_k_mask(scores, visible, 4)
    assert mask.tolist() == [[False, True, True, True, False, True, False],
                             [False, True, True, False, False, True, True],
                             [True, True, False, False, False, False, False]]
    assert top_k_mask(scores[:, :4], visible[:, :4], 4).equal(visible[:, :4])


def test_v32_is_its_own_runtime_plugin_for_hf_directories(tiny, tmp_path):
    import json

    from click.testing import CliRunner

    from kvgate.core.cli import build_cli
    from kvgate.core.config import Config, ModelConfig
    from kvgate.core.loading.model_loading import load_runtime
    from kvgate.core.plugins import build_plugin_manager

    report = json.loads(CliRunner().invoke(build_cli(), ["plugins", "--json", "--no-model"]).output)["runtimes"]
    assert report["deepseek_v32"] == {"plugin": "deepseek_v32", "architectures": {
        "hf": ["deepseek_v32", "DeepseekV32ForCausalLM"], "gguf": []}}
    directory, model = tiny
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(directory), dtype="fp32"))
    runtime = load_runtime(config, build_plugin_manager())
    assert runtime.parts.state_name == "mla-latent-indexed/1" and runtime.info.architecture == "deepseek_v32"
    assert runtime.state_format == "mla-latent-indexed/1 float32 3x(32+8+16) top6"


def test_unsupported_v32_configs_are_clear_errors(tiny):
    import json

    from kvgate.models.deepseek_v3.arch import DeepseekArch
    from kvgate.models.deepseek_v32.arch import DeepseekV32Arch

    config = json.loads((tiny[0] / "config.json").read_text())
    assert DeepseekV32Arch.from_hf_config(config).cached_dim == 32 + 8 + 16
    with pytest.raises(ValueError, match="q_lora_rank is required"):
        DeepseekV32Arch.from_hf_config({**config, "q_lora_rank": None})
    with pytest.raises(ValueError, match="bad DeepSeek V3.2 config.json.*index_topk"):
        DeepseekV32Arch.from_hf_config({k: v for k, v in config.items() if k != "index_topk"})
    with pytest.raises(ValueError, match="index_head_dim must hold"):
        DeepseekV32Arch.from_hf_config({**config, "index_head_dim": 4})
    with pytest.raises(ValueError, match="not a DeepSeek V3 model"):
        DeepseekArch.from_hf_config(config)
    with pytest.raises(ValueError, match="not a DeepSeek V3.2 model"):
        DeepseekV32Arch.from_hf_config({**config, "model_type": "deepseek_v3", "architectures": []})
