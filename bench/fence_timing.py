"""Engine runs with per-step fence timing for bench_fence.py."""

from __future__ import annotations

import os
import queue
import time

import numpy as np

from kvgate.plugins.jinja_chat_format import JinjaChatFormat
from kvgate.core.config import Config, EngineConfig, ModelConfig
from kvgate.core.config_sections import bind_plugin_sections
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence, SequenceDone, TokenOut
from kvgate.core.fence import build_request_fence, tokenizer_info
from kvgate.core.plugins import build_plugin_manager

from bench.fence_workload import DIALECTS


def load(dtype: str):
    from kvgate.models.formats import resolve_source
    from kvgate.models.loading import load_runtime

    cache = os.environ.get("KVGATE_BENCH_MODEL_CACHE") or os.path.expanduser("~/.cache/kvgate-bench/models")
    runtime = load_runtime(resolve_source(""), ModelConfig(dtype=dtype), EngineConfig(kv_pool_tokens=65536), cache)
    return runtime, tokenizer_info(runtime.tokenizer, runtime.info.eos_token_ids), build_plugin_manager()


class Timings:
    def __init__(self):
        self.fence_steps: list[float] = []  # seconds of apply + advance, per sequence and position
        self.forward: list[float] = []  # seconds per forward pass (decode or verification)
        self.fence_total = 0.0
        self.tokens = 0

    def summary(self, wall: float) -> dict:
        steps = np.array(self.fence_steps) * 1e6 if self.fence_steps else np.zeros(1)
        forward = sum(self.forward)
        return {"fence_us_p50": round(float(np.percentile(steps, 50)), 1),
                "fence_us_p99": round(float(np.percentile(steps, 99)), 1),
                "fence_share_of_forward": round(self.fence_total / forward, 4) if forward else None,
                "forward_ms_mean": round(1e3 * forward / max(1, len(self.forward)), 2),
                "tokens": self.tokens, "tokens_per_s": round(self.tokens / wall, 1), "wall_s": round(wall, 1)}


class TimedFence:
    """Delegates to a RequestFence, timing what the engine's ordinary step calls."""

    def __init__(self, inner, timings: Timings):
        self.inner, self.timings, self._pending = inner, timings, 0.0

    def apply(self, logits):
        start = time.perf_counter()
        self.inner.apply(logits)
        self._pending = time.perf_counter() - start

    def advance(self, token):
        start = time.perf_counter()
        self.inner.advance(token)
        spent = time.perf_counter() - start + self._pending
        self._pending = 0.0
        self.timings.fence_steps.append(spent)
        self.timings.fence_total += spent

    def forced_tokens(self):
        start = time.perf_counter()
        out = self.inner.forced_tokens()
        self.timings.fence_total += time.perf_counter() - start
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def timed_forward(runtime, timings: Timings):
    decode, prefill = runtime.decode, runtime.prefill

    def timed_decode(sessions, tokens):
        start = time.perf_counter()
        out = decode(sessions, tokens)
        timings.forward.append(time.perf_counter() - start)
        return out

    def timed_prefill(session, tokens, all_logits=False, **options):
        start = time.perf_counter()
        out = prefill(session, tokens, all_logits=all_logits, **options)
        if all_logits:
            timings.forward.append(time.perf_counter() - start)
        return out

    runtime.decode, runtime.prefill = timed_decode, timed_prefill
    return lambda: (delattr(runtime, "decode"), delattr(runtime, "prefill"))


def prefix_cache(runtime, pm):
    """The device tier of the prefix cache (no SSD): requests that share tools share their prefill."""
    from kvgate.core.cache.build import build_cache_manager

    config = Config()
    config.cache.ssd_enabled = False
    config.cache.device_bytes = 512 * 1024**2
    return build_cache_manager(config, runtime, pm, None)


def run_cell(runtime, info, pm, dialect_name, requests, max_tokens, fenced, spec, batch, timings, cache=None):
    """Every request through one engine (continuous batch of ``batch``); (tokens, finish reason) each."""
    dialect, config = DIALECTS[dialect_name], bind_plugin_sections(Config(), pm)
    chat = JinjaChatFormat(runtime.chat_template, dialect, runtime.special_tokens)
    engine = Engine(runtime, EngineConfig(speculative_ngram=spec, max_batch=batch, max_queue=len(requests) + 1),
                    cache)  # speculates when spec > 0
    restore = timed_forward(runtime, timings)
    inbox: queue.Queue = queue.Queue()
    outputs: dict[int, tuple[list[int], str]] = {}
    engine.start()
    try:
        for index, request in enumerate(requests):
            fence = build_request_fence(request, dialect, info, config, pm) if fenced else None
            prompt = list(runtime.tokenizer.encode(chat.render(request), add_special_tokens=False).ids)
            seq = Sequence(prompt=prompt, params=request.sampling, max_tokens=max_tokens,
                           stop_token_ids=frozenset(runtime.info.eos_token_ids),
                           deliver=lambda m, i=index: inbox.put((i, m)),
                           fence=TimedFence(fence, timings) if fence is not None else None)
            outputs[index] = ([], "")
            engine.submit(seq)
        done = 0
        while done < len(requests):
            index, message = inbox.get(timeout=900)
            if isinstance(message, TokenOut):
                outputs[index][0].append(message.token)
                timings.tokens += 1
            elif isinstance(message, SequenceDone):
                if message.reason == "error":
                    print(f"request {index}: error {message.error!r}", flush=True)
                outputs[index] = (outputs[index][0], message.reason)
                done += 1
    finally:
        engine.stop()
        restore()
    return [outputs[i] for i in range(len(requests))]
