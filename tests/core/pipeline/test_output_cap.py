"""The output cap a request runs under: its own cap or ``[engine] default_max_tokens``, clamped to
``[model] max_output_tokens``, else to the model's own clamp."""

from __future__ import annotations

import pytest

from kvgate.core.config import read_config
from kvgate.core.errors import ConfigError
from kvgate.core.pipeline.output_cap import OutputCap


def cap(model_clamp: int, **sections) -> OutputCap:
    return OutputCap.build(read_config(overrides=sections), model_clamp)


def test_the_model_clamp_holds_a_far_larger_request_and_the_default():
    clamped = cap(1024)
    assert (clamped.applied(64000), clamped.applied(None), clamped.applied(0)) == (1024, 1024, 1024)
    assert clamped.applied(100) == 100  # a request below the clamp runs as asked
    assert clamped.applied(-5) == -5  # left for the pipeline to refuse
    assert clamped.describe() == "1024 tokens (the model's own)"


def test_without_a_clamp_requests_run_as_asked():
    free = cap(0)
    assert (free.applied(64000), free.applied(None)) == (64000, 4096)
    assert free.describe() == ""
    assert cap(0, engine={"default_max_tokens": 0}).applied(None) == 0  # to the context's end


def test_the_operator_setting_overrides_the_model_clamp():
    assert cap(1024, model={"max_output_tokens": 12}).applied(64000) == 12
    assert cap(1024, model={"max_output_tokens": 12}).describe() == "12 tokens ([model] max_output_tokens)"
    assert cap(1024, model={"max_output_tokens": 0}).applied(64000) == 64000  # 0 turns the clamp off
    assert cap(0, model={"max_output_tokens": 300}).applied(None) == 300
    to_the_end = cap(0, model={"max_output_tokens": 300}, engine={"default_max_tokens": 0})
    assert to_the_end.applied(None) == 300


def test_a_budget_is_held_to_the_clamp():
    assert (cap(1024).clamped(5000), cap(1024).clamped(7), cap(0).clamped(5000)) == (1024, 7, 5000)


def test_a_negative_setting_is_a_one_line_config_error(tmp_path):
    path = tmp_path / "kvgate.toml"
    path.write_text("[model]\nmax_output_tokens = -1\n")
    with pytest.raises(ConfigError, match=r"model.max_output_tokens: must be in \[0, 2147483648\], got -1"):
        read_config(path)
