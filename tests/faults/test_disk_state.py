"""Opening on-disk state that may be damaged (:mod:`kvgate.core.cache.disk_state`), on a real disk."""

from __future__ import annotations

import pytest

from kvgate.core.cache.disk_state import StateUnusable, open_or_set_aside


class Busy(Exception):
    pass


def test_damage_is_set_aside_and_the_state_opened_empty(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    (root / "data").write_text("damaged")
    calls = []

    def open_state():
        calls.append(sorted(p.name for p in root.iterdir()))
        if (root / "data").exists():
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return "opened"

    assert open_or_set_aside(root, open_state, "test store") == "opened"
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("store.damaged-")]
    assert len(aside) == 1 and (aside[0] / "data").read_text() == "damaged" and calls == [["data"], []]


def test_unwritable_or_still_failing_state_is_unusable_and_passthrough_propagates(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StateUnusable, match="not writable"):
        open_or_set_aside(tmp_path / "file" / "store", lambda: "never", "test store")
    with pytest.raises(StateUnusable, match="cannot be opened even empty"):
        open_or_set_aside(tmp_path / "always", lambda: 1 / 0, "test store")

    def busy():
        raise Busy()

    with pytest.raises(Busy):
        open_or_set_aside(tmp_path / "busy", busy, "test store", passthrough=(Busy,))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("busy.damaged")]
