"""DeepSeek V4's MTP layer as the draft head, on the tiny V4 model with a random ``mtp.0.*`` layer
(tests/models/tiny_deepseek_v4.py). transformers has no V4 MTP; the reference is its decoder layer
(the block), hyper-head and RMS norm modules, fed as vLLM's V4 MTP feeds its block: MTP position
``i`` pairs the main model's residual streams at ``i`` (the last decoder layer's output, captured
from transformers) with token ``i + 1``, the embedding zeroed at position 0; a draft chains on the
block's own output streams. Drafts are verified by the engine, so speculation never changes the
output: that is checked on the real engine.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.models.mtp_engine_run import run_batch
from tests.models.tiny_deepseek_v4 import TINY_V4, add_mtp_layer, build_tiny_v4, load_tiny_v4

TOLERANCE = 1e-4
PROMPT = [(i * 37 + 11) % 97 for i in range(37)]


@pytest.fixture(scope="module")
def mtp(tmp_path_factory):
    directory = tmp_path_factory.mktemp("deepseek_v4_mtp")
    model = build_tiny_v4(directory)
    parts = add_mtp_layer(directory)
    return directory, model, parts, load_tiny_v4(directory, speculative="mtp")


def main_streams(model, tokens) -> torch.Tensor:
    """The main model's residual streams [n, hc, hidden] after its last layer."""
    captured = {}
    hook = model.model.layers[-1].register_forward_hook(lambda module, args, out: captured.update(out=out))
    try:
        with torch.no_grad():
            model(torch.tensor([tokens]), use_cache=False)
    finally:
        hook.remove()
    return captured["out"][0]


def reference_draft(model, parts, tokens, token, count) -> list[torch.Tensor]:
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperHead, DeepseekV4RMSNorm

    config, eps = model.config, model.config.rms_norm_eps
    head = DeepseekV4HyperHead(config)
    norms = {name: DeepseekV4RMSNorm(config.hidden_size, eps) for name in ("enorm", "hnorm", "norm")}
    with torch.no_grad():
        head.hc_fn.copy_(parts["hc_fn"]), head.hc_base.copy_(parts["hc_base"]), head.hc_scale.copy_(parts["hc_scale"])
        for name, module in norms.items():
            module.weight.copy_(parts[name])

    def block_input(streams, next_token, position):
        embedded = model.model.embed_tokens.weight[next_token] * (position != 0)
        return F.linear(norms["hnorm"](streams), parts["h_proj"]) + F.linear(norms["enorm"](embedded), parts["e_proj"])

    streams = main_streams(model, tokens)
    inputs = [block_input(streams[i], t, i) for i, t in enumerate(tokens[1:] + [token])]
    out = []
    with torch.no_grad():
        for _ in range(count):
            sequence = torch.stack(inputs)[None]
            length = sequence.shape[1]
            positions = torch.arange(length)[None]
            embeddings = {kind: parts["rotary"](sequence, position_ids=positions, layer_type=kind)
                          for kind in ("main", "compress")}
            q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
            hidden_keys = (k > q) | (k <= q - TINY_V4["sliding_window"])
            mask = torch.zeros(length, length).masked_fill(hidden_keys, float("-inf"))
            last = parts["block"](sequence, position_embeddings=embeddings, position_ids=positions,
                                  attention_mask=mask[None, None], input_ids=None, cache=None)[0, -1]
            logits = model.lm_head(norms["norm"](head(last[None, None])))[0, 0]
            out.append(logits)
            inputs.append(block_input(last, int(logits.argmax()), length))
    return out


def close(a, b):
    return torch.allclose(a, b, atol=TOLERANCE, rtol=0)


def test_the_draft_is_the_mtp_block_over_prefills_and_decodes(mtp):
    _, model, parts, runtime = mtp
    head = runtime.draft_head()
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:13])
    runtime.prefill(session, PROMPT[13:20])
    drafted = head.draft_logits(session, PROMPT[20], 3)
    assert len(drafted) == 3
    for ours, theirs in zip(drafted, reference_draft(model, parts, PROMPT[:20], PROMPT[20], 3)):
        assert close(ours, theirs)
    for token in PROMPT[20:30]:
        runtime.decode([session], [token])
    expected = reference_draft(model, parts, PROMPT[:30], PROMPT[30], 2)
    assert all(close(a, b) for a, b in zip(head.draft_logits(session, PROMPT[30], 2), expected))
    assert head.draft(session, PROMPT[30], 2) == [int(logits.argmax()) for logits in expected]
    plain = load_tiny_v4(mtp[0])  # the same session without the MTP layer holds less
    twin = plain.new_session()
    plain.prefill(twin, PROMPT[:13])
    plain.prefill(twin, PROMPT[13:20])
    for token in PROMPT[20:30]:
        plain.decode([twin], [token])
    assert runtime.session_bytes(session) - plain.session_bytes(twin) == head.state_bytes(session) > 0
    runtime.release(session)


def test_a_fork_and_a_truncation_draft_as_a_session_that_only_saw_their_tokens(mtp):
    _, _, _, runtime = mtp
    head = runtime.draft_head()
    for length in (9, 15, 22):
        fresh = runtime.new_session()
        runtime.prefill(fresh, PROMPT[:length])
        expected = head.draft_logits(fresh, PROMPT[length], 3)
        session = runtime.new_session()
        runtime.prefill(session, PROMPT[:30])
        fork = runtime.fork(session, length)
        runtime.truncate(session, length)
        for cut in (fork, session):
            assert all(close(a, b) for a, b in zip(head.draft_logits(cut, PROMPT[length], 3), expected))
        for held in (fresh, session, fork):
            runtime.release(held)


def test_speculation_with_the_mtp_layer_gives_the_plain_output(mtp):
    from kvgate.core.config import EngineConfig

    _, _, _, runtime = mtp
    prompts = [PROMPT[:5], PROMPT[:17], PROMPT[3:30]]
    plain, reasons, _ = run_batch(runtime, EngineConfig(max_batch=4), prompts, max_tokens=30)
    for draft in (1, 3):
        config = EngineConfig(max_batch=4, speculative="mtp", speculative_mtp=draft)
        spec, spec_reasons, step = run_batch(runtime, config, prompts, max_tokens=30)
        assert spec == plain and spec_reasons == reasons and step.stats.drafted > 0


def test_speculative_mtp_needs_an_mtp_layer(tmp_path):
    build_tiny_v4(tmp_path)
    with pytest.raises(ValueError, match="no MTP layer"):
        load_tiny_v4(tmp_path, speculative="mtp")
    assert load_tiny_v4(tmp_path).draft_head() is None


def test_a_verified_run_with_rejections_leaves_the_state_plain_decoding_leaves(mtp):
    """What the speculative step does to a session -- verify ``[last] + draft`` in one forward, keep the
    accepted prefix, truncate the rest -- leaves it as plain decoding of the kept tokens does: the
    same next logits, the same MTP draft, the same bytes (compressor windows close inside the runs)."""
    _, _, _, runtime = mtp
    head = runtime.draft_head()
    plain, verified = runtime.new_session(), runtime.new_session()
    try:
        last = int(runtime.prefill(plain, PROMPT[:13]).argmax())
        runtime.prefill(verified, PROMPT[:13])
        kept = []
        for _ in range(9):  # plain: one decode per token
            kept.append(last)
            last = int(runtime.decode([plain], [last])[0].argmax())
        for start in range(0, len(kept), 2):  # verified: two kept tokens and a rejected one per forward
            accepted = kept[start:start + 2]
            runtime.prefill(verified, accepted + [(accepted[-1] + 1) % 97], all_logits=True)
            runtime.truncate(verified, 13 + start + len(accepted))
        assert verified.tokens == plain.tokens
        assert runtime.session_bytes(verified) == runtime.session_bytes(plain)
        assert all(close(a, b) for a, b in zip(head.draft_logits(verified, last, 2), head.draft_logits(plain, last, 2)))
        assert close(runtime.decode([verified], [last])[0], runtime.decode([plain], [last])[0])
    finally:
        runtime.release(plain), runtime.release(verified)
