"""A FAKE full disk under the SSD tier, loaded into a real server as ``sitecustomize`` (this folder
on ``PYTHONPATH``, the budget file's path in ``KVGATE_FAKE_SSD_DISK_FILE``).

A real ENOSPC needs a small file system, which the suite cannot mount (no root, no tmpfs), so this
fakes the one fault that cannot otherwise be produced: the chunk files live on a "disk" of as
many bytes as the budget file says (read at every write, so a test can shrink it while the server
runs). A chunk write that would take the chunk files past it raises ``OSError(ENOSPC)`` from
``os.write``, as a full disk does, and the tier's free-space reading is the budget less the chunk
files' bytes. Everything else (the server, the tier, the files on disk) is real.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def budget() -> int:
    return int(Path(os.environ["KVGATE_FAKE_SSD_DISK_FILE"]).read_text())


def used(chunks: Path) -> int:
    total = 0
    for path in chunks.glob("*/*"):
        try:
            total += path.stat().st_size
        except OSError:  # deleted meanwhile
            pass
    return total


class FullDiskOs:
    """``os`` for the chunk-file module, with a ``write`` that fills the fake disk."""

    def __getattr__(self, name: str):
        return getattr(os, name)

    def write(self, fd: int, data) -> int:
        chunks = Path(os.readlink(f"/proc/self/fd/{fd}")).parent.parent
        if used(chunks) + len(data) > budget():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


def install() -> None:
    from kvgate.plugins.cache_ssd import chunk_files, disk_space

    chunk_files.os = FullDiskOs()
    disk_space.free_bytes = lambda root: budget() - used(Path(root) / "chunks")


if os.environ.get("KVGATE_FAKE_SSD_DISK_FILE"):
    install()
