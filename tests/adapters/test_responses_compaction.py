"""Compaction without a model: the summary request built from a create body, and the ``compaction``
item's round trip through ``input`` (the served model's part is in test_responses_compliance)."""

from __future__ import annotations

import pytest

from kvgate.adapters.responses.compaction import SUMMARY_PROMPT, kept_user_items, summary_request
from kvgate.adapters.responses.compaction_item import SUMMARY_HEADING, compaction_item
from kvgate.adapters.responses.request import parse_create
from kvgate.core.errors import InvalidRequest

SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def parse(body):
    return parse_create(body, model="smollm2", has_vision=False)


def test_the_summary_request_is_the_conversation_plus_the_prompt_as_free_text():
    call = parse({"instructions": "rules", "tools": [TOOL], "tool_choice": "required", "input": "hello",
                  "text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}})
    chat = summary_request(call, default_max_tokens=300)
    assert [(m.role, m.content) for m in chat.messages] == [("system", "rules"), ("user", "hello"),
                                                           ("user", SUMMARY_PROMPT)]
    assert [t.name for t in chat.tools] == ["f"] and chat.tool_choice.mode == "none"
    assert chat.response_format.type == "text" and chat.sampling.max_tokens == 300
    assert summary_request(parse({"input": "x", "max_output_tokens": 9}), 300).sampling.max_tokens == 9
    assert len(call.chat.messages) == 2 and call.chat.tool_choice.mode == "required"  # the call is not changed


def test_a_compaction_item_reads_back_as_its_summary_and_is_not_kept_again():
    item = compaction_item("cmp_1", "Ada fixes parser.py.")
    call = parse({"input": [{"role": "user", "content": "first"}, item, {"role": "user", "content": "next"}]})
    assert [m.content for m in call.chat.messages] == ["first", SUMMARY_HEADING + "Ada fixes parser.py.", "next"]
    assert [i["content"][0]["text"] for i in kept_user_items(call)] == ["first", "next"]


@pytest.mark.parametrize("opaque", ["gAAAA-from-elsewhere", "kvgate-compaction:%%%", None])
def test_a_compaction_item_this_server_did_not_write_is_a_400(opaque):
    with pytest.raises(InvalidRequest) as error:
        parse({"input": [{"type": "compaction", "encrypted_content": opaque}]})
    assert error.value.param == "input[0].encrypted_content"
