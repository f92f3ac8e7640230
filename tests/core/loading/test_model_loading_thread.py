"""The model loads on a passing thread (:func:`kvgate.core.loading.model_loading.on_passing_thread`), so that
the engine thread's OpenMP team is the only one in the server process."""

from __future__ import annotations

import threading

import pytest
import torch

from kvgate.core.loading.model_loading import on_passing_thread


def test_returns_the_work_of_another_thread_that_has_ended():
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return int(torch.ones(100_000).sum())  # a parallel op: its OpenMP team ends with the thread

    assert on_passing_thread(work) == 100_000
    assert seen[0] is not threading.current_thread() and not seen[0].is_alive()


def test_raises_the_work_s_exception_on_the_caller_s_thread():
    def work() -> None:
        raise ValueError("model.path: no such file")

    with pytest.raises(ValueError, match="no such file"):
        on_passing_thread(work)
