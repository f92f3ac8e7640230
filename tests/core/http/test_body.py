"""The shared body reader: JSON shape measured on bytes before parsing, sizes, lone surrogates."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvgate.core.http import json_shape
from kvgate.core.http.body import BodyLimits, PayloadTooLarge, parse_json_object
from kvgate.core.errors import InvalidRequest

TRICKY = st.sampled_from(['a"[{\\', '\\\\"', "x]}", "\\", '\\\\\\"[[[', "plain, text", "\u00e9[", ""])
JSON = st.recursive(st.none() | st.integers() | TRICKY,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TRICKY, inner, max_size=3),
                    max_leaves=30)


def depth_of(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans(), st.sampled_from([3, 7, 1 << 20]))
def test_depth_on_bytes_equals_the_parsed_depth(value, ascii_only, chunk):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode()
    old, json_shape.CHUNK_BYTES = json_shape.CHUNK_BYTES, chunk  # cuts through escapes and strings
    try:
        assert json_shape.max_depth(raw) == depth_of(value)
    finally:
        json_shape.CHUNK_BYTES = old


def test_brackets_and_commas_inside_strings_do_not_count():
    assert json_shape.shape(b'{"a": "[[[[,,,,\\"[[", "b": [1, 2]}') == (2, 4)  # two containers, two commas


def test_too_deep_is_refused_before_parsing():
    limits = BodyLimits(max_depth=8)
    parse_json_object(b'{"a":' + b"[" * 7 + b"]" * 7 + b"}", limits)
    with pytest.raises(InvalidRequest, match="deeper than 8"):
        parse_json_object(b'{"a":' + b"[" * 8 + b"]" * 8 + b"}", limits)
    with pytest.raises(InvalidRequest, match="deeper"):  # far past Python's recursion limit
        parse_json_object(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", BodyLimits())


def test_too_many_items_and_too_many_bytes():
    with pytest.raises(InvalidRequest, match="more than 1000 items"):
        parse_json_object(json.dumps({"a": [0] * 2000}).encode(), BodyLimits(max_items=1000))
    with pytest.raises(PayloadTooLarge) as error:
        parse_json_object(b'{"a": "' + b"x" * 2000 + b'"}', BodyLimits(max_bytes=1000))
    assert error.value.status == 413 and "at most 1000 bytes" in error.value.message


@pytest.mark.parametrize("raw, param", [
    (b'{"model": "\\ud800"}', "model"),
    (b'{"messages": [{"content": "ok \\uDFFF"}]}', "messages[0].content"),
    (b'{"tool_choice": {"name": "x\\udbff"}}', "tool_choice.name"),
])
def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field(raw, param):
    with pytest.raises(InvalidRequest) as error:
        parse_json_object(raw, BodyLimits())
    assert error.value.status == 400 and error.value.param == param


def test_surrogate_pairs_and_escaped_backslashes_are_fine():
    body = parse_json_object(b'{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}', BodyLimits())
    assert body == {"a": "\U0001F600", "b": "\\ud800"}
