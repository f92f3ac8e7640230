"""The ``x-kvgate-tool-choice`` request hint: which requests it forces, and to what."""

from __future__ import annotations

from kvgate.core.http.request_hints import apply_hints
from kvgate.core.types import ChatRequest, Message, Tool, ToolCall, ToolChoice

TOOLS = [Tool("Read"), Tool("list_agents", namespace="collaboration")]
HINT = "x-kvgate-tool-choice"


def request(*messages: Message, tools=TOOLS) -> ChatRequest:
    return ChatRequest(model="m", messages=list(messages), tools=list(tools))


def test_a_named_tool_is_forced_in_answer_to_a_user():
    forced = apply_hints(request(Message("system", "s"), Message("user", "read it")), {HINT: "Read"})
    assert forced.tool_choice == ToolChoice("named", "Read")


def test_required_and_a_namespaced_tool_by_its_qualified_name():
    assert apply_hints(request(Message("user", "x")), {HINT: "required"}).tool_choice == ToolChoice("required")
    named = apply_hints(request(Message("user", "x")), {HINT: "collaboration__list_agents"})
    assert named.tool_choice == ToolChoice("named", "collaboration__list_agents")


def test_the_request_carrying_the_tool_result_is_left_free():
    call = Message("assistant", tool_calls=[ToolCall("c1", "Read", "{}")])
    follow_up = request(Message("user", "read it"), call, Message("tool", "text", tool_call_id="c1"),
                        Message("user", "<system-reminder>"))
    assert apply_hints(follow_up, {HINT: "Read"}).tool_choice == ToolChoice()
    # a new user turn after the plain answer is forced again
    later = request(*follow_up.messages, Message("assistant", "done"), Message("user", "again"))
    assert apply_hints(later, {HINT: "Read"}).tool_choice == ToolChoice("named", "Read")


def test_unknown_tools_no_tools_and_no_header_leave_the_request_unchanged():
    assert apply_hints(request(Message("user", "x")), {HINT: "Write"}).tool_choice == ToolChoice()
    assert apply_hints(request(Message("user", "x"), tools=[]), {HINT: "required"}).tool_choice == ToolChoice()
    assert apply_hints(request(Message("user", "x")), {}).tool_choice == ToolChoice()
