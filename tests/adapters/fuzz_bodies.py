"""Hypothesis strategies for request-shaped JSON bodies of every POST route.

Each body starts valid (built from the route's own fields, so it reaches rendering, tokenizing
and generation) and then has up to three of its fields, or of its messages' and tools' fields,
replaced by a hostile value: a wrong type, NaN, an infinity, a huge number, a lone surrogate,
special-token text, odd or nested structure. ``max_tokens``-like fields only ever hold tiny or
invalid values, so generations stay short. Tool schemas are plain JSON-Schema shapes: schema
compilation budgets are fuzzed by their own tests.
"""

from __future__ import annotations

from hypothesis import strategies as st

SAFE = st.sampled_from(["hi", "Say one word.", "é漢🙂", "a\nb", "x" * 200, "{\"a\": 1}", "\\"])
HOSTILE_TEXT = st.sampled_from(["", "\ud800", "\udfff tail", "<|endoftext|>", "<tool_call>", "</think>",
                                "<|im_end|>", "null", "\x00"])
TEXTS = SAFE | HOSTILE_TEXT
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | TEXTS
           | st.floats(allow_nan=True, allow_infinity=True))
HOSTILE = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
                       max_leaves=10)
TINY = st.sampled_from([1, 2, 3])
HOSTILE_TINY = st.sampled_from([0, -1, 1.5, "2", None, True, float("nan"), float("inf"), [], {}])
LIMIT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")  # never a large valid number
SCHEMA = st.sampled_from([{"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                          {"type": "object"}, {"type": "object", "properties": {"n": {"type": "integer"}}}])
NAME = st.sampled_from(["get_weather", "mcp__srv__tool", "lookup"])
UNIT = st.floats(0, 1)


@st.composite
def mutated(draw, valid: st.SearchStrategy, nested: tuple[str, ...] = ()) -> dict:
    """``valid``'s body with up to three fields (top-level, or inside the lists named by
    ``nested``) given hostile values."""
    body = draw(valid)
    for _ in range(draw(st.integers(0, 3))):
        target = body
        inner = [key for key in nested if isinstance(body.get(key), list) and body[key]]
        if inner and draw(st.booleans()):
            items = body[draw(st.sampled_from(inner))]
            target = items[draw(st.integers(0, len(items) - 1))]
            if not isinstance(target, dict):
                continue
        key = draw(st.sampled_from(sorted(target) + ["model", "stream", "tools", "tool_choice", "content"]))
        target[key] = draw(HOSTILE_TINY if key in LIMIT_KEYS else HOSTILE | HOSTILE_TEXT)
    return body


def fields(required: dict, optional: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(required, optional=optional)


CHAT_MESSAGES = st.lists(fields({"role": st.just("user"), "content": SAFE}, {}), min_size=1, max_size=2)
CHAT_TOOL = fields({"type": st.just("function"), "function": fields({"name": NAME}, {"parameters": SCHEMA,
                                                                                      "description": SAFE})}, {})
CHAT = mutated(fields({"messages": CHAT_MESSAGES}, {
    "model": st.just("smollm2"), "tools": st.lists(CHAT_TOOL, max_size=2, unique_by=lambda t: t["function"]["name"]),
    "tool_choice": st.sampled_from(["auto", "none"]), "max_tokens": TINY, "max_completion_tokens": TINY,
    "stream": st.booleans(), "temperature": st.floats(0, 2), "top_p": UNIT, "min_p": UNIT, "seed": st.integers(0, 99),
    "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2), "top_k": st.integers(0, 50),
    "stop": st.lists(SAFE, max_size=2), "response_format": st.just({"type": "text"}), "user": SAFE,
    "stream_options": st.just({"include_usage": True}), "reasoning_effort": st.sampled_from(["none", "low"])}),
    nested=("messages", "tools"))
ANTHROPIC_TOOL = fields({"name": NAME, "input_schema": SCHEMA}, {"description": SAFE})
ANTHROPIC = mutated(fields({"messages": st.lists(fields({"role": st.just("user"), "content": SAFE}, {}),
                                                 min_size=1, max_size=1)}, {
    "model": st.just("smollm2"), "max_tokens": TINY, "system": SAFE, "stream": st.booleans(),
    "tools": st.lists(ANTHROPIC_TOOL, max_size=2, unique_by=lambda t: t["name"]),
    "tool_choice": st.just({"type": "auto"}), "temperature": UNIT, "top_p": UNIT, "top_k": st.integers(0, 50),
    "stop_sequences": st.lists(st.just("END"), max_size=1), "thinking": st.just({"type": "disabled"}),
    "metadata": st.just({"user_id": "u1"})}), nested=("messages", "tools"))
RESPONSES_TOOL = fields({"type": st.just("function"), "name": NAME}, {"parameters": SCHEMA, "description": SAFE})
RESPONSES_INPUT = SAFE | st.lists(fields({"role": st.just("user"), "content": SAFE}, {"type": st.just("message")}),
                                  min_size=1, max_size=2)
RESPONSES = mutated(fields({"input": RESPONSES_INPUT}, {
    "model": st.just("smollm2"), "instructions": SAFE, "max_output_tokens": TINY, "stream": st.booleans(),
    "store": st.booleans(), "tools": st.lists(RESPONSES_TOOL, max_size=2, unique_by=lambda t: t["name"]),
    "tool_choice": st.sampled_from(["auto", "none"]), "temperature": st.floats(0, 2), "top_p": UNIT,
    "text": st.just({"format": {"type": "text"}}), "reasoning": st.just({"effort": "none"}),
    "include": st.just([]), "prompt_cache_key": SAFE, "user": SAFE, "truncation": st.sampled_from(["auto", "disabled"]),
    "parallel_tool_calls": st.booleans()}), nested=("input", "tools"))
TOKENIZE = mutated(st.one_of(fields({"prompt": SAFE}, {"return_token_strs": st.booleans(),
                                                       "model": st.just("smollm2")}),
                             fields({"messages": CHAT_MESSAGES}, {"add_generation_prompt": st.booleans(),
                                                                  "tools": st.lists(CHAT_TOOL, max_size=1)})),
                   nested=("messages",))
DETOKENIZE = mutated(fields({"tokens": st.lists(st.integers(0, 49_000), max_size=5)}, {"model": st.just("smollm2")}),
                     nested=("tokens",))

ROUTE_BODIES = {  # every POST route of the app, by path
    "/v1/chat/completions": CHAT, "/v1/messages": ANTHROPIC, "/v1/messages/count_tokens": ANTHROPIC,
    "/v1/responses": RESPONSES, "/v1/responses/input_tokens": RESPONSES, "/v1/responses/compact": RESPONSES,
    "/v1/tokenize": TOKENIZE,
    "/v1/detokenize": DETOKENIZE,
}
