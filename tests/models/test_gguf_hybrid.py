"""GGUF files of the hybrids, written as llama.cpp's converter writes them (``qwen35``, ``qwen35moe``,
``qwen3next``; fp32 tensors), load through the host (the runtime plugins' GGUF declarations choose
the runtime) to the same model as their safetensors: logits of a 150-token prompt (past two
delta-rule chunks) within 1e-4 in fp32 (measured 2.4e-7 at most: ``log(exp(A_log))`` and
``(1 + w) - 1`` round; without the value heads' reorder undone, Qwen3.5's differ by 0.33)."""

from __future__ import annotations

import pytest
import torch

from kvgate.core.config import Config, EngineConfig, ModelConfig
from kvgate.core.loading.model_loading import load_runtime
from kvgate.core.plugins import build_plugin_manager
from kvgate.models import embedded, formats
from kvgate.models.qwen3_5 import moe_plugin, next_plugin, plugin
from tests.models.tiny_gguf_hybrid import ARCHES, write_tiny_hybrid_gguf
from tests.models.tiny_models import VOCAB
from tests.models.tiny_qwen3_5 import RUNTIMES, build_tiny_qwen3_5, load_tiny_qwen3_5

PROMPT = torch.randint(3, VOCAB, (150,), generator=torch.Generator().manual_seed(3)).tolist()
PLUGINS = [("qwen3_5", plugin), ("qwen3_5_moe", moe_plugin), ("qwen3_next", next_plugin),
           ("model_formats", formats), ("embedded_model", embedded)]


@pytest.mark.parametrize("model_type", sorted(ARCHES))
def test_a_hybrid_gguf_loads_to_the_same_logits_as_its_safetensors(tmp_path, model_type):
    directory = tmp_path / "hf"
    directory.mkdir()
    build_tiny_qwen3_5(directory, seed=5, model_type=model_type)
    path = write_tiny_hybrid_gguf(directory, tmp_path / "tiny.gguf")
    config = Config(state_dir=str(tmp_path / "state"), model=ModelConfig(path=str(path), dtype="fp32"),
                    engine=EngineConfig(block_size=4, kv_pool_tokens=4096))
    runtime = load_runtime(config, build_plugin_manager(load_entry_points=False, extra_plugins=PLUGINS))
    assert runtime.info.architecture == RUNTIMES[model_type]
    expected = load_tiny_qwen3_5(directory)
    logits = runtime.prefill(runtime.new_session(), PROMPT, all_logits=True)
    reference = expected.prefill(expected.new_session(), PROMPT, all_logits=True)
    assert reference.std() > 0.1 and torch.allclose(logits, reference, atol=1e-4, rtol=0)


def test_an_unknown_hybrid_tensor_is_a_clear_error():
    from kvgate.models import gguf_hybrid
    from kvgate.models.gguf_loader import hf_name

    config = {"model_type": "qwen3_5_text", "num_hidden_layers": 4, "linear_num_key_heads": 2,
              "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 12}
    with pytest.raises(ValueError, match="ssm_bogus"):
        gguf_hybrid.hf_tensors("blk.0.ssm_bogus.weight", torch.zeros(4, 64).numpy(), config, hf_name)
    assert gguf_hybrid.hf_tensors("blk.4.attn_norm.weight", torch.zeros(64).numpy(), config, hf_name) == {}
