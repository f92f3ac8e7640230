"""A long SSD restore shows progress (issue 36): restoring a prefix of more than
``LONG_WORK_TOKENS`` tokens from the real SSD tier is logged as it starts and ends, on the process's
progress board while it reads; a short restore stays off the board."""

from __future__ import annotations

import threading

import pytest

from kvgate.core.observe.progress import BOARD, LONG_WORK_TOKENS
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS, long_text, run_request, text_tokens

pytestmark = pytest.mark.slow


def restore_logged(tmp_path, runtime, tokens: list[int], caplog) -> tuple[object, str]:
    """Store ``tokens`` (backed up at close), then restore them in a fresh manager; the plan and the
    progress log of the restore."""
    manager = make_manager(cache_config(tmp_path, chunk_tokens=256), runtime)
    _, _, stored = run_request(manager, runtime, tokens, output_tokens=1)
    manager.close()
    manager = make_manager(cache_config(tmp_path, chunk_tokens=256), runtime)
    caplog.clear()
    plan = manager.plan(NS, stored + text_tokens(runtime, " and then"), None)
    worker = threading.Thread(target=manager.load, args=(plan,))
    worker.start()
    worker.join()
    manager.discard(manager.attach(plan))
    manager.close()
    return plan, caplog.text


def test_a_long_ssd_restore_is_logged_with_its_tokens(tmp_path, cache_runtime, caplog):
    caplog.set_level("INFO", logger="kvgate.progress")
    tokens = text_tokens(cache_runtime, long_text(41, 1000))[: LONG_WORK_TOKENS + 100]
    plan, log = restore_logged(tmp_path / "long", cache_runtime, tokens, caplog)
    assert plan.source == "ssd" and plan.cached_tokens >= LONG_WORK_TOKENS
    total = plan.cached_tokens
    assert "ssd_restore started: ssd snapshot" in log and f"({total} tokens)" in log
    assert "ssd_restore done: ssd snapshot" in log and f"{total}/{total} tokens in" in log
    assert BOARD.in_flight() == []

    short = text_tokens(cache_runtime, long_text(42, 200))[:300]
    plan, log = restore_logged(tmp_path / "short", cache_runtime, short, caplog)
    assert plan.source == "ssd" and "ssd_restore" not in log
