"""The JSON-object prefix checker that guards streamed tool arguments."""

from __future__ import annotations

import json

import jiter
from hypothesis import given, settings, strategies as st

from kvgate.adapters.anthropic.jsonprefix import JsonObjectPrefix

scalars = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8)
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
objects = st.dictionaries(st.text(max_size=6), values, max_size=4)
layouts = st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1}, {"ensure_ascii": False}])


@settings(max_examples=150, deadline=None)
@given(objects, layouts)
def test_every_prefix_of_an_object_is_accepted_and_closable(value, layout):
    text = json.dumps(value, **layout)
    for cut in range(len(text) + 1):
        checker = JsonObjectPrefix()
        assert checker.feed(text[:cut]) == cut
        assert isinstance(json.loads(text[:cut] + checker.closing()), dict)
    assert checker.closing() == "" and json.loads(text) == value


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]",:01-.eE+tfrunlsa\\ ', max_size=24))
def test_accepted_text_is_a_valid_prefix_and_closes_to_json(text):
    checker = JsonObjectPrefix()
    accepted = text[:checker.feed(text)]
    completed = accepted + checker.closing()
    assert isinstance(json.loads(completed), dict)
    if accepted.strip():  # (whitespace alone is held back by the stream renderer)
        jiter.from_json(accepted.encode(), partial_mode="trailing-strings")  # the SDK's own parser agrees


def test_rejects_at_the_first_bad_character_and_stays_blocked():
    checker = JsonObjectPrefix()
    assert checker.feed('{"a": 01}') == 7
    assert checker.feed("}") == 0 and checker.blocked
    assert checker.closing() == "}"


def test_non_object_top_level_is_rejected():
    assert JsonObjectPrefix().feed("[1]") == 0
    assert JsonObjectPrefix().feed('  "x"') == 2


def test_closing_of_partial_tokens():
    cases = {'{"a": tr': '{"a": true}', '{"a": 1.': '{"a": 1.0}', '{"a": "x\\': '{"a": "x\\n"}',
             '{"k': '{"k":null}', '{"a": [1,': '{"a": [1,null]}', '{"a": 1,': '{"a": 1,"":null}',
             '{"a": "\\u00': '{"a": "\\u0000"}'}
    for prefix, expected in cases.items():
        checker = JsonObjectPrefix()
        assert checker.feed(prefix) == len(prefix)
        assert prefix + checker.closing() == expected
