"""The MTP layer of a tiny Qwen3.5, Qwen3.5-MoE and Qwen3-Next as a draft head: its logits equal a reference
built from transformers' own modules (a one-layer Qwen3.5 text model holding the MTP block and
norm, fed the ``fc`` of the normed embedding and hidden state); speculation with it on the real
engine gives plain decoding's tokens exactly, with drafts rejected (so the linear layers' recurrent
state rolled back) and, with a layer whose guesses are known in advance, exactly the acceptances
the plain output allows; a checkpoint without ``mtp.*`` tensors has no draft head and says so, and
one missing a tensor of the layer names it."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from kvgate.core.config import EngineConfig
from tests.models.mtp_engine_run import run_batch
from tests.models.test_mtp_engine import expected_acceptances
from tests.models.test_qwen3_5_server import write_checkpoint
from tests.models.tiny_qwen3_5_mtp import add_qwen3_5_mtp, load_with_mtp, same_token_guess

TEXTS = ["Hi", "Forecast for Lyon, 3 days?", "Tell me a story about a cat who lived in Paris."]
FAMILIES = ["qwen3_5_text", "qwen3_5_moe_text", "qwen3_next"]


class Checkpoints(dict):
    """Per (family, head) -- head "random", "same-token" or "none" -- (directory, transformers model,
    MTP parts, eos, tokenizer), each written when first asked for."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp_path_factory = tmp_path_factory

    def __missing__(self, key):
        model_type, head = key
        directory = self.tmp_path_factory.mktemp(f"{model_type}-{head}")
        model, tokenizer, eos = write_checkpoint(directory, model_type)
        parts = add_qwen3_5_mtp(directory, model, same_token=head == "same-token") if head != "none" else None
        self[key] = (directory, model, parts, eos, tokenizer)
        return self[key]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return Checkpoints(tmp_path_factory)


def reference_logits(model, parts, prompt: list[int], token: int) -> torch.Tensor:
    """transformers' modules: the MTP logits for the token after ``token`` following ``prompt``."""
    from transformers import AutoModel

    config = model.config.__class__(**{**model.config.to_dict(), "num_hidden_layers": 1,
                                       "layer_types": ["full_attention"], "mlp_only_layers": []})
    layer = AutoModel.from_config(config, dtype=torch.float32).eval()
    layer.layers[0].load_state_dict(parts["block"].state_dict())
    with torch.no_grad():
        layer.norm.weight.copy_(parts["norm"])
        ids = torch.tensor([prompt])
        hidden = model.model(ids).last_hidden_state[0]  # after the final norm
        embed = model.model.embed_tokens(torch.tensor(prompt[1:] + [token]))
        x = F.linear(torch.cat([zero_centred(embed, parts["pre_fc_norm_embedding"], model.config.rms_norm_eps),
                                zero_centred(hidden, parts["pre_fc_norm_hidden"], model.config.rms_norm_eps)], -1),
                     parts["fc"])
        return model.lm_head(layer(inputs_embeds=x[None]).last_hidden_state[0, -1])


def zero_centred(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_mtp_head_loads_and_its_logits_equal_the_reference(checkpoints, model_type):
    directory, model, parts, _, tokenizer = checkpoints[model_type, "random"]
    runtime = load_with_mtp(directory)
    head = runtime.draft_head()
    assert head is not None
    prompt = tokenizer.encode(TEXTS[2]).ids
    session = runtime.new_session()
    token = int(torch.argmax(runtime.prefill(session, prompt)))
    logits = head.logits(session, token)
    expected = reference_logits(model, parts, prompt, token)
    assert torch.allclose(logits, expected, atol=1e-4, rtol=1e-4), (logits - expected).abs().max()
    drafts = head.draft(session, token, 3)
    assert len(drafts) == 3 and drafts[0] == int(torch.argmax(expected))
    fork = runtime.fork(session, len(prompt) - 5)  # a fork keeps the MTP state before its end
    assert head.draft(fork, prompt[-5], 1) == [int(torch.argmax(head.logits(fork, prompt[-5])))]


@pytest.mark.parametrize("model_type", FAMILIES)
@pytest.mark.parametrize("head", ["random", "same-token"])
def test_mtp_speculation_gives_plain_decodings_tokens(checkpoints, model_type, head):
    directory, model, _, eos, tokenizer = checkpoints[model_type, head]
    runtime = load_with_mtp(directory)
    prompts = [tokenizer.encode(text).ids for text in TEXTS]
    plain, reasons, _ = run_batch(runtime, EngineConfig(max_batch=8), prompts)
    for draft in (1, 3):
        config = EngineConfig(max_batch=8, speculative="mtp", speculative_mtp=draft, deterministic=True)
        spec, spec_reasons, step = run_batch(runtime, config, prompts)
        assert spec == plain and spec_reasons == reasons
        assert step.stats.drafted > step.stats.accepted  # drafts were rejected: recurrent state rolled back
        print(f"{model_type} {head} draft={draft}: drafted {step.stats.drafted}, accepted {step.stats.accepted}")
        if head == "same-token" and draft == 1:  # guesses known in advance: the acceptances are exact
            counts = [expected_acceptances(out, same_token_guess(model), {eos}, 40) for out in plain]
            assert (step.stats.drafted, step.stats.accepted) == tuple(map(sum, zip(*counts)))
            assert step.stats.accepted > 0


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_checkpoint_without_an_mtp_layer_has_no_draft_head_and_says_so(checkpoints, model_type, tmp_path):
    directory = checkpoints[model_type, "none"][0]
    assert load_with_mtp(directory, speculative="").draft_head() is None
    with pytest.raises(ValueError, match=r'speculative = "mtp": this checkpoint has no MTP layer \(no mtp\.\*'):
        load_with_mtp(directory)
    partial = shutil.copytree(directory, tmp_path / "partial")
    save_file({"mtp.norm.weight": torch.zeros(64)}, str(partial / "mtp.safetensors"))
    with pytest.raises(ValueError, match="the MTP layer lacks tensor 'mtp.pre_fc_norm_embedding.weight'"):
        load_with_mtp(partial)
