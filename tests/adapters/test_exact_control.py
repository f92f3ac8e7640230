"""The negative control of tests/adapters/test_exact_paths.py: with ``engine.deterministic = false``
and bf16 weights (where a prefill's one-forward and a cache hit's append round differently), the
same prompts' logprobs do change between a cold run and its exact repeat (a device hit). So the
prompts are sensitive enough for the identity the deterministic default shows to mean something.
"""

from __future__ import annotations

import openai
import pytest

from tests.adapters.exact_helpers import COUNT, ask, prompts
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
SETTINGS = {"engine": {"deterministic": False}, "model": {"weights": "bf16"}}
LONGEST = range(COUNT - 2, COUNT)


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("exact-control"), SETTINGS) as proc:
        yield openai.OpenAI(base_url=proc.base_url + "/v1", api_key="unused", max_retries=0, timeout=600)


def test_without_determinism_a_device_hit_changes_the_logprobs(client):
    changed = []
    for i in LONGEST:
        messages = prompts()[i]
        cold, repeat = ask(client, messages, f"control-{i}"), ask(client, messages, f"control-{i}")
        assert cold.device == 0 and repeat.device >= repeat.prompt - 16, f"prompt {i}: {cold} / {repeat}"
        changed += [i] if repeat.tokens != cold.tokens else []
    assert changed, "no logprob changed without determinism: the prompts are not sensitive enough"
