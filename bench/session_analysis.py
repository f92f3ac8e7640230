"""Per-turn cache analysis of recorded agent traffic (``[server] record_path`` lines).

For every request: the cached prompt tokens the server reported against the ceiling, the most an
ideal prefix cache could have served -- the longest prefix shared with any earlier request's
prompt followed by its output, never the whole prompt (the last prompt token is always computed
to produce the first output token). Every request below its ceiling gets an explanation: the
almost-hit the server recorded for it (``GET /v1/cache/diagnostics``) when there is one, and in any
case the decoded text on both sides of where it forks from the earlier sequence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import httpx


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def best_earlier(prompt: list[int], earlier: list[dict]) -> tuple[int, int]:
    """(ceiling, index of the earlier record that gives it, or -1)."""
    best, which = 0, -1
    for index, record in enumerate(earlier):
        shared = common_prefix(prompt, record["prompt"] + record["output"])
        if shared > best:
            best, which = shared, index
    return min(best, max(len(prompt) - 1, 0)), which


def detokenizer(base_url: str) -> Callable[[list[int]], str]:
    def decode(tokens: list[int]) -> str:
        reply = httpx.post(base_url + "/v1/detokenize", json={"tokens": tokens}, timeout=60)
        return reply.json().get("prompt", "") if reply.status_code == 200 else f"<detokenize {reply.status_code}>"
    return decode


def explain(record: dict, ceiling: int, source: dict | None, almost: list[dict], decode) -> str:
    """Why ``record`` got fewer cached tokens than its ceiling."""
    cached, prompt = record["cached"], record["prompt"]
    parts = []
    hit = next((a for a in almost if a["prompt_tokens"] == len(prompt) and a["fork_index"] > cached
                and abs(a["time"] - record["time"]) < 600), None)  # only one that a longer hit would have used
    if hit is not None:
        parts.append(f"almost-hit ({hit['tier']}): forked at {hit['fork_index']} of a stored {hit['stored_tokens']};"
                     f" stored {hit['stored_after']!r} vs prompt {hit['prompt_after']!r}")
    stored = [] if source is None else source["prompt"] + source["output"]
    if source is not None and cached == len(stored) - 1 and ceiling == len(stored):
        parts.append("the earlier request's last output token was sampled but never run through the model:"
                     " no state exists for it")
    elif source is not None and 0 < ceiling - cached < 64 and cached > 0:
        parts.append(f"{ceiling - cached} tokens short: a hit ends on a cache block boundary")
    elif source is not None:
        fork = common_prefix(prompt, source["prompt"] + source["output"])
        parts.append(f"shares {fork} tokens with request {source['index']}; there: {decode(stored[fork:fork + 16])!r},"
                     f" here: {decode(prompt[fork:fork + 16])!r}; served {cached} (the stored state was"
                     f" {'evicted or superseded' if cached == 0 else 'shorter'})")
    return "; ".join(parts) or "no earlier request shares a prefix"


def analyse(records: list[dict], almost: list[dict], decode) -> list[dict]:
    """One row per request: turn, prompt, cached, ceiling, ttft, the miss explanation."""
    rows = []
    for index, record in enumerate(records):
        record["index"], record["cached"] = index, record["cached_device"] + record["cached_ssd"]
        ceiling, which = best_earlier(record["prompt"], records[:index])
        row = {"turn": record.get("turn"), "request": index, "kind": record["reason"],
               "prompt": len(record["prompt"]), "output": len(record["output"]), "cached": record["cached"],
               "ceiling": ceiling, "ttft_s": record["ttft_s"], "why": ""}
        if record["cached"] < ceiling:
            row["why"] = explain(record, ceiling, records[which] if which >= 0 else None, almost, decode)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| turn | req | finish | prompt | output | cached | ceiling | TTFT s | miss explained |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ttft = "-" if r["ttft_s"] is None else f"{r['ttft_s']:.2f}"
        lines.append(f"| {r['turn']} | {r['request']} | {r['kind']} | {r['prompt']} | {r['output']} | {r['cached']} |"
                     f" {r['ceiling']} | {ttft} | {r['why']} |")
    prompt, cached, ceiling = (sum(r[k] for r in rows) for k in ("prompt", "cached", "ceiling"))
    if prompt:
        lines.append(f"\nhit ratio {cached / prompt:.1%} of {prompt} prompt tokens; ceiling {ceiling / prompt:.1%};"
                     f" cached/ceiling {cached / max(ceiling, 1):.1%}")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict[str, Any]:
    prompt, cached, ceiling = (sum(r[k] for r in rows) for k in ("prompt", "cached", "ceiling"))
    return {"prompt_tokens": prompt, "cached_tokens": cached, "ceiling_tokens": ceiling,
            "hit_ratio": cached / prompt if prompt else 0.0, "ceiling_ratio": ceiling / prompt if prompt else 0.0}
