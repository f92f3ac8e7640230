"""``[server] record_path``: one JSON line per generation, with the exact tokens and cache outcome."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.harness import ServerProcess

pytestmark = pytest.mark.slow


def test_each_generation_is_recorded_with_its_tokens_and_cached_prefix(tmp_path):
    record = tmp_path / "records" / "requests.jsonl"
    with ServerProcess(tmp_path / "server", {"server": {"record_path": str(record)}}) as server:
        messages = [{"role": "system", "content": "You are terse. " * 40}, {"role": "user", "content": "Hi"}]
        body = {"model": "smollm2", "messages": messages, "max_tokens": 8, "temperature": 0}
        replies = [httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=120).json()
                   for _ in range(2)]
        count = httpx.post(server.base_url + "/v1/tokenize", json={"messages": messages}, timeout=60).json()["count"]
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert first["prompt"] == second["prompt"] and len(first["prompt"]) == count
    assert len(first["output"]) == replies[0]["usage"]["completion_tokens"] and first["ttft_s"] > 0
    assert first["cached_device"] + first["cached_ssd"] == 0
    assert second["cached_device"] + second["cached_ssd"] > count // 2  # exact, not rounded to blocks
    assert first["reason"] in ("stop", "length")
