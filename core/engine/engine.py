"""The engine: one worker thread that owns the runtime and runs a continuous batch.

Each loop turn admits new sequences, plans their cache source, attaches those whose state is
ready, runs one prefill chunk, then one decode step over every running sequence. A new request
joins the running batch as soon as its prompt is in state; it never waits for the others. The
waiting prompts take turns, one time-paced chunk each (:mod:`kvgate.core.engine.prefill_schedule`),
so a long prompt delays a short one by one chunk, not by its whole prefill.

The decode step is a strategy (:data:`kvgate.core.engine.steps.DecodeStep`) chosen from the
``[engine]`` config: speculation with the registered drafter the config asks for
(:mod:`kvgate.core.engine.drafter_choice`), else the plain batched step. The step functions reach
the engine only through :class:`kvgate.core.engine.steps.StepHost`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from typing import Any, Optional

from kvgate.core.config import EngineConfig
from kvgate.core.engine import steps
from kvgate.core.engine.null_cache import NullCache
from kvgate.core.engine.message_ends import prompt_boundaries
from kvgate.core.engine.prefill_progress import PrefillProgress
from kvgate.core.engine.drafter_choice import choose_drafter, drafter_registry
from kvgate.core.engine.prefill_schedule import PREFILL_SLICE_S, PrefillPace, PrefillSchedule
from kvgate.core.engine.speculative import SpeculativeStep
from kvgate.core.engine.sequence import Phase, Planned, Sequence, SequenceDone
from kvgate.core.errors import KvgateError, Overloaded
from kvgate.core.observe.progress import BOARD
from kvgate.core.plugins import Registry
from kvgate.core.runtime import ModelRuntime

log = logging.getLogger("kvgate.engine")


SHUTTING_DOWN = "The server is shutting down; retry the request."


class ServerShuttingDown(KvgateError):
    """The error an in-flight sequence ends with when the server drains."""

    status = 503
    code = "overloaded"
    kind = "overloaded_error"


def decode_step_for(config: EngineConfig, runtime: Optional[ModelRuntime] = None, metrics: Any = None,
                    drafters: Optional[Registry] = None) -> steps.DecodeStep:
    """The decode strategy ``config`` asks for: speculation with the drafter of ``drafters``
    (default: every installed plugin's) that answers it, else the plain batched step."""
    drafter = choose_drafter(config, runtime, drafters if drafters is not None else drafter_registry())
    if drafter is None:
        return steps.decode_step
    return SpeculativeStep(drafter, drafter.max_draft(config), metrics)


class Engine:
    """Implements :class:`kvgate.core.engine.steps.StepHost` for the step functions."""

    def __init__(self, runtime: ModelRuntime, config: EngineConfig, cache: Any = None, metrics: Any = None,
                 prefill_slice_s: Optional[float] = PREFILL_SLICE_S, drafters: Optional[Registry] = None):
        """``prefill_slice_s``: the longest one prefill forward should take (None: the config's
        chunk sizes alone). ``drafters``: the ``register_drafters`` registry (None: every installed
        plugin's)."""
        self.runtime = runtime
        self.config = config
        self.cache = cache if cache is not None else NullCache(runtime)
        self.metrics = metrics
        self._inbox: collections.deque[Sequence] = collections.deque()
        self._waiting: list[Sequence] = []  # planned, loading or prefilling
        self._running: list[Sequence] = []  # decoding
        self._wake = threading.Condition()
        self._loader = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kvgate-load")
        self._thread: Optional[threading.Thread] = None
        self._stopping = False
        self._draining = False  # shutting down: in-flight sequences end with an error, new ones are refused
        self._in_flight = 0  # submitted and not yet finished, wherever they are
        self.decode_step: steps.DecodeStep = decode_step_for(config, runtime, metrics, drafters)
        self.prefill_progress = PrefillProgress(BOARD)  # long cold prefills, for /health and the log
        self.pace = PrefillPace(prefill_slice_s)
        self.schedule = PrefillSchedule(config, self.pace)

    # --- called from any thread -----------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kvgate-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._loader.shutdown(wait=False, cancel_futures=True)

    def drain(self) -> None:
        """Begin shutting down: refuse new requests and end every in-flight one with an error
        (each protocol sends its error event), so that open streams close at once."""
        with self._wake:
            self._draining = True
            for seq in list(self._inbox) + self._waiting + self._running:
                seq.cancelled = True
            self._wake.notify()

    def is_serving(self) -> bool:
        """The engine thread runs and the server is not draining."""
        return self._thread is not None and self._thread.is_alive() and not self._draining

    def load(self) -> int:
        return self._in_flight

    def loads(self) -> dict[str, int]:
        """Requests decoding, waiting (queued, loading or prefilling) and in flight, read without a lock."""
        running = len(self._running)
        return {"running": running, "waiting": max(self._in_flight - running, 0), "in_flight": self._in_flight}

    def submit(self, seq: Sequence) -> None:
        with self._wake:
            if self._draining:
                raise Overloaded(SHUTTING_DOWN)
            if self._in_flight >= self.config.max_queue:
                raise Overloaded(f"The request queue is full ({self.config.max_queue} requests); retry shortly.")
            self._in_flight += 1
            self._inbox.append(seq)
            self._wake.notify()

    def cancel(self, seq: Sequence) -> None:
        seq.cancelled = True
        with self._wake:
            self._wake.notify()

    # --- engine thread --------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                if self._stopping:
                    break
                if not (self._inbox or self._has_work()):
                    self._wake.wait(timeout=0.5)
                    continue
                new = list(self._inbox)
                self._inbox.clear()
            try:
                self._turn(new)
            except Exception:  # a bug must not kill the engine thread: fail what is in flight
                log.exception("engine step failed")
                for seq in self._waiting + self._running + [s for s in new if s.phase is not Phase.DONE]:
                    self._finish(seq, SequenceDone("error", RuntimeError("internal engine error")))
        for seq in list(self._inbox) + self._waiting + self._running:
            self._finish(seq, SequenceDone("cancelled"))

    def _has_work(self) -> bool:
        return any(s.phase is not Phase.LOADING or s.cancelled for s in self._waiting) or bool(self._running)

    def _turn(self, new: list[Sequence]) -> None:
        for seq in new:
            if seq.phase is Phase.LOADING:
                self._attach(seq)  # its SSD payload is ready
            else:
                self._plan(seq)
        self._drop_cancelled()
        prefilling = [s for s in self._waiting if s.phase is Phase.PREFILL]
        if prefilling and len(self._running) < self.config.max_batch:
            self._prefill_next(prefilling)
        if self._running:
            self.decode_step(self, list(self._running))

    def _prefill_next(self, prefilling: list[Sequence]) -> None:
        """One paced chunk of the prompt whose turn it is (see :class:`PrefillSchedule`)."""
        seq, tokens = self.schedule.next_chunk(prefilling, len(self._running))
        computed, started = seq.computed, time.perf_counter()
        steps.prefill_chunk(self, seq, tokens)
        self.prefill_progress.chunk_done(seq)
        if seq.session is not None and seq.computed > computed:
            seq.prefilled += seq.computed - computed
            self.pace.record(seq.computed - computed, time.perf_counter() - started)

    def _plan(self, seq: Sequence) -> None:
        seq.mark("lookup")
        seq.plan = self.cache.plan(seq.namespace, seq.prompt, seq.cache_key, seq.retention)
        seq.mark("planned")
        self._waiting.append(seq)
        if seq.plan.needs_load:
            seq.phase = Phase.LOADING
            future = self._loader.submit(self.cache.load, seq.plan)
            future.add_done_callback(lambda _f, s=seq: self._loaded(s))
        else:
            self._attach(seq)

    def _loaded(self, seq: Sequence) -> None:
        with self._wake:
            self._inbox.append(seq)  # back through the inbox: attach happens on the engine thread
            self._wake.notify()

    def _attach(self, seq: Sequence) -> None:
        seq.session = self.cache.attach(seq.plan)
        self.runtime.mark_boundaries(seq.session, prompt_boundaries(seq.prompt, self.runtime.info.eos_token_ids,
                                                                    seq.session.length, seq.plan.retained_marks))
        seq.phase = Phase.PREFILL
        seq.mark("attached")
        if seq.announce_plan:
            plan = seq.plan
            seq.deliver(Planned(len(seq.prompt), plan.cached_device, plan.cached_ssd, plan.retained_marks))

    def _drop_cancelled(self) -> None:
        for seq in [s for s in self._waiting + self._running if s.cancelled and s.phase is not Phase.LOADING]:
            self._finish(seq, SequenceDone("cancelled"))

    def batch_size(self) -> int:
        """Sequences in the running (decoding) batch."""
        return len(self._running)

    def start_decoding(self, seq: Sequence) -> None:
        self._waiting.remove(seq)
        seq.phase = Phase.DECODE
        self._running.append(seq)

    def _finish(self, seq: Sequence, done: SequenceDone) -> None:
        """Release or cache the sequence's state and tell its consumer; never raises."""
        if seq.phase is Phase.DONE:
            return
        if self._draining and done.reason == "cancelled":  # ended by the drain, wherever it was
            done = SequenceDone("error", ServerShuttingDown(SHUTTING_DOWN))
        for bucket in (self._waiting, self._running):
            if seq in bucket:
                bucket.remove(seq)
        seq.phase = Phase.DONE
        self.prefill_progress.ended(seq, done.reason)
        try:
            self._hand_back_state(seq, done)
        except Exception:
            log.exception("could not hand back the state of sequence %d", seq.id)
        finally:
            seq.session = None
            with self._wake:
                self._in_flight -= 1
            if seq.fence is not None:
                done.guard_interventions = seq.fence.interventions if seq.fence is not None else 0
                done.guard_stop = done.reason == "stop" and seq.fence.guard_stop
            try:
                seq.deliver(done)
            except RuntimeError:  # the consumer's event loop is gone (server shutting down)
                pass

    def _hand_back_state(self, seq: Sequence, done: SequenceDone) -> None:
        """A finished sequence's state goes to the cache; so does a cancelled one's computed part (a
        client that gives up during a long prefill and retries resumes it), never a failed one's."""
        self.cache.settle(seq.plan)
        if seq.session is None:
            return
        finished = done.reason in ("stop", "length") and not seq.cancelled
        if finished or (done.reason == "cancelled" and seq.session.length > 0):
            self.cache.finish(seq.namespace, seq.session, seq.cache_key)
        else:
            self.cache.discard(seq.session)

    finish = _finish
