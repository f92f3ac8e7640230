"""A client that gives up during a long prefill and retries resumes it: the chunks computed before
the cancellation stay in the prefix cache (real server, real model, a real dropped connection)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow


def test_a_retry_after_a_dropped_prefill_starts_from_its_computed_chunks(tmp_path):
    record = tmp_path / "requests.jsonl"
    settings = {"engine": {"prefill_alone": 0, "prefill_chunk": 128},  # a fresh prompt runs in chunks
                "server": {"record_path": str(record)}}
    words = " ".join(f"word{i % 997} river{i % 13}" for i in range(1200))
    body = {"model": "smollm2", "messages": [{"role": "user", "content": words}], "max_tokens": 1,
            "temperature": 0}
    with ServerProcess(tmp_path / "server", settings) as server:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up before the first token
            with httpx.stream("POST", server.base_url + "/v1/chat/completions", json={**body, "stream": True},
                              timeout=httpx.Timeout(60, read=2)) as reply:
                for _ in reply.iter_bytes():
                    pass
        assert server.wait_for_log("POST /v1/chat/completions 200", timeout=60), server.log()[-2000:]
        retry = httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=600).json()
    dropped = json.loads(record.read_text().splitlines()[0])
    assert dropped["reason"] == "cancelled" and not dropped["output"]
    usage = retry["usage"]
    assert usage["prompt_tokens"] > 2000
    assert 256 <= usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
