"""Worker processes that prepare large schemas, so their work never holds the server's GIL.

Preparing a schema is mostly pure Python (the meta-schema check, normalising, unrolling, one
test compile per pattern). On a fence thread it holds the GIL for seconds, and the engine thread,
which gives the GIL up around every tensor operation, then waits a switch interval to take it
back after each one: a 0.08 s forward of another tenant took 1-4.5 s. A schema of
``COSTLY_NODES`` values or more is therefore prepared in one of up to ``WORKERS`` spawned
processes, each with its own preparer and grammar backend (rebuilt from their pickle); smaller
ones stay on the thread.

Workers start when the first large schema arrives, on a thread of their own (a build over its
budget never aborts a start). A build cancelled while its worker runs is stopped there at its
next checkpoint, and the worker keeps the patterns it probed, so a retry resumes; a worker that
does not stop in time is killed and a fresh one starts. A backend that does not pickle keeps
every schema on the thread.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import threading
from typing import Any, Callable, Optional

from kvgate.core.fence.cancel import checkpoint
from kvgate.core.fence.errors import FenceRequestError
from kvgate.plugins.json_schema.worker_process import Worker

log = logging.getLogger("kvgate.fence")
COSTLY_NODES = 1000  # a schema's values at which its preparation moves to a worker process
WORKERS = 2
POLL_S = 0.02  # how often a waiting build checks whether it was cancelled


def is_costly(schema: Any) -> bool:
    """Whether ``schema`` holds ``COSTLY_NODES`` values or more (one walk, stopping there)."""
    count, todo = 0, [schema]
    while todo:
        node = todo.pop()
        count += 1
        if count >= COSTLY_NODES:
            return True
        if isinstance(node, dict):
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return False


class SchemaWorkers:
    """Up to ``size`` worker processes, each preparing one schema at a time."""

    def __init__(self, make_preparer: Callable[[], Any], size: int = WORKERS):
        """``make_preparer()`` builds a worker's preparer (it travels pickled)."""
        self.setup = self._pickled(make_preparer)
        self.size = size
        self.idle: list[Worker] = []
        self.starting = self.running = 0
        self.changed = threading.Condition()
        self.context = multiprocessing.get_context("spawn")  # fork would copy the model and its threads

    @property
    def available(self) -> bool:
        return self.setup is not None

    def prepare(self, schema: Any, where: str, param: str) -> Optional[Any]:
        """The prepared schema (a ``Prepared``), computed in a worker; raises what preparing raises.
        None when no worker can start (the caller prepares it itself)."""
        worker = self._take()
        if worker is None:
            return None
        try:
            outcome = worker.run((schema, where, param), POLL_S)
        except BaseException:  # cancelled (or the worker died)
            self._give_back(worker) if worker.usable else self._discard(worker)
            raise
        self._give_back(worker)
        if outcome[0] == "refused":
            raise FenceRequestError(outcome[1], param=outcome[2], code=outcome[3])
        return outcome[1]

    def _take(self) -> Optional[Worker]:
        with self.changed:
            while not self.idle:
                if self.setup is None:
                    return None
                if not self.starting and self.running + len(self.idle) < self.size:  # one start at a time
                    self._start_one()
                self.changed.wait(POLL_S)
                checkpoint()
            worker = self.idle.pop()
            self.running += 1
            return worker

    def _give_back(self, worker: Worker) -> None:
        with self.changed:
            self.running -= 1
            self.idle.append(worker)
            self.changed.notify()

    def _discard(self, worker: Worker) -> None:
        """Kill ``worker`` and start its successor, so the next large schema finds one ready."""
        worker.kill()
        with self.changed:
            self.running -= 1
            if not self.starting:
                self._start_one()

    def _start_one(self) -> None:
        """Start a worker on a thread of its own (called with ``changed`` held)."""
        self.starting += 1
        threading.Thread(target=self._started, name="kvgate-schema-worker-start", daemon=True).start()

    def _started(self) -> None:
        worker = Worker.spawn(self.context, self.setup)
        with self.changed:
            self.starting -= 1
            if worker is None:
                log.warning("schema worker process failed to start; large schemas are prepared on fence threads")
                self.setup = None
            else:
                self.idle.append(worker)
            self.changed.notify_all()

    @staticmethod
    def _pickled(make_preparer: Callable[[], Any]) -> Optional[bytes]:
        try:
            return pickle.dumps(make_preparer)
        except Exception:  # a backend that cannot travel: schemas stay on the fence threads
            return None
