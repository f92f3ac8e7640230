"""Child process of the SIGKILL test: commits snapshots of real runtime state in a loop.

Usage: python crash_writer.py STORE_DIR STATE_FILE SEED. STATE_FILE holds the exported state of
real token ranges (see ``test_cache_crash.write_state_file``). Prints ``ready`` and one line per
commit; it never stops by itself: the parent kills it with SIGKILL.
"""

from __future__ import annotations

import json
import random
import sys

from kvgate.core.cache.namespace import chunk_keys
from kvgate.core.cache.snapshot import PendingSnapshot
from kvgate.plugins.cache_ssd.store import SsdStore

CHUNK = 16
LENGTHS = (16, 24, 32, 40, 48, 56, 64)


def read_state(path: str):
    with open(path, "rb") as handle:
        header = json.loads(handle.readline())
        blob = handle.read()
    ranges = {(s, e): blob[o:o + n] for s, e, o, n in header["ranges"]}
    return header["tokens"], header["state_format"], header["capacity"], ranges


def snapshot(namespace: str, tokens: list[int], ranges, state_format: str) -> PendingSnapshot:
    keys = chunk_keys(namespace, tokens, CHUNK)
    payloads = {i: ranges[(i * CHUNK, min((i + 1) * CHUNK, len(tokens)))] for i in range(len(keys))}
    return PendingSnapshot(namespace=namespace, tokens=tokens, cache_key=f"{namespace}/{len(tokens)}", round=1,
                           chunk_tokens=CHUNK, keys=keys, payloads=payloads, state_bytes=0,
                           state_format=state_format)


def main() -> None:
    store_dir, state_file, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    tokens, state_format, capacity, ranges = read_state(state_file)
    store = SsdStore(store_dir, CHUNK, capacity, state_format)
    store.load_index()
    store.remove_orphans()
    rng = random.Random(seed)
    print("ready", flush=True)
    while True:
        namespace = f"ns-{rng.randrange(6)}"
        record = store.commit(snapshot(namespace, tokens[: rng.choice(LENGTHS)], ranges, state_format))
        for victim in store.over_capacity():
            store.drop(victim.id)
        print("committed", record.id, record.generation, flush=True)


if __name__ == "__main__":
    main()
