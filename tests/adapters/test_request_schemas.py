"""The request schemas the adapters publish in the OpenAPI document stay in step with what the
adapters accept: every body an adapter accepts validates against its schema (checked on the
hostile bodies of :mod:`tests.adapters.fuzz_bodies` and on hand-written ones), and bodies the
schema refuses for a field's type, range or required presence the adapter refuses too.
"""

from __future__ import annotations

from typing import Any, Callable

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings

from kvgate.adapters.anthropic.billing import billing_mode
from kvgate.adapters.anthropic.request import build_chat_request
from kvgate.adapters.anthropic.schema import COUNT_TOKENS_REQUEST, MESSAGES_REQUEST
from kvgate.adapters.openai_chat.request import to_chat_request
from kvgate.adapters.openai_chat.schema import CHAT_REQUEST
from kvgate.adapters.responses.request import parse_create
from kvgate.adapters.responses.schema import RESPONSES_REQUEST
from kvgate.adapters.tokenize.routes import token_list
from kvgate.adapters.tokenize.schema import DETOKENIZE_REQUEST
from kvgate.core.errors import InvalidRequest
from kvgate.core.tenants import cache_salt
from tests.adapters.fuzz_bodies import ANTHROPIC, CHAT, DETOKENIZE, RESPONSES
from tests.adapters.schema_examples import ACCEPTED, REFUSED


def accept_chat(body: dict) -> None:
    to_chat_request(body, "m", has_vision=False)
    cache_salt(body)


def accept_messages(body: dict) -> None:
    model = body.get("model")
    if not (model is None or isinstance(model, str)) or body.get("stream") not in (None, True, False):
        raise InvalidRequest("model or stream")  # the route's own two checks
    build_chat_request(body, "m", {}, billing_mode("off"))
    cache_salt(body)


def accept_responses(body: dict) -> None:
    parse_create(body, model="m", has_vision=False)
    cache_salt(body)


def accept_detokenize(body: dict) -> None:
    token_list(body)
    if not isinstance(body.get("model"), (str, type(None))):
        raise InvalidRequest("model")


ROUTES = {  # name -> (published schema, the adapter's own validation, hostile bodies)
    "chat": (CHAT_REQUEST, accept_chat, CHAT),
    "messages": (MESSAGES_REQUEST, accept_messages, ANTHROPIC),
    "responses": (RESPONSES_REQUEST, accept_responses, RESPONSES),
    "detokenize": (DETOKENIZE_REQUEST, accept_detokenize, DETOKENIZE),
}


def accepted(accept: Callable[[dict], None], body: Any) -> bool:
    try:
        accept(body)
    except InvalidRequest:
        return False
    return True


def schema_valid(schema: dict, body: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(body)


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_every_body_the_adapter_accepts_validates_against_its_schema(name):
    schema, accept, bodies = ROUTES[name]
    jsonschema.Draft202012Validator.check_schema(schema)
    seen = {"accepted": 0}

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(bodies)
    def run(body):
        if accepted(accept, body):
            seen["accepted"] += 1
            errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(body)]
            assert not errors, (body, errors)

    run()
    assert seen["accepted"] >= 20  # the bodies reach acceptance, not only refusals


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_bodies_agents_send_are_accepted_and_validate(name):
    schema, accept, _ = ROUTES[name]
    for body in ACCEPTED[name]:
        assert accepted(accept, body), body
        assert schema_valid(schema, body), body


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bodies_the_schema_refuses_the_adapter_refuses(name):
    schema, accept, _ = ROUTES[name]
    for body in REFUSED[name]:
        assert not schema_valid(schema, body), body
        assert not accepted(accept, body), body


def test_count_tokens_reads_the_messages_body_less_stream():
    assert set(MESSAGES_REQUEST["properties"]) - set(COUNT_TOKENS_REQUEST["properties"]) == {"stream"}


def test_a_fallback_field_is_checked_only_where_the_preferred_one_is_not_given():
    base = {"messages": [{"role": "user", "content": "hi"}]}
    for preferred, fallback in [({"max_completion_tokens": 2}, {"max_tokens": 0}),
                                ({"chat_template_kwargs": {"enable_thinking": True}}, {"reasoning_effort": 5}),
                                ({"prompt_cache_key": "k"}, {"user": 5})]:
        assert accepted(accept_chat, {**base, **preferred, **fallback})
        assert schema_valid(CHAT_REQUEST, {**base, **preferred, **fallback})
        assert not accepted(accept_chat, {**base, **fallback})
        assert not schema_valid(CHAT_REQUEST, {**base, **fallback})
