"""Stage-by-stage progress of a model load, as log lines (stderr when logging is not configured)."""

from __future__ import annotations

import logging
import sys
import time

logger = logging.getLogger("kvgate.models")


class Progress:
    def __init__(self, what: str):
        self.what = what
        self.started = time.perf_counter()

    def stage(self, name: str) -> None:
        line = f"loading {self.what}: {name} ({time.perf_counter() - self.started:.1f} s)"
        if logging.getLogger().hasHandlers() or logger.hasHandlers():
            logger.info(line)
        else:
            print(f"kvgate: {line}", file=sys.stderr, flush=True)
