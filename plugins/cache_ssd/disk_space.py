"""Free space on the SSD tier's file system, for eviction by ``[cache] ssd_min_free_bytes``."""

from __future__ import annotations

import shutil
from pathlib import Path


def free_bytes(root: Path) -> int:
    """Bytes an unprivileged writer may still use under ``root``; unknown (unreadable) counts as
    plenty, so a failing ``statvfs`` never evicts the whole tier."""
    try:
        return shutil.disk_usage(root).free
    except OSError:
        return 1 << 62
