"""Registered outputs kept on disk (plugins/tokenizer_cache/outputs_store.py): shared by services on
one directory (a restart, another worker), scoped by namespace, bounded, and safe with damaged files."""

from __future__ import annotations

import logging
import sqlite3
import stat

from kvgate.plugins.tokenizer_cache.config import TokenizerCacheConfig
from kvgate.plugins.tokenizer_cache.outputs_store import OutputIdsStore

from tests.plugins.tokenizer_cache.services import cached_service
from tests.plugins.tokenizer_cache.test_tokenizer_outputs import FOLLOW_UP, HISTORY, sampled_winding

RESENT = HISTORY + " Winding road" + FOLLOW_UP


def on_disk(tokenizer, root):
    return cached_service(tokenizer, TokenizerCacheConfig(), outputs_root=root)


def register_winding(service, tokenizer, namespace: str = "ns-a") -> list[int]:
    """Registers ' Wind'+'ing'+' road' after HISTORY, written through to disk; returns the ids a
    resent turn should start with."""
    prompt, output = service.encode(HISTORY), sampled_winding(tokenizer)
    assert service.register_output(namespace, prompt, output)
    assert service.cache.flush_outputs(30)
    return prompt + output


def test_a_restarted_or_other_worker_reuses_the_sampled_ids(smollm2_tokenizer, tmp_path):
    first = on_disk(smollm2_tokenizer, tmp_path / "output_ids")
    seen = register_winding(first, smollm2_tokenizer)
    assert first.encode_prompt(RESENT, "ns-a")[: len(seen)] == seen
    other = on_disk(smollm2_tokenizer, tmp_path / "output_ids")  # a fresh process on the same store
    ids = other.encode_prompt(RESENT, "ns-a")
    assert ids[: len(seen)] == seen and other.decode(ids) == RESENT
    assert ids != other.encode_uncached(RESENT)  # the canonical split differs: the test is not vacuous
    assert other.cache_stats()["outputs"]["entries"] == 1
    registry = tmp_path / "output_ids" / "registry.sqlite"
    assert stat.S_IMODE(registry.stat().st_mode) == 0o600


def test_other_namespaces_and_edited_text_get_the_canonical_ids(smollm2_tokenizer, tmp_path):
    register_winding(on_disk(smollm2_tokenizer, tmp_path), smollm2_tokenizer, "tenant-a")
    other = on_disk(smollm2_tokenizer, tmp_path)
    assert other.encode_prompt(RESENT, "tenant-b") == other.encode_uncached(RESENT)
    edited = RESENT.replace("road", "roads")
    assert other.encode_prompt(edited, "tenant-a") == other.encode_uncached(edited)


def test_a_damaged_file_is_set_aside_with_a_warning(smollm2_tokenizer, tmp_path, caplog):
    root = tmp_path / "output_ids"
    root.mkdir()
    (root / "registry.sqlite").write_bytes(b"not a database" * 100)
    service = on_disk(smollm2_tokenizer, root)
    with caplog.at_level(logging.WARNING):
        assert service.encode_prompt(RESENT, "ns-a") == service.encode_uncached(RESENT)
    assert "output ids registry" in caplog.text and "damaged" in caplog.text
    assert [path.name for path in tmp_path.glob("output_ids.damaged-*")]
    seen = register_winding(service, smollm2_tokenizer)  # an empty registry took its place
    assert service.encode_prompt(RESENT, "ns-a")[: len(seen)] == seen


def test_a_row_whose_ids_do_not_spell_its_text_is_dropped(smollm2_tokenizer, tmp_path, caplog):
    service = on_disk(smollm2_tokenizer, tmp_path)
    register_winding(service, smollm2_tokenizer)
    with sqlite3.connect(tmp_path / "registry.sqlite") as db:  # untrusted disk: ids swapped for others
        db.execute("UPDATE outputs SET ids = ?", (bytes(4) * 5,))
    with caplog.at_level(logging.WARNING):
        assert service.encode_prompt(RESENT, "ns-a") == service.encode_uncached(RESENT)
    assert "do not spell its text" in caplog.text and service.cache_stats()["outputs"]["entries"] == 0


def test_the_store_is_bounded_in_bytes_least_recently_used_out_first(tmp_path):
    store = OutputIdsStore(tmp_path, max_bytes=1000)
    store.add("ns", "a" * 396, [1])  # 400 bytes each
    store.add("ns", "b" * 396, [2])
    assert store.flush(30) and store.get("ns", "a" * 396) == [1]  # used: "b" is now the oldest
    store.add("other", "c" * 396, [3])
    assert store.flush(30) and store.used_bytes == 800 and store.get("ns", "b" * 396) is None
    assert store.get("ns", "a" * 396) == [1] and store.get("other", "c" * 396) == [3]
    store.add("ns", "d" * 2000, [4])  # larger than the whole bound: not kept
    assert store.flush(30) and store.get("ns", "d" * 2000) is None and len(store) == 2


def test_an_added_row_is_read_at_once_and_by_another_worker_once_written(tmp_path):
    store = OutputIdsStore(tmp_path, max_bytes=1000)
    store.add("ns", "text", [5, 6])  # on the event loop: queued for the writer thread
    assert store.holds("ns") and store.get("ns", "text") == [5, 6]
    assert store.flush(30)
    assert OutputIdsStore(tmp_path, max_bytes=1000).get("ns", "text") == [5, 6]
