"""One schema worker process: the parent's handle (:class:`Worker`) and the loop it runs (:func:`serve`).

The parent sends ``(schema, where, param)``; the worker answers ``("ok", Prepared)`` or
``("refused", message, param, code)`` for a schema it refuses (the request's 400). It first answers
``("ready",)`` once its preparer is built, and ends when its pipe closes.
"""

from __future__ import annotations

import os
import pickle
from typing import Any, Optional

from kvgate.core.fence.cancel import BuildCancelled, cancellable, checkpoint
from kvgate.core.fence.errors import FenceRequestError

START_TIMEOUT_S = 120.0  # importing the backend's modules in a fresh process, on a busy machine
NICENESS = 10  # a worker's scheduling priority, below the server's (0)
STOP_GRACE_S = 0.5  # how long a cancelled job may take to reach a checkpoint before its worker is killed


class WorkerStopped(FenceRequestError):
    """The worker process ended while preparing a schema (the schema's 400)."""


class Worker:
    def __init__(self, process, conn, cancel):
        self.process, self.conn, self.cancel = process, conn, cancel
        self.usable = True  # False once a job it was given may still be running

    @classmethod
    def spawn(cls, context, setup: bytes) -> Optional["Worker"]:
        """A started worker, or None when it could not start."""
        parent, child = context.Pipe()
        cancel = context.Event()
        process = context.Process(target=serve, args=(child, setup, cancel), name="kvgate-schema-worker",
                                   daemon=True)
        process.start()
        lower_priority(process.pid)
        child.close()
        worker = cls(process, parent, cancel)
        try:
            if parent.poll(START_TIMEOUT_S) and parent.recv() == ("ready",):
                return worker
        except (EOFError, OSError):
            pass
        worker.kill()
        return None

    def run(self, job: tuple, poll_s: float) -> tuple:
        """The worker's answer to ``job``; checks for cancellation while it waits. A cancelled job
        is stopped at the worker's next checkpoint (what it probed stays cached there, so a retry
        resumes); one that does not stop within ``STOP_GRACE_S`` leaves the worker unusable."""
        self.cancel.clear()
        self.usable = False
        try:
            self.conn.send(job)
            while not self.conn.poll(poll_s):
                checkpoint()
            answer = self.conn.recv()
        except BuildCancelled:
            self.cancel.set()
            self.usable = self.conn.poll(STOP_GRACE_S) and self._drained()
            raise
        except (EOFError, OSError):
            raise WorkerStopped(f"{job[1]}: preparing this schema stopped its worker process; simplify it",
                                param=job[2]) from None
        self.usable = True
        return answer

    def _drained(self) -> bool:
        try:
            self.conn.recv()  # the stopped job's answer, which nobody reads
            return True
        except (EOFError, OSError):
            return False

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


def lower_priority(pid: int) -> None:
    """Give the worker (and the threads it starts) ``NICENESS``: on a small machine the server's
    own threads then get the cores first, while the worker is still importing and after."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, NICENESS)
    except (AttributeError, OSError):  # no priorities here: the worker runs at the server's
        pass


def serve(conn, setup: bytes, cancel) -> None:
    """The worker's loop: prepare each schema it is sent, until the pipe closes."""
    preparer = pickle.loads(setup)()
    conn.send(("ready",))
    while True:
        try:
            schema, where, param = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(answer(preparer, schema, where, param, cancel))


def answer(preparer, schema: Any, where: str, param: str, cancel) -> tuple:
    try:
        with cancellable(cancel):  # the parent sets ``cancel`` when the build's request gives up
            return ("ok", preparer.prepare_here(schema, where, param))
    except FenceRequestError as exc:
        return ("refused", exc.message, exc.param, exc.code)
