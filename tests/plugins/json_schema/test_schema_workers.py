"""Large schemas are prepared in a worker process (issue 31, finding 1): the same result and the
same refusals as on the thread, with the calling thread's CPU (and so the server's GIL) nearly
untouched; a cancelled build stops in its worker (or the worker is killed), and the next schema
is served."""

from __future__ import annotations

import os
import threading
import time

import pytest

from kvgate.core.fence.cancel import BuildCancelled, cancellable
from kvgate.core.fence.errors import FenceRequestError
from kvgate.plugins.grammar_llguidance.backend import LlgBackend
from kvgate.plugins.json_schema.prepare import JsonSchemaPreparer
from kvgate.plugins.json_schema.worker import is_costly
from kvgate.plugins.json_schema.worker_process import NICENESS

pytestmark = pytest.mark.slow


def patterns(count: int, salt: str, options: int = 4) -> dict:
    """``count`` properties of ``options`` distinct patterns each: every pattern is test-compiled."""
    return {"type": "object", "required": ["p0"], "properties": {
        f"p{i}": {"anyOf": [{"type": "string", "pattern": f"^[a-z]{{{j},{j + i}}}x{i}{salt}$"} for j in range(options)]}
        for i in range(count)} | {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}}


@pytest.fixture(scope="module")
def backend(smol_info):
    return LlgBackend(smol_info)


@pytest.fixture(scope="module")
def apart(backend):
    preparer = JsonSchemaPreparer(backend)
    yield preparer
    for worker in list(preparer.workers.idle):  # the others end with this process
        worker.kill()


def cpu_of(call) -> tuple[float, object]:
    started = time.thread_time()
    result = call()
    return time.thread_time() - started, result


def test_a_large_schema_is_prepared_apart_with_the_same_result(apart, backend):
    schema = patterns(100, "same")
    assert is_costly(schema) and not is_costly(patterns(20, "small"))
    apart_cpu, prepared = cpu_of(lambda: apart.prepare(schema, "response_format", "response_format"))
    here_cpu, expected = cpu_of(lambda: JsonSchemaPreparer(backend, workers=False).prepare(
        schema, "response_format", "response_format"))
    print(f"calling thread's CPU: {apart_cpu:.3f} s apart, {here_cpu:.3f} s on the thread")
    assert prepared == expected and any("uniqueItems" in note for note in prepared.relaxed)
    assert apart_cpu < here_cpu / 3
    workers = [worker.process for worker in apart.workers.idle]
    assert workers and all(process.is_alive() and process.pid != os.getpid() for process in workers)
    assert all(os.getpriority(os.PRIO_PROCESS, process.pid) >= NICENESS for process in workers)  # cores to the server


def test_a_refused_large_schema_is_the_same_400(apart, backend):
    schema = patterns(100, "bad") | {"properties": {**patterns(100, "bad")["properties"], "odd": {"type": "strin"}}}
    errors = []
    for preparer in (apart, JsonSchemaPreparer(backend, workers=False)):
        with pytest.raises(FenceRequestError) as caught:
            preparer.prepare(schema, "tool 'f'", "tools")
        errors.append((caught.value.message, caught.value.param, caught.value.status))
    assert errors[0] == errors[1] and errors[0][1:] == ("tools", 400) and "'f'" in errors[0][0]


def test_a_cancelled_build_stops_in_its_worker_and_the_next_is_served(apart):
    apart.prepare(patterns(100, "warm"), "response_format", "response_format")  # a worker is ready
    before = [worker.process for worker in apart.workers.idle]
    cancelled, outcome = threading.Event(), {}

    def build():
        with cancellable(cancelled):
            try:
                apart.prepare(patterns(400, "slow", 8), "response_format", "response_format")
            except BuildCancelled:
                outcome["stopped"] = time.monotonic()

    thread = threading.Thread(target=build)
    thread.start()
    time.sleep(1.0)  # the worker is preparing thousands of patterns now
    asked = time.monotonic()
    cancelled.set()
    thread.join(30)
    assert "stopped" in outcome and outcome["stopped"] - asked < 6.0
    idle = [worker.process for worker in apart.workers.idle]
    assert all(not process.is_alive() or process in idle for process in before)  # none is still at it
    prepared = apart.prepare(patterns(100, "next"), "response_format", "response_format")
    assert "p99" in prepared.schema["properties"]


def test_a_backend_that_cannot_travel_keeps_schemas_on_the_thread(backend):
    class Unpicklable:  # holds a lock: it cannot be pickled into a worker
        name, unsupported_keywords, formats = backend.name, backend.unsupported_keywords, backend.formats

        def __init__(self):
            self.lock = threading.Lock()

        def schema_error(self, schema) -> str:
            return backend.schema_error(schema)

    preparer = JsonSchemaPreparer(Unpicklable())
    prepared = preparer.prepare(patterns(100, "here"), "response_format", "response_format")
    assert not preparer.workers.available and "p99" in prepared.schema["properties"]
