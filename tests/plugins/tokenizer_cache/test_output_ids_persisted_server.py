"""Resent replies keep their sampled ids on the defaults, across a restart on one state dir
(issue 34, item 4): real `kvgate serve`, SmolLM2, the SSD tier on, `[tokenizer_cache]` untouched.

Three servers run one after another on one state dir: the first answers and then gets the
follow-up that resends its answer; the second (a restart) gets the same follow-up, and another
tenant's; the third starts after the registry file was overwritten with garbage.
"""

from __future__ import annotations

import pytest

from tests.harness import ServerProcess
from tests.plugins.tokenizer_cache.test_output_ids_server import (
    KEYS, THANKS, canonical_count, chat, non_canonical_answer, reused_tokens)

pytestmark = pytest.mark.slow
SETTINGS = {"server": {"keys": [{"tenant": who, "key": key, "admin": who == "ops"} for who, key in KEYS.items()]},
            "cache": {"cached_tokens_granularity": 1}}


def follow_up(server, who: str, conversation: list[dict]) -> dict:
    reply = chat(server, who, conversation, max_tokens=8, logprobs=True)
    choice = reply["choices"][0]
    return {"usage": reply["usage"], "content": choice["message"]["content"],
            "logprobs": [(token["token"], token["logprob"]) for token in choice["logprobs"]["content"]]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, smollm2_tokenizer) -> dict:
    workdir = tmp_path_factory.mktemp("persisted-output-ids")
    state = workdir / "state"
    with ServerProcess(workdir / "first", SETTINGS, state_dir=state) as first:
        answer = non_canonical_answer(first, smollm2_tokenizer)
        conversation = [answer["question"], {"role": "assistant", "content": answer["content"]}, THANKS]
        before = follow_up(first, "alice", conversation)
        canonical = canonical_count(first, "alice", conversation)
    with ServerProcess(workdir / "second", SETTINGS, state_dir=state) as second:
        after = follow_up(second, "alice", conversation)
        reused_after_restart = reused_tokens(second)
        bob = chat(second, "bob", conversation)["usage"]
        reused_after_bob = reused_tokens(second)
    registry = state / "ssd" / "output_ids" / "registry.sqlite"
    for leftover in registry.parent.glob("registry.sqlite-*"):  # the WAL, if the server left one
        leftover.unlink()
    registry.write_bytes(b"\x00garbage" * 512)
    with ServerProcess(workdir / "third", SETTINGS, state_dir=state) as third:
        damaged = chat(third, "alice", conversation)["usage"]
        third_log = third.log()
    return {"answer": answer, "canonical": canonical, "before": before, "after": after, "bob": bob,
            "reused_after_restart": reused_after_restart, "reused_after_bob": reused_after_bob,
            "damaged": damaged, "third_log": third_log, "state": state}


def test_the_follow_up_is_cached_up_to_its_ceiling_on_the_defaults(runs):
    answer, usage = runs["answer"], runs["before"]["usage"]
    # the previous prompt and output, but the stop token: it was sampled, never computed
    ceiling = answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"] - 1
    assert usage["prompt_tokens_details"]["cached_tokens"] == ceiling
    assert usage["prompt_tokens"] == runs["canonical"] + answer["extra_ids"]  # the sampled split, not the canonical


def test_a_restarted_server_gives_the_same_prompt_and_bit_identical_output(runs):
    before, after = runs["before"], runs["after"]
    assert after["usage"]["prompt_tokens"] == before["usage"]["prompt_tokens"]
    assert after["content"] == before["content"] and after["logprobs"] == before["logprobs"]
    assert runs["reused_after_restart"] > 0  # the registry read back from disk, not a coincidence


def test_another_tenant_gets_the_canonical_tokens(runs):
    assert runs["bob"]["prompt_tokens"] == runs["canonical"]
    assert runs["reused_after_bob"] == runs["reused_after_restart"]


def test_a_damaged_registry_is_set_aside_with_a_log_line(runs):
    assert runs["damaged"]["prompt_tokens"] == runs["canonical"]  # an empty registry: the canonical split
    assert "output ids registry" in runs["third_log"] and "damaged" in runs["third_log"]
    assert list((runs["state"] / "ssd").glob("output_ids.damaged-*"))
