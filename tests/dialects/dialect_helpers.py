"""Shared helpers for the dialect tests: feeding parsers, merging events, rebuilding messages."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from kvgate.core.types import (Message, ParseIssue, ReasoningDelta, TextDelta, Tool, ToolCall,
                               ToolCallArgsDelta, ToolCallEnd, ToolCallStart)

WEATHER = Tool("get_weather", "Get the weather", {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"},
    "flag": {"type": "boolean"}, "zip": {"type": "string"}, "tags": {"type": "array"}}})
SEARCH = Tool("search", "Search ü", {"type": "object", "properties": {"q": {"type": "string"}}},
              namespace="web")
TOOLS = [WEATHER, SEARCH]


def call_id(index: int, name: str) -> str:
    return f"call_{index}_{name}"


def merge(events) -> list:
    """Join consecutive deltas of the same kind (and call index)."""
    out = []
    for event in events:
        last = out[-1] if out else None
        same = type(last) is type(event) and isinstance(event, (TextDelta, ReasoningDelta, ToolCallArgsDelta))
        if same and getattr(last, "index", None) == getattr(event, "index", None):
            out[-1] = type(event)(**{**_fields(last), "text": last.text + event.text})
        else:
            out.append(event)
    return out


def _fields(event) -> dict:
    return {a.name: getattr(event, a.name) for a in type(event).__attrs_attrs__}


def feed(parser, pieces) -> list:
    events = []
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def split_at(text: str, cuts) -> list[str]:
    cuts = sorted(set(c for c in cuts if 0 < c < len(text)))
    bounds = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def rebuild(events) -> Message:
    """The assistant message the events describe (what an adapter would store)."""
    message = Message(role="assistant")
    starts = {}
    for event in events:
        if isinstance(event, TextDelta):
            message.content += event.text
        elif isinstance(event, ReasoningDelta):
            message.reasoning = (message.reasoning or "") + event.text
        elif isinstance(event, ToolCallStart):
            starts[event.index] = event
        elif isinstance(event, ToolCallEnd):
            start = starts[event.index]
            message.tool_calls.append(ToolCall(start.id, start.name, event.arguments, start.namespace))
    return message


def issues(events) -> list[ParseIssue]:
    return [e for e in events if isinstance(e, ParseIssue)]


def check_streaming(make_parser, text: str, cuts_list, expected_content: str) -> list:
    """Whole-text events; every split must give the same merged events and never leak tag text."""
    whole = merge(feed(make_parser(), [text]))
    for cuts in cuts_list:
        events = []
        parser = make_parser()
        for piece in split_at(text, cuts):
            events += parser.feed(piece)
            shown = "".join(e.text for e in events if isinstance(e, TextDelta))
            assert expected_content.startswith(shown), (shown, expected_content)
        events += parser.finish()
        assert merge(events) == whole, (cuts, text)
    return whole


FORBIDDEN = ["<tool_call>", "<think>", "</think>", "<arg_key>", "<arg_value>", "</arg_value>",
             "</arg_key>", "</tool_call>", "｜DSML｜", "<｜end▁of▁sentence｜>"]
ALPHABET = st.sampled_from(list("ab <>/\"'\\{}[]:,\n\t2tü日😀&;|｜_-") + ["<tool", "<think", "</", "&lt;",
                                                                       "｜DSML｜parameter", "true", "12"])


def clean(text: str) -> bool:
    return not any(bad in text for bad in FORBIDDEN)


texts = st.lists(ALPHABET, max_size=12).map("".join).filter(clean)
json_scalars = st.one_of(st.integers(-10**6, 10**6), st.booleans(), st.none(), texts,
                         st.floats(allow_nan=False, allow_infinity=False, width=32))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "ü", "x y"]), inner, max_size=3)),
    max_leaves=6)


@st.composite
def weather_args(draw) -> dict:
    """Arguments that respect the schema (GLM types values by it), in a random key order."""
    values = {"city": draw(texts), "days": draw(st.integers(-99, 10**9)), "opts": draw(st.dictionaries(
        st.sampled_from(["unit", "ü"]), json_values, max_size=2)), "flag": draw(st.booleans()),
        "zip": draw(st.sampled_from(["03106", "2", "true", "null", "123_456", " x "])),
        "tags": draw(st.lists(json_values, max_size=2))}
    keys = draw(st.lists(st.sampled_from(sorted(values)), unique=True, max_size=6))
    return {k: values[k] for k in keys}


@st.composite
def calls(draw) -> list[ToolCall]:
    out = []
    for i in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            args = weather_args_dumps(draw(weather_args()))
            out.append(ToolCall(f"c{i}", "get_weather", args))
        else:
            out.append(ToolCall(f"c{i}", "search", json.dumps({"q": draw(texts)}, ensure_ascii=False), "web"))
    return out


def weather_args_dumps(args: dict) -> str:
    return json.dumps(args, ensure_ascii=False)


# ---- outcomes of a whole output (the peer-case tests compare these with the peers' expectations)

def every_split(make_parser, text: str, content: str) -> list:
    """Merged events of ``text`` fed whole; fed in two pieces split at every position, the same."""
    return check_streaming(make_parser, text, [[i] for i in range(1, len(text))], content)


def outcome(events) -> dict:
    """What a client gets: content, completed calls (name, decoded arguments), calls started and
    never ended (names), issue messages. Every ended call's arguments must be a JSON object."""
    starts = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    for end in ends:
        assert isinstance(json.loads(end.arguments), dict), end
    ended = {e.index for e in ends}
    return {"content": "".join(e.text for e in events if isinstance(e, TextDelta)),
            "calls": [(starts[e.index], json.loads(e.arguments)) for e in ends],
            "unfinished": [name for index, name in sorted(starts.items()) if index not in ended],
            "issues": [i.message for i in issues(events)]}
