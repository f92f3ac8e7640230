"""Prompts, tools and judging for bench_fence.py.

``canonical`` counts outputs whose tokens are what the tokenizer makes of their text (the next
turn's prompt then extends the cached prefix without a fork)."""

from __future__ import annotations

import random

from bench.fence_check import check_calls, check_json
from kvgate.core.types import ChatRequest, Message, ResponseFormat, SamplingParams, Tool, ToolChoice
from kvgate.dialects.chatml_json import ChatmlJson
from kvgate.dialects.deepseek_dsml import DeepseekDsml
from kvgate.dialects.deepseek_v31 import DeepseekV31
from kvgate.dialects.gemma4 import Gemma4
from kvgate.dialects.glm_xml import GlmXml
from kvgate.dialects.harmony import Harmony
from kvgate.dialects.kimi_k2 import KimiK2
from kvgate.dialects.minimax_m2 import MinimaxM2
from kvgate.dialects.qwen3_coder_xml import Qwen3CoderXml

DIALECTS = {"chatml_json": ChatmlJson(), "glm_xml": GlmXml("glm47"), "deepseek_dsml": DeepseekDsml("v32"),
            "qwen3_coder_xml": Qwen3CoderXml(), "deepseek_v31": DeepseekV31("v31"),
            "deepseek_r1": DeepseekV31("r1"), "kimi_k2": KimiK2("instruct"), "harmony": Harmony(),
            "gemma4": Gemma4(), "minimax_m2": MinimaxM2()}
# SmolLM2 spells DSML's fullwidth bars as three byte tokens each: its shortest calls take 92-157
# tokens (GLM XML 35-80, ChatML JSON 29-45), so each dialect gets room for its longest call; the
# DeepSeek V3.1 / R1 markers are 12-15 tokens each on SmolLM2 (a short call 85 / 92), Kimi's 9-11
# (68), Qwen3-Coder's call 47; the send_email call takes 81 tokens in harmony (50 for get_weather, plus any
# analysis the fence lets it write first), 98 in Gemma 4, 108 in MiniMax M2
MAX_TOKENS = {"chatml_json": 96, "glm_xml": 128, "deepseek_dsml": 192, "qwen3_coder_xml": 160,
              "deepseek_v31": 224, "deepseek_r1": 240, "kimi_k2": 192, "harmony": 224, "gemma4": 160,
              "minimax_m2": 192}
MODES = ("auto", "required", "named", "json_schema", "json_object")
JSON_MODES = ("json_schema", "json_object")
CITIES = ["Paris", "Rome", "Tokyo", "Lima", "Oslo", "Cairo", "Seoul", "Quito", "Perth", "Dakar"]

TOOLS = {
    "get_weather": Tool("get_weather", "Weather forecast for a city", {
        "type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "days"], "additionalProperties": False}),
    "convert_units": Tool("convert_units", "Convert a quantity between units", {
        "type": "object", "properties": {
            "value": {"type": "number"}, "from_unit": {"type": "string"}, "to_unit": {"type": "string"}},
        "required": ["value", "from_unit", "to_unit"], "additionalProperties": False}),
    "search_web": Tool("search_web", "Search the web", {
        "type": "object", "properties": {
            "query": {"type": "string", "maxLength": 200}, "max_results": {"type": "integer", "minimum": 1}},
        "required": ["query"], "additionalProperties": False}),
    "send_email": Tool("send_email", "Send an email", {
        "type": "object", "properties": {
            "to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "subject": {"type": "string"}, "body": {"type": "string"}, "urgent": {"type": "boolean"}},
        "required": ["to", "subject", "body"], "additionalProperties": False}),
}

PROMPTS = {
    "get_weather": ["What's the weather in {city} for the next {n} days?", "Will it rain in {city} this week?",
                    "Forecast for {city}, {n} days, in fahrenheit please."],
    "convert_units": ["Convert {n} miles to kilometers.", "How many pounds is {n} kg?",
                      "What is {n} degrees celsius in fahrenheit?"],
    "search_web": ["Search the web for the history of {city}.", "Find news about {city} today.",
                   "Look up the population of {city}."],
    "send_email": ["Email bob@example.com that I arrive in {city} on day {n}.",
                   "Send a mail to ana@example.org with subject 'trip' about {city}."],
}

ANSWER_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string"}, "temperature": {"type": "number"},
    "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rainy", "snowy"]}},
    "required": ["city", "temperature", "conditions"], "additionalProperties": False}


def build_requests(dialect: str, mode: str, count: int, rng: random.Random) -> list[ChatRequest]:
    """``count`` requests; even ones greedy, odd ones sampled at 0.7. Each target tool comes with two
    others in a fixed order, so requests of a target share their prompt up to the question."""
    out = []
    names = sorted(TOOLS)
    for index in range(count):
        target = names[index % len(names)]
        text = rng.choice(PROMPTS[target]).format(city=rng.choice(CITIES), n=rng.randint(1, 9))
        greedy = SamplingParams(temperature=0.0 if index % 2 == 0 else 0.7, seed=index)
        if mode in JSON_MODES:
            ask = f"Describe the weather in {rng.choice(CITIES)} as JSON with city, temperature and conditions."
            fmt = (ResponseFormat("json_schema", ANSWER_SCHEMA, "weather", True) if mode == "json_schema"
                   else ResponseFormat("json_object"))
            out.append(ChatRequest(model="smollm2", messages=[Message("user", ask)], sampling=greedy,
                                   response_format=fmt))
            continue
        others = [n for n in names if n != target]
        picked = sorted([target] + others[index % 3:][:2] + others[:max(0, 2 - len(others[index % 3:]))])
        tools = [TOOLS[n] for n in picked]
        choice = ToolChoice("named", target) if mode == "named" else ToolChoice(mode)
        out.append(ChatRequest(model="smollm2", messages=[Message("user", text)], tools=tools,
                               tool_choice=choice, sampling=greedy, parallel_tool_calls=False))
    return out


def judge(dialect: str, mode: str, requests: list[ChatRequest], outputs: list[tuple[list[int], str]],
          runtime) -> dict:
    """Counts of valid outputs (see the bench docstring)."""
    valid = attempted = text_only = cut = canonical = 0
    examples: list[str] = []
    for request, (tokens, reason) in zip(requests, outputs):
        text = runtime.tokenizer.decode(tokens, skip_special_tokens=False)
        canonical += list(runtime.tokenizer.encode(text, add_special_tokens=False).ids) == tokens
        if mode in JSON_MODES:
            schema = request.response_format.schema if mode == "json_schema" else {"type": "object"}
            answer = check_calls(DIALECTS[dialect], [], text).text  # what a client gets (harmony: the final channel)
            verdict = check_json(answer, schema)
            must = True
        else:
            verdict = check_calls(DIALECTS[dialect], request.tools, text)
            if mode == "named" and verdict.ok:
                wanted = request.tool_choice.name
                if not verdict.calls or any(name != wanted for name, _ in verdict.calls):
                    verdict.problems.append("wrong tool")
            if mode != "auto" and verdict.ok and not verdict.calls:
                verdict.problems.append("no call")
            must = mode != "auto" or bool(verdict.calls) or DIALECTS[dialect].trigger in text
        if not must:
            text_only += 1
            continue
        attempted += 1
        cut += reason == "length"
        if verdict.ok:
            valid += 1
        elif len(examples) < 2:
            examples.append(f"{verdict.problems[:2]} :: {text[-160:]!r}")
    share = valid / attempted if attempted else None
    return {"outputs": len(outputs), "must_hold": attempted, "valid": valid, "valid_share": share,
            "plain_text": text_only, "cut_by_length": cut, "canonical": canonical, "bad_examples": examples}
