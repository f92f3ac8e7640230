"""The engine hands a tiny Qwen3.5 the prompt's message ends and the marks the cache will pin (real
engine, real cache manager with the device tier): pinning a marked prefix, which forks the prompt's
session at the mark (as an Anthropic ``cache_control`` breakpoint does), replays nothing; a second
prompt that parts from the first right after a message end is served from it, nothing replayed."""

from __future__ import annotations

import queue

import pytest
import torch

from kvgate.core.cache.retention import Retention, RetentionMark
from kvgate.core.config import EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import PrefillDone, Sequence, SequenceDone
from kvgate.core.types import SamplingParams
from tests.core.cache.conftest import cache_config, make_manager
from tests.core.cache.real_helpers import NS
from tests.models.tiny_models import VOCAB
from tests.models.tiny_qwen3_5 import build_tiny_qwen3_5, load_tiny_qwen3_5

pytestmark = pytest.mark.slow

END_OF_TURN = 2  # the tiny config's eos
PROMPT = torch.randint(3, VOCAB, (200,), generator=torch.Generator().manual_seed(9)).tolist()
PROMPT[70] = PROMPT[150] = END_OF_TURN  # messages end at 71 and 151
MARK = 100  # a pinned prefix inside the second message
SECOND = PROMPT[:71] + [3 if PROMPT[71] != 3 else 4] + PROMPT[72:90]


@pytest.fixture
def engine(tmp_path):
    build_tiny_qwen3_5(tmp_path / "model")
    runtime = load_tiny_qwen3_5(tmp_path / "model", state_stride=64)
    assert runtime.info.eos_token_ids == [END_OF_TURN]
    manager = make_manager(cache_config(tmp_path / "state", decode_reserve_tokens=0), runtime, ssd=False)
    engine = Engine(runtime, EngineConfig(), cache=manager)
    engine.start()
    yield engine
    engine.stop()
    manager.close()


def run(engine, prompt, marks=()) -> PrefillDone:
    inbox: queue.Queue = queue.Queue()
    retention = Retention("default", tuple(RetentionMark(p, "1h", 3600.0) for p in marks)) if marks else None
    engine.submit(Sequence(prompt=prompt, params=SamplingParams(temperature=0.0), max_tokens=2,
                           stop_token_ids=frozenset(), deliver=inbox.put, namespace=NS, retention=retention))
    messages = []
    while not isinstance(messages[-1:] and messages[-1], SequenceDone):
        messages.append(inbox.get(timeout=300))
    assert messages[-1].reason == "length", messages[-1]
    (done,) = [m for m in messages if isinstance(m, PrefillDone)]
    return done


def test_a_pinned_mark_and_a_fork_at_a_message_end_replay_nothing(engine):
    runtime = engine.runtime
    first = run(engine, PROMPT, marks=[MARK])
    assert first.retained == ((MARK, "1h"),)
    assert runtime.replayed_tokens == 0  # the pin's fork at 100 found its snapshot
    second = run(engine, SECOND)
    assert second.cached_device == 71 and second.replayed == 0 and runtime.replayed_tokens == 0, second
