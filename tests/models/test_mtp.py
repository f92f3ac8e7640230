"""GLM-4.5's MTP layer as a draft head, on a tiny random fp32 GLM-4.5 whose MTP layer the test
writes into the checkpoint (transformers saves none): its logits against a plain-torch computation
of the DeepSeek-V3 MTP formula over the transformers model's hidden states, and its state under
truncation, forks and imported chunks against sessions that never saw the dropped tokens."""

from __future__ import annotations

import pytest
import torch

from tests.models.tiny_families import add_mtp_layer, build_tiny_family, load_tiny_family

PROMPT = [5, 17, 3, 88, 41, 9, 60, 23, 71, 12, 30, 55, 8, 94, 19, 47, 66, 2, 38, 80, 14]


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    directory = tmp_path_factory.mktemp("glm45_mtp")
    model = build_tiny_family(directory, "glm45")
    parts = add_mtp_layer(directory, model)
    return model, parts, load_tiny_family(directory, speculative="mtp"), directory


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@torch.no_grad()
def reference_logits(model, parts, tokens: list[int], next_token: int) -> torch.Tensor:
    """MTP logits at the last position, from scratch: h_i = the main model's final (normed) hidden
    state, x_i = eh_proj([enorm(embed(t_{i+1})); hnorm(h_i)]), the block over positions 0..i
    (causal), then shared_head.norm and the head."""
    ids = torch.tensor([tokens])
    hidden = model.model(ids).last_hidden_state[0]
    embedded = model.model.embed_tokens(torch.tensor(tokens[1:] + [next_token]))
    x = torch.cat([rms(embedded, parts["enorm"]), rms(hidden, parts["hnorm"])], -1) @ parts["eh_proj"].T
    positions = torch.arange(len(tokens))[None]
    cos, sin = model.model.rotary_emb(x[None], positions)
    mask = torch.full((len(tokens), len(tokens)), float("-inf")).triu(1)[None, None]
    out = parts["block"](x[None], attention_mask=mask, position_ids=positions, position_embeddings=(cos, sin))
    out = out[0] if isinstance(out, tuple) else out
    return rms(out[0, -1], parts["head_norm"]) @ parts["head"].T


def test_the_draft_is_the_mtp_formula_over_chunks_and_decodes(glm):
    model, parts, runtime, _ = glm
    session = runtime.new_session()
    runtime.prefill(session, PROMPT[:8])  # a chunk, an append, a decode: each feeds the layer
    runtime.prefill(session, PROMPT[8:-1])
    runtime.decode([session], [PROMPT[-1]])
    for next_token in (7, 61):
        expected = reference_logits(model, parts, PROMPT, next_token)
        got = runtime.draft_head().logits(session, next_token)
        torch.testing.assert_close(got, expected, atol=2e-4, rtol=1e-4)
        assert runtime.draft_head().draft(session, next_token, 1) == [int(expected.argmax())]
    chained = runtime.draft_head().draft(session, 7, 3)
    assert len(chained) == 3 and chained[0] == int(reference_logits(model, parts, PROMPT, 7).argmax())
    assert session.aux["mtp"].count == len(PROMPT) - 1  # drafting keeps nothing of the chain


def same_state(runtime, one, other, token: int) -> None:
    """Two sessions hold the same main and MTP state: the same logits for the next token."""
    head = runtime.draft_head()
    torch.testing.assert_close(head.logits(one, token), head.logits(other, token), atol=1e-5, rtol=1e-5)
    a, b = one.aux["mtp"], other.aux["mtp"]
    assert a.positions[: a.count].tolist() == b.positions[: b.count].tolist()
    torch.testing.assert_close(runtime.decode([one], [token]), runtime.decode([other], [token]), atol=1e-5, rtol=1e-5)


def test_a_rejected_draft_leaves_the_state_of_a_session_that_never_saw_it(glm):
    _, _, runtime, _ = glm
    speculated = runtime.new_session()
    runtime.prefill(speculated, PROMPT)
    runtime.prefill(speculated, [33, 34, 35, 36], all_logits=True)  # a verify: 33 and 34 kept
    runtime.truncate(speculated, len(PROMPT) + 2)
    fresh = runtime.new_session()
    runtime.prefill(fresh, PROMPT + [33, 34])
    same_state(runtime, speculated, fresh, 50)


def test_a_fork_holds_the_state_of_its_prefix(glm):
    _, _, runtime, _ = glm
    parent = runtime.new_session()
    runtime.prefill(parent, PROMPT)
    child = runtime.fork(parent, 15)
    fresh = runtime.new_session()
    runtime.prefill(fresh, PROMPT[:15])
    same_state(runtime, child, fresh, 50)
    assert parent.aux["mtp"].count == len(PROMPT) - 1  # the parent keeps its own


def test_a_session_without_the_hidden_state_drafts_nothing_until_its_next_token(glm):
    """Imported chunks carry no MTP state: no draft at first, drafts again after one decode."""
    _, _, runtime, _ = glm
    source = runtime.new_session()
    runtime.prefill(source, PROMPT)
    restored = runtime.new_session()
    runtime.import_chunk(restored, PROMPT, runtime.export_chunk(source, 0, len(PROMPT)))
    head = runtime.draft_head()
    assert head.draft(restored, 7, 2) == [] and head.logits(restored, 7) is None
    runtime.decode([restored], [7])
    assert len(head.draft(restored, 9, 2)) == 2


def test_speculative_mtp_needs_an_mtp_layer(tmp_path):
    build_tiny_family(tmp_path, "glm45")  # config.json says 1 MTP layer; transformers saved none
    with pytest.raises(ValueError, match="missing 'model.layers.3.enorm.weight'"):
        load_tiny_family(tmp_path, speculative="mtp")
    assert load_tiny_family(tmp_path).draft_head() is None  # not asked for: not loaded
