"""The tokenizer check: literals are encoded with the active tokenizer when the fence is built;
an incompatible tokenizer fails there with a clear error. Special-token literals are enforced as
the token itself."""

from __future__ import annotations

import pytest
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

from kvgate.core.fence import FenceError, build_request_fence, tokenizer_info
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from tests.core.fence.conftest import args, request


def word_tokenizer() -> Tokenizer:
    """A word-level tokenizer that knows a few words and nothing of tags (unknown -> [UNK])."""
    vocab = {"[UNK]": 0, "<|im_end|>": 1, "hello": 2, "world": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken("<|im_end|>", special=True)])
    return tok


def test_a_tokenizer_that_cannot_spell_the_literals_fails_at_build(pm, config):
    info = tokenizer_info(word_tokenizer(), [1])
    with pytest.raises(FenceError, match="incompatible tokenizer.*<tool_call>"):
        build_request_fence(request("required"), ChatmlJson(), info, config, pm)


def test_end_of_turn_ids_must_be_in_the_vocabulary():
    with pytest.raises(FenceError, match="outside the vocabulary"):
        tokenizer_info(word_tokenizer(), [99])


def test_smollm2_spells_every_dialect_literal(smol_info, pm, config):
    for dialect in (ChatmlJson(), DeepseekDsml("v32"), DeepseekDsml("v4")):
        assert build_request_fence(request("required"), dialect, smol_info, config, pm) is not None


@pytest.fixture(scope="module")
def special_trigger_tokenizer(smol_tokenizer):
    tok = Tokenizer.from_str(smol_tokenizer.to_str())
    tok.add_special_tokens([AddedToken("<tool_call>", special=True, normalized=False)])
    return tok


@pytest.mark.parametrize("mode", ["required", "auto"])
def test_a_special_token_trigger_is_enforced_as_the_token(special_trigger_tokenizer, pm, config, mode):
    tok = special_trigger_tokenizer
    trigger = tok.token_to_id("<tool_call>")
    info = tokenizer_info(tok, [2])
    call = ChatmlJson().render_tool_call("get_time", args(tz="UTC"))
    ids = tok.encode(call, add_special_tokens=False).ids
    assert ids[0] == trigger
    fence = build_request_fence(request(mode), ChatmlJson(), info, config, pm)
    for token in ids:
        assert fence.allows(token)
        fence.advance(token)
    assert fence.allows(2)
    spelled = build_request_fence(request(mode), ChatmlJson(), info, config, pm)
    pieces = [tok.token_to_id(p) for p in ["<", "tool", "_", "call", ">"]]
    allowed = 0
    for token in pieces:
        if not spelled.allows(token):
            break
        spelled.advance(token)
        allowed += 1
    assert allowed == (0 if mode == "required" else 4)  # the text spelling never completes


def test_prepare_does_the_one_time_work(smol_tokenizer, pm, config):
    from kvgate.core.fence import prepare_fences

    info = tokenizer_info(smol_tokenizer, [2])
    prepare_fences(info, ChatmlJson(), config, pm)
    assert "llguidance" in info.backends and info._token_bytes is not None
