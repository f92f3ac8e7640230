"""Replayed tokens of a hybrid model's cache hits, on the real server with the tiny Qwen3.5 of
tests/models/test_qwen3_5_server.py: a second conversation that forks from the first at an
unaligned token reports the tokens run again from the nearest recurrent-state snapshot in usage,
in /metrics and in the almost-hit and lookup diagnostics; ``[cache] state_stride`` moves the
snapshots (and so the replay); an agent's next turn, which extends the previous prompt and output,
replays nothing; the device tier reports the snapshots' bytes; a stride off the model's chunk size
stops the start with one line.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import ServerProcess
from tests.models.served import ask_greedy
from tests.models.test_qwen3_5_server import write_checkpoint

pytestmark = pytest.mark.slow

MODEL = "tiny-qwen3_5"
LINES = [f"Line {i}: the tide comes in and the tide goes out." for i in range(12)]
FIRST = [{"role": "user", "content": " ".join(LINES) + " Write a haiku about it."}]
FORKED = [{"role": "user", "content": " ".join(LINES[:9]) + " Now the mountains, tall and cold."}]
FORKED_AGAIN = [{"role": "user", "content": " ".join(LINES[:9]) + " Then the rivers, long and slow."}]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("replay") / "model"
    write_checkpoint(directory, "qwen3_5_text")
    return directory


def settings(checkpoint, stride: int, ssd: bool = False) -> dict:
    return {"model": {"path": str(checkpoint), "name": MODEL, "dtype": "fp32", "max_context": 1024},
            "cache": {"chunk_tokens": 64, "ssd_enabled": ssd, "cached_tokens_granularity": 1,
                      "almost_hit_min_tokens": 32, "almost_hit_min_ratio": 0.0, "state_stride": stride}}


def common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def metric(server, name: str, **labels) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    return next(s.value for family in text_string_to_metric_families(text) for s in family.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def diagnostics(server) -> dict:
    reply = httpx.get(server.base_url + "/v1/cache/diagnostics", timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def fork_second_conversation(server) -> tuple[dict, int]:
    """The forked conversation's usage after the first one, and where the two prompts part."""
    _, first = ask_greedy(server, MODEL, FIRST, 4)
    reply, second = ask_greedy(server, MODEL, FORKED, 4)
    fork = common_prefix(first, second)
    assert fork % 64 and fork < len(first), fork  # unaligned, inside the stored sequence
    assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] == fork, reply["usage"]
    return reply["usage"], fork


@pytest.mark.parametrize("stride, ssd", [(1024, False), (64, False), (1024, True)])
def test_a_fork_reports_the_tokens_replayed_from_the_nearest_snapshot(tmp_path, checkpoint, stride, ssd):
    """Snapshots every ``stride`` tokens and, with the SSD tier, at each chunk's end (64 here: the
    backup's export keeps them); the first prompt's end is past the fork."""
    state = tmp_path / "state"
    with ServerProcess(tmp_path / "server", settings=settings(checkpoint, stride, ssd), state_dir=state) as server:
        usage, fork = fork_second_conversation(server)
        step = 64 if ssd else stride
        replayed = fork - fork // step * step
        assert 0 < replayed == usage["kvgate"]["replayed_tokens"], (fork, usage)
        assert metric(server, "kvgate_cache_replayed_tokens_total", tier="device") == replayed
        report = diagnostics(server)
        (hit,) = [h for h in report["almost_hits"] if h["fork_index"] == fork]
        assert hit["replayed_tokens"] == replayed and hit["tier"] == "device"
        assert report["recent_lookups"][-1]["replayed_tokens"] == replayed
        held = report["device"]["aux_bytes"]
        assert held > 0 and metric(server, "kvgate_cache_snapshot_bytes") == held
        if ssd:
            next_turn_replays_nothing(server)
    if ssd:
        restart = settings(checkpoint, stride, ssd)
        with ServerProcess(tmp_path / "restarted", settings=restart, state_dir=state) as server:
            restored = ask_greedy(server, MODEL, FORKED_AGAIN, 4)[0]["usage"]
            report = diagnostics(server)
        assert restored["kvgate"]["cached_tokens_ssd"] == fork, restored  # chunks of 64, a snapshot at each end
        assert 0 < restored["kvgate"]["replayed_tokens"] == fork % 64 == report["recent_lookups"][-1]["replayed_tokens"]


def next_turn_replays_nothing(server) -> None:
    """An agent's next turn extends the previous prompt and output: the fork is at a snapshot."""
    reply, prompt = ask_greedy(server, MODEL, FIRST, 6)
    answer = reply["choices"][0]["message"]["content"]
    turn = FIRST + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
    before = metric(server, "kvgate_cache_replayed_tokens_total", tier="device")
    again, longer = ask_greedy(server, MODEL, turn, 4)
    assert longer[:len(prompt)] == prompt
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > len(prompt), again["usage"]
    assert again["usage"]["kvgate"]["replayed_tokens"] == 0, again["usage"]
    assert metric(server, "kvgate_cache_replayed_tokens_total", tier="device") == before


def test_a_stride_off_the_chunk_size_stops_the_start_with_one_line(tmp_path, checkpoint):
    with pytest.raises(RuntimeError) as failed:
        ServerProcess(tmp_path / "server", settings=settings(checkpoint, 100)).start()
    log = str(failed.value)
    assert "cache.state_stride: 100 is not a positive multiple of the model's delta-rule chunk size 64" in log
    assert "Traceback" not in log
