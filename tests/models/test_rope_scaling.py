"""Rope scalings (linear, llama3, yarn, dynamic) against transformers' own implementations.

Frequencies and attention factors within 1e-6 relative; fp32 logits of tiny random Llamas within
1e-4 absolute (the per-config prefill comparison is in test_llama_tiny.py, over every TINY_CONFIGS
entry); context extension of a model that declares no scaling equals transformers' model with that
scaling declared.
"""

from __future__ import annotations

import pytest
import torch

from kvgate.core.config import ModelConfig
from kvgate.models.hf_loader import max_context
from kvgate.models.llama.layers import LlamaArch
from kvgate.models.rope import rope_frequencies
from kvgate.models.rope_scaling import declared_scaling, dynamic_theta, served_rope
from tests.models.tiny_models import VOCAB, load_tiny, reference_logits

TOLERANCE = 1e-4
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192},
    "yarn_qwen3": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "yarn_deepseek": {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
                      "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1},
    "yarn_mscale_untruncated": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096,
                                "mscale": 0.707, "mscale_all_dim": 1.0, "truncate": False},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048,
                              "attention_factor": 1.3},
}


def hf_config(scaling, head_dim=128, max_positions=131072, theta=1_000_000.0):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, max_position_embeddings=max_positions,
                       rope_theta=theta, rope_scaling=dict(scaling))


def arch_of(config) -> LlamaArch:
    return LlamaArch.from_hf_config({**config.to_dict(), "vocab_size": VOCAB})


@pytest.mark.parametrize("name", list(SCALINGS))
def test_frequencies_and_attention_factor_match_transformers(name):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = hf_config(SCALINGS[name])
    expected, expected_factor = ROPE_INIT_FUNCTIONS[SCALINGS[name]["rope_type"]](config, "cpu")
    arch = arch_of(config)
    ours, factor = rope_frequencies(arch.head_dim, arch.rope_theta, arch.rope_scaling)
    assert torch.allclose(ours, expected.float(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(expected_factor, rel=1e-9)
    if name.startswith("yarn") and name != "yarn_deepseek":
        assert factor != 1.0  # the attention factor is applied, not just the frequencies


@pytest.mark.parametrize("length", [1000, 131072, 300_000])
def test_dynamic_base_matches_transformers_at_the_served_length(length):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = hf_config({"rope_type": "dynamic", "factor": 2.0})
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=length)
    arch, caveat = served_rope(arch_of(config), length, "yarn")
    assert arch.rope_scaling is None and caveat is None
    ours, factor = rope_frequencies(arch.head_dim, arch.rope_theta, None)
    assert torch.allclose(ours, expected.float(), rtol=1e-6, atol=0) and factor == 1.0
    assert (arch.rope_theta == 1_000_000.0) == (length <= 131072)
    assert dynamic_theta(1e6, 128, arch_of(config).rope_scaling, length) == arch.rope_theta


def test_dynamic_logits_past_the_trained_context_match_transformers(tiny_models):
    """transformers recomputes the base for the whole 200-token prompt; served at 200, so do we."""
    directory, model = tiny_models["llama_dynamic"]
    runtime = load_tiny(directory, max_context=200, allow_context_extension=True)
    tokens = [(i * 11) % 90 + 3 for i in range(200)]
    session = runtime.new_session()
    logits = torch.cat([runtime.prefill(session, tokens[:120], all_logits=True),
                        runtime.prefill(session, tokens[120:], all_logits=True)])
    assert torch.allclose(logits[-1], reference_logits(model, tokens)[-1], atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("extension", ["yarn", "linear"])
def test_extension_equals_transformers_with_that_scaling_declared(tiny_models, extension):
    """A model with plain RoPE (trained 128) served at 512: the same as transformers' model
    declaring yarn/linear factor 4 over 128."""
    from transformers import AutoModelForCausalLM

    directory, model = tiny_models["llama_gqa_tied"]
    runtime = load_tiny(directory, max_context=512, allow_context_extension=True, context_extension=extension)
    scaling = {"rope_type": extension, "factor": 4.0}
    if extension == "yarn":
        scaling["original_max_position_embeddings"] = 128
    config = model.config.__class__.from_dict({**model.config.to_dict(), "rope_scaling": scaling,
                                                "rope_parameters": {**scaling, "rope_theta": 10000.0},
                                                "max_position_embeddings": 512})
    reference = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    reference.load_state_dict(model.state_dict())
    tokens = [(i * 13) % 90 + 3 for i in range(300)]
    session = runtime.new_session()
    runtime.prefill(session, tokens[:250])
    logits = torch.cat([runtime.decode([session], [token]) for token in tokens[250:]])
    expected = reference_logits(reference, tokens)[250:]
    assert torch.allclose(logits, expected, atol=TOLERANCE, rtol=0)
    assert (logits - reference_logits(model, tokens)[250:]).abs().max() > 10 * TOLERANCE  # really scaled


def test_served_context_rules():
    arch = arch_of(hf_config({"rope_type": "default"}, max_positions=8192))
    assert max_context(arch, ModelConfig(), default_context=32768) == 32768  # a default model's own
    assert max_context(arch, ModelConfig(max_context=4096), default_context=32768) == 4096
    with pytest.raises(ValueError, match="allow_context_extension"):
        max_context(arch, ModelConfig(max_context=16384))
    extended, caveat = served_rope(arch, 32768, "yarn")
    assert extended.rope_scaling == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    assert "4x the trained 8192" in caveat and "YaRN" in caveat
    assert served_rope(arch, 8192, "yarn") == (arch, None)
    # a YaRN config without a factor (transformers refuses one): the ratio of the two contexts
    assert declared_scaling({"type": "yarn", "original_max_position_embeddings": 32768}, 131072)["factor"] == 4.0
    plain, caveat = served_rope(arch, 16384, "none")
    assert plain.rope_scaling is None and "extrapolation" in caveat


def test_a_gguf_declaring_yarn_keeps_it():
    from kvgate.models.gguf_loader import hf_config as gguf_hf_config

    meta = {"general.architecture": "qwen2", "qwen2.attention.head_count": 4, "qwen2.embedding_length": 256,
            "qwen2.feed_forward_length": 512, "qwen2.block_count": 2, "qwen2.context_length": 131072,
            "qwen2.vocab_size": VOCAB, "qwen2.rope.scaling.type": "yarn", "qwen2.rope.scaling.factor": 4.0,
            "qwen2.rope.scaling.original_context_length": 32768}
    arch = LlamaArch.from_hf_config(gguf_hf_config(meta, has_output=True))
    assert arch.rope_scaling == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert served_rope(arch, 131072, "yarn") == (arch, None)  # declared: served as is, no caveat
