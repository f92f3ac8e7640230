"""A tiny random GLM-4.5 with an MTP layer and the SmolLM2 tokenizer (so GLM's tool-call fence can
spell its markup), and batches of greedy requests through the real engine."""

from __future__ import annotations

import queue
from typing import Optional

import torch

from kvgate.core.config import EngineConfig
from kvgate.core.engine.engine import Engine
from kvgate.core.engine.sequence import Sequence
from kvgate.core.types import SamplingParams
from tests.core.fence.engine_run import collect as collect_outputs
from tests.models.test_families_server import write_checkpoint
from tests.models.tiny_families import add_mtp_layer


def glm_with_mtp(directory):
    """(directory, transformers model, the MTP layer's parts) of a GLM-4.5 checkpoint with an MTP layer."""
    from transformers import AutoModelForCausalLM

    write_checkpoint(directory, "glm4_moe")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    return directory, model, add_mtp_layer(directory, model)


def run_batch(runtime, config: EngineConfig, prompts: list[list[int]], fences: Optional[list] = None,
              max_tokens: int = 40, temperature: float = 0.0) -> tuple[list[list[int]], list[str], object]:
    """Submit every prompt at once (greedy, or sampled with a seeded generator per prompt);
    (outputs, finish reasons, the engine's decode step)."""
    engine = Engine(runtime, config)
    engine.start()
    inboxes = []
    try:
        for index, prompt in enumerate(prompts):
            inbox: queue.Queue = queue.Queue()
            generator = torch.Generator().manual_seed(index) if temperature else None
            engine.submit(Sequence(prompt=prompt, params=SamplingParams(temperature=temperature),
                                   max_tokens=max_tokens, stop_token_ids=frozenset(runtime.info.eos_token_ids),
                                   deliver=inbox.put, fence=fences[index] if fences else None, generator=generator))
            inboxes.append(inbox)
        results = [collect(inbox) for inbox in inboxes]
    finally:
        engine.stop()
    return [out for out, _ in results], [reason for _, reason in results], engine.decode_step


def collect(inbox: queue.Queue) -> tuple[list[int], str]:
    out, done = collect_outputs(inbox)
    assert done.reason in ("stop", "length"), done
    return out, done.reason
