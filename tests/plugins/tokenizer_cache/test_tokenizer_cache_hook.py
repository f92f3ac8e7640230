"""The tokenizer cache comes through ``register_tokenizer_caches``: the built-in plugin from its
``[tokenizer_cache]`` section, none when it is disabled (the server still serves, tokenizing
uncached to the same ids), a third party's when one registers it, and never two at once."""

from __future__ import annotations

import time

import httpx
import pytest

from kvgate.core.config import config_from_dict
from kvgate.core.config_sections import load_config
from kvgate.core.errors import ConfigError
from kvgate.core.hookspecs import hookimpl
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.tokenizer.service import TokenizerService
from kvgate.core.tokenizer_cache import TokenizerCacheSetup, tokenizer_cache_factory

from tests.core.cache.app_server import AppServer

PROMPT = "<|im_start|>user\nhéllo 中文 😀 12345<|im_end|>\n<|im_start|>assistant\n"
QUESTION = [{"role": "user", "content": "Say hi."}]


class ExactTextCache:
    """A third party's tokenizer cache: whole texts only, remembering what the service asked."""

    def __init__(self, setup: TokenizerCacheSetup):
        self.encode_plain = setup.encode
        self.entries: dict[tuple[str, str], list[int]] = {}
        self.hits = 0
        self.prompt_namespaces: list[str] = []
        self.outputs: list[str] = []

    def encode(self, text: str, namespace: str = "") -> list[int]:
        key = (namespace, text)
        if key in self.entries:
            self.hits += 1
        else:
            self.entries[key] = self.encode_plain(text).ids
        return list(self.entries[key])

    def encode_prompt(self, text: str, namespace: str) -> list[int]:
        self.prompt_namespaces.append(namespace)
        return self.encode(text, namespace)

    def register_output(self, namespace: str, prompt, output) -> bool:
        self.outputs.append(namespace)
        return False

    def stats(self) -> dict:
        return {"exact": {"entries": len(self.entries), "hits": self.hits}}

    def clear(self) -> None:
        self.entries.clear()


class ExactTextCachePlugin:
    def __init__(self):
        self.built: list[ExactTextCache] = []

    def build(self, setup: TokenizerCacheSetup) -> ExactTextCache:
        self.built.append(ExactTextCache(setup))
        return self.built[-1]

    @hookimpl
    def register_tokenizer_caches(self, register):
        register("exact_text", self.build)


def plain(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def post(server, path: str, body: dict) -> dict:
    reply = httpx.post(server.base_url + path, json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def chat(server) -> dict:
    return post(server, "/v1/chat/completions", {"model": "smollm2", "messages": QUESTION, "max_tokens": 2,
                                                  "temperature": 0})


def served_config(tmp_path, **sections):
    return config_from_dict({"state_dir": str(tmp_path), "cache": {"ssd_enabled": False}, **sections})


def test_the_hook_builds_the_plugins_cache_from_its_section(small_bpe):
    pm = build_plugin_manager()
    config = load_config(overrides={"tokenizer_cache": {"enable_l0": False}}, pm=pm)
    service = TokenizerService(small_bpe, tokenizer_cache_factory(config, pm))
    assert service.encode(PROMPT) == plain(small_bpe, PROMPT)
    assert service.cache_stats()["l0"]["enabled"] is False and service.cache_stats()["l1"]["misses"] == 1


def test_the_section_keeps_its_keys_and_errors():
    pm = build_plugin_manager()
    assert load_config(pm=pm).section("tokenizer_cache").reuse_output_ids is True  # on by default (issue 34)
    with pytest.raises(ConfigError, match=r"tokenizer_cache\.l2_max_bytes: unknown key"):
        load_config(overrides={"tokenizer_cache": {"l2_max_bytes": 1}}, pm=pm)


def test_two_tokenizer_caches_are_an_error():
    pm = build_plugin_manager(extra_plugins=[("exact_text_cache", ExactTextCachePlugin())])
    with pytest.raises(ConfigError, match="at most one tokenizer cache"):
        tokenizer_cache_factory(load_config(pm=pm), pm)


@pytest.mark.slow
def test_with_the_plugin_disabled_the_server_tokenizes_uncached_to_the_same_ids(tmp_path, smollm2_tokenizer):
    config = served_config(tmp_path, plugins={"disabled": ["tokenizer_cache"]},
                           tokenizer_cache={"reuse_output_ids": True})  # the section is ignored, with a warning
    pm = build_plugin_manager(disabled=config.plugins.disabled)
    with AppServer(config, pm) as server:
        service = server.app.state.ctx.tokenizer_service
        assert service.cache is None and service.cache_stats() == {"fingerprint": service.fingerprint}
        for _ in range(2):
            assert post(server, "/v1/tokenize", {"prompt": PROMPT})["tokens"] == plain(smollm2_tokenizer, PROMPT)
        counted = post(server, "/v1/tokenize", {"messages": QUESTION})["count"]
        assert chat(server)["usage"]["prompt_tokens"] == counted
        assert "smg_tokenizer_cache_lookups_total" not in httpx.get(server.base_url + "/metrics", timeout=30).text


@pytest.mark.slow
def test_a_third_party_cache_registered_through_the_hook_is_used(tmp_path, smollm2_tokenizer):
    plugin = ExactTextCachePlugin()
    pm = build_plugin_manager(disabled=["tokenizer_cache"], extra_plugins=[("exact_text_cache", plugin)])
    with AppServer(served_config(tmp_path), pm) as server:
        [cache] = plugin.built
        assert server.app.state.ctx.tokenizer_service.cache is cache
        for _ in range(2):
            assert post(server, "/v1/tokenize", {"prompt": PROMPT})["tokens"] == plain(smollm2_tokenizer, PROMPT)
        assert cache.hits == 1
        chat(server)
        deadline = time.monotonic() + 30
        while not cache.outputs and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cache.prompt_namespaces and cache.outputs == cache.prompt_namespaces
        assert server.app.state.ctx.tokenizer_service.cache_stats()["exact"]["hits"] == 1
