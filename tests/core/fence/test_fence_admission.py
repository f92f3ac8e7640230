"""Bounded work for hostile schemas (issue 31, finding 1): an over-budget build is cancelled so
that its worker is free again."""

from __future__ import annotations

import asyncio
import time

import pytest

from kvgate.core.fence.admission import FenceAdmission
from kvgate.core.fence.cancel import checkpoint
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.types import ChatRequest, Message, ResponseFormat


def test_an_over_budget_build_is_cancelled_and_frees_its_worker():
    """The build here is a stand-in that only spins through checkpoints (a real costly build
    takes machine-dependent time): the cancellation path it exercises is the real one."""
    finished: list[str] = []

    def build(request):
        if request.messages[0].content == "costly":
            while True:
                checkpoint()
                time.sleep(0.01)
        finished.append(request.messages[0].content)
        return "fence"

    def constrained(text: str) -> ChatRequest:
        return ChatRequest(model="m", messages=[Message("user", text)],
                           response_format=ResponseFormat("json_object"))

    admission = FenceAdmission(build, budget_s=0.3, workers=1)

    async def scenario():
        with pytest.raises(FenceRequestError, match="did not compile within"):
            await admission.admit(constrained("costly"))
        return await asyncio.wait_for(admission.admit(constrained("light")), 2.0)

    try:
        assert asyncio.run(scenario()) == "fence" and finished == ["light"]  # the one worker was free again
    finally:
        admission.close()
