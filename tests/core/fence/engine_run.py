"""Run requests through the real engine (worker thread, continuous batch) with a fence, for the
speculative-decoding tests and the fence bench."""

from __future__ import annotations

import queue
from typing import Optional

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.config import Config, EngineConfig
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.fence import build_request_fence, tokenizer_info
from kvgate.core.types import ChatRequest


def make_engine(runtime, speculative: int = 0) -> Engine:
    engine = Engine(runtime, EngineConfig(speculative_ngram=speculative, max_batch=8))  # speculates when > 0
    engine.start()
    return engine


def prompt_tokens(runtime, dialect, request: ChatRequest) -> list[int]:
    text = JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens).render(request)
    return list(runtime.tokenizer.encode(text, add_special_tokens=False).ids)


def generate(engine: Engine, runtime, dialect, request: ChatRequest, info, config: Config, pm,
             max_tokens: int, fenced: bool = True) -> tuple[list[int], SequenceDone, Optional[object]]:
    """(output tokens, done message, the fence) of one request."""
    inbox: queue.Queue = queue.Queue()
    fence = build_request_fence(request, dialect, info, config, pm) if fenced else None
    seq = Sequence(prompt=prompt_tokens(runtime, dialect, request), params=request.sampling,
                   max_tokens=max_tokens, stop_token_ids=frozenset(runtime.info.eos_token_ids),
                   deliver=inbox.put, fence=fence)
    engine.submit(seq)
    out, done = collect(inbox)
    return out, done, fence


def collect(inbox: queue.Queue) -> tuple[list[int], SequenceDone]:
    """The output tokens and the done message a sequence delivers to ``inbox``."""
    out: list[int] = []
    while True:
        message = inbox.get(timeout=300)
        if isinstance(message, TokenOut):
            out.append(message.token)
        elif isinstance(message, SequenceDone):
            return out, message


def plain_and_speculative(runtime, dialect, request: ChatRequest, pm,
                          max_tokens: int) -> tuple[list[int], list[int], SequenceDone]:
    """(output without speculation, output with n-gram speculation, the plain run's done message) of
    one fenced request, on the default config."""
    config = bind_plugin_sections(Config(), pm)
    info = tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids)
    plain, spec = make_engine(runtime, 0), make_engine(runtime, 4)
    try:
        without, done, _ = generate(plain, runtime, dialect, request, info, config, pm, max_tokens)
        with_spec, _, _ = generate(spec, runtime, dialect, request, info, config, pm, max_tokens)
    finally:
        plain.stop()
        spec.stop()
    return without, with_spec, done
