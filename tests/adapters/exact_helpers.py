"""Prompts and requests for the exactness tests (tests/adapters/test_exact_paths*.py).

The fifty prompts are real English text from the repository's own markdown (README.md,
docs/*.md, plugin_template/README.md), so a fresh clone has them: prompt ``i`` is a slice of that
text (whole lines, from an offset that moves with ``i``) followed by one of ten questions. Prose,
tables and code, where greedy top-2 logits are often close (often tied in bf16).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COUNT = 50
SHORTEST, LONGEST = 200, 1600  # characters / CHARS_PER_TOKEN: ~230 to ~2,000 tokens; a cubic spread, most
CHARS_PER_TOKEN = 3.4  # are short (a 2-core CI machine prefills ~300 tokens/s in deterministic mode)
MAX_TOKENS = 8
QUESTIONS = [
    "Summarize the passage above in one sentence.",
    "What is the main idea of this text?",
    "Explain this part to a new engineer in plain words.",
    "Which setting mentioned above matters most, and why?",
    "Write a short title for this passage.",
    "What problem does this part of the document solve?",
    "List two facts that the text states.",
    "Describe the process that this text explains.",
    "What would you ask the author about this?",
    "Rewrite the first sentence more simply.",
]


def corpus() -> str:
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "plugin_template" / "README.md"]
    return "\n\n".join(path.read_text() for path in paths)


def passage(text: str, index: int) -> str:
    """Whole lines, about ``target`` tokens long, from an offset that moves with ``index``."""
    target = SHORTEST + (LONGEST - SHORTEST) * index ** 3 // (COUNT - 1) ** 3
    size = int(target * CHARS_PER_TOKEN)
    start = text.rfind("\n", 0, index * 7919 % (len(text) - size)) + 1
    end = text.find("\n", start + size)
    return text[start:end if end > 0 else len(text)].strip()


def prompts() -> list[list[dict]]:
    """``COUNT`` conversations of one user message, shortest first."""
    text = corpus()
    return [[{"role": "user", "content": passage(text, i) + "\n\n" + QUESTIONS[i % len(QUESTIONS)]}]
            for i in range(COUNT)]


def follow_up(messages: list[dict], answer: "Served", index: int) -> list[dict]:
    """The conversation's next turn: the assistant's answer, then a new question."""
    question = QUESTIONS[(index + 3) % len(QUESTIONS)]
    return messages + [{"role": "assistant", "content": answer.content}, {"role": "user", "content": question}]


@dataclass
class Served:
    """One answer: what identity is checked on (text, finish, every logprob field) and where its
    prompt came from (``usage.kvgate``)."""
    content: str
    finish: str
    tokens: list[tuple]
    prompt: int
    device: int
    ssd: int

    def output(self) -> tuple:
        return self.content, self.finish, self.tokens


def as_tuples(tokens) -> list[tuple]:
    """Every field of each token, floats as they came (compared with ==)."""
    return [(t.token, t.logprob, tuple(t.bytes), tuple((a.token, a.logprob, tuple(a.bytes)) for a in t.top_logprobs))
            for t in tokens]


def ask(client, messages: list[dict], salt: str, max_tokens: int = MAX_TOKENS) -> Served:
    """Greedy, with logprobs (top 3), in the cache namespace of ``salt``."""
    answer = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=max_tokens,
                                            logprobs=True, top_logprobs=3, extra_body={"cache_salt": salt})
    choice, usage = answer.choices[0], answer.usage
    sources = usage.model_extra["kvgate"]
    return Served(choice.message.content, choice.finish_reason, as_tuples(choice.logprobs.content),
                  usage.prompt_tokens, sources["cached_tokens_device"], sources["cached_tokens_ssd"])


def ask_each(client, conversations: list[list[dict]], salts: list[str], at_once: int) -> list[Served]:
    """:func:`ask` for each conversation in its salt's namespace, ``at_once`` requests in flight."""
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        return list(pool.map(lambda pair: ask(client, *pair), zip(conversations, salts)))


def difference(got: Served, want: Served) -> str:
    """Where two answers part (for assertion messages)."""
    for at, (a, b) in enumerate(zip(got.tokens, want.tokens)):
        if a != b:
            return f"token {at}: {a} != {b}"
    return f"{got.content!r} ({got.finish}) != {want.content!r} ({want.finish})"
