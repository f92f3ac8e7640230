"""A long ``previous_response_id`` chain on the real server (issue 31, finding 3): the store grows by
what each turn adds, not by the whole conversation again, and the conversation is still whole
after deleting a response in the middle and after a restart."""

from __future__ import annotations

import sqlite3

import httpx
import pytest

from kvgate.adapters.responses.store import ResponseStore
from tests.harness import ServerProcess

pytestmark = pytest.mark.slow
TURNS = 200
ONE_TOKEN = {"model": "smollm2", "temperature": 0, "max_output_tokens": 1}


def store_bytes(server: ServerProcess) -> int:
    """The responses store's size as its quota (diskcache's ``volume``) counts it: the database's
    pages, plus the values over 32 kB that live in files of their own."""
    uri = (server.state_dir / "responses" / "cache.db").as_uri() + "?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
        return pages + db.execute("SELECT value FROM Settings WHERE key = 'size'").fetchone()[0]


def respond(server: ServerProcess, word: str, previous: str | None) -> str:
    body = {**ONE_TOKEN, "input": word, **({"previous_response_id": previous} if previous else {})}
    answer = httpx.post(server.base_url + "/v1/responses", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()["id"]


def input_tokens(server: ServerProcess, previous: str) -> int:
    answer = httpx.post(server.base_url + "/v1/responses/input_tokens", timeout=120,
                        json={"model": "smollm2", "input": "next", "previous_response_id": previous})
    assert answer.status_code == 200, answer.text
    return answer.json()["input_tokens"]


def test_a_long_chain_stores_linear_bytes_and_stays_whole(tmp_path):
    settings = {"model": {"max_context": 8192}}
    with ServerProcess(tmp_path, settings) as server:
        ids, sizes = [], [store_bytes(server)]
        for index in range(TURNS):
            ids.append(respond(server, f"w{index}", ids[-1] if ids else None))
            if index + 1 in (TURNS // 2, TURNS):
                sizes.append(store_bytes(server))
        first, last = sizes[1] - sizes[0], sizes[2] - sizes[1]
        print(f"store bytes: start {sizes[0]}, +{first} for turns 1-{TURNS // 2}, +{last} for the rest")
        assert last < 1.5 * first  # copying the conversation into every record gives about 2.8x
        items = httpx.get(f"{server.base_url}/v1/responses/{ids[-1]}/input_items").json()["data"]
        assert [item["content"][0]["text"] for item in items] == [f"w{TURNS - 1}"]  # this turn's input, as before
        whole = input_tokens(server, ids[-1])
        assert whole > input_tokens(server, ids[TURNS // 2 - 1]) + TURNS  # every turn is in the prompt
        assert httpx.delete(f"{server.base_url}/v1/responses/{ids[TURNS // 2]}").status_code == 200
        assert httpx.get(f"{server.base_url}/v1/responses/{ids[TURNS // 2]}").status_code == 404
        assert input_tokens(server, ids[-1]) == whole  # the chain runs through the deleted response
    conversation = ResponseStore(server.state_dir / "responses").get(ids[-1]).messages
    assert [message.content for message in conversation if message.role == "user"] == [
        f"w{index}" for index in range(TURNS)]
    with ServerProcess(tmp_path, settings) as again:  # the same state directory, restarted
        assert input_tokens(again, ids[-1]) == whole
        assert httpx.get(f"{again.base_url}/v1/responses/{ids[TURNS // 2]}").status_code == 404
