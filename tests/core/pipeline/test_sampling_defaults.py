"""Server-side sampling defaults: ``[sampling]`` and the model's generation_config.json fill what a
request leaves out, never what it sends."""

from __future__ import annotations

import json

import httpx
import pytest

from kvgate.adapters.anthropic.request import convert_sampling
from kvgate.adapters.openai_chat.request import sampling as chat_sampling
from kvgate.core.config import SamplingConfig, read_config
from kvgate.core.errors import ConfigError
from kvgate.core.pipeline.sampling_defaults import SamplingDefaults, unset_names, valid_defaults
from kvgate.models.hf_loader import generation_sampling
from tests.harness import ServerProcess


def test_config_over_model_and_the_request_over_both():
    defaults = SamplingDefaults.build(SamplingConfig(temperature=0.2), {"temperature": 0.6, "top_p": 0.95, "top_k": 20})
    assert defaults.values == {"temperature": 0.2, "top_p": 0.95, "top_k": 20}
    left_out = defaults.apply(chat_sampling({"messages": []}))
    assert (left_out.temperature, left_out.top_p, left_out.top_k) == (0.2, 0.95, 20)
    sent = defaults.apply(chat_sampling({"temperature": 1.3, "top_p": 0.5, "top_k": 0}))
    assert (sent.temperature, sent.top_p, sent.top_k) == (1.3, 0.5, 0)
    explicit_null = defaults.apply(chat_sampling({"temperature": None}))
    assert explicit_null.temperature == 0.2


def test_model_defaults_can_be_turned_off():
    defaults = SamplingDefaults.build(SamplingConfig(model_defaults=False), {"temperature": 0.6})
    assert defaults.values == {}
    params = defaults.apply(convert_sampling({"max_tokens": 5}))
    assert params.temperature == 1.0  # the protocol's own default


def test_anthropic_request_gets_the_defaults_it_leaves_out():
    defaults = SamplingDefaults.build(SamplingConfig(top_k=40, temperature=0.0), {})
    params = defaults.apply(convert_sampling({"max_tokens": 5, "temperature": 0.7}))
    assert (params.temperature, params.top_k) == (0.7, 40)


def test_generation_config_values_are_checked(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.7, "top_p": 1.5, "top_k": "20", "min_p": True, "do_sample": True, "eos_token_id": 2}))
    assert valid_defaults(generation_sampling(tmp_path)) == {"temperature": 0.7}
    (tmp_path / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):  # refused at load, like its eos ids
        generation_sampling(tmp_path)
    assert unset_names({"temperature": 0, "top_p": None}) == frozenset({"top_p", "top_k", "min_p"})


def test_out_of_range_setting_is_a_one_line_config_error(tmp_path):
    path = tmp_path / "kvgate.toml"
    path.write_text("[sampling]\ntemperature = 3.0\n")
    with pytest.raises(ConfigError, match=r"sampling.temperature: must be in \[0, 2\], got 3.0"):
        read_config(path)


@pytest.mark.slow
def test_server_default_temperature_makes_requests_that_send_none_greedy(tmp_path):
    body = {"model": "smollm2", "max_tokens": 24,
            "messages": [{"role": "user", "content": "Name three colours of the rainbow."}]}
    # no prefix cache: a hit may change a bf16 greedy continuation unless engine.deterministic is on
    with ServerProcess(tmp_path, {"sampling": {"temperature": 0.0}, "cache": {"enabled": False}}) as server:
        url = server.base_url + "/v1/chat/completions"
        texts = {httpx.post(url, json=body, timeout=120).json()["choices"][0]["message"]["content"] for _ in range(3)}
        greedy = httpx.post(url, json={**body, "temperature": 0}, timeout=120).json()["choices"][0]["message"]["content"]
        hot = {httpx.post(url, json={**body, "temperature": 2.0, "seed": seed}, timeout=120).json()
               ["choices"][0]["message"]["content"] for seed in range(3)}
        assert "sampling defaults for requests that leave them out: temperature=0" in server.log()
    assert texts == {greedy}
    assert len(hot) > 1  # a request's own temperature still applies
