"""Stage-by-stage progress of a model load, as log lines (stderr when logging is not configured);
a long stage (a conversion's tensors) also logs its count at each quarter."""

from __future__ import annotations

import logging
import sys
import time

logger = logging.getLogger("kvgate.models")
QUARTERS = 4


class Progress:
    def __init__(self, what: str):
        self.what = what
        self.started = time.perf_counter()

    def stage(self, name: str) -> None:
        self.say(f"loading {self.what}: {name} ({time.perf_counter() - self.started:.1f} s)")

    def count(self, name: str, done: int, total: int) -> None:
        """``done`` of ``total`` items of the stage ``name`` are through: logged at each quarter."""
        if total >= QUARTERS and 0 < done < total and done * QUARTERS // total > (done - 1) * QUARTERS // total:
            self.say(f"loading {self.what}: {name}: {done}/{total} ({time.perf_counter() - self.started:.1f} s)")

    def say(self, line: str) -> None:
        if logging.getLogger().hasHandlers() or logger.hasHandlers():
            logger.info(line)
        else:
            print(f"kvgate: {line}", file=sys.stderr, flush=True)
