"""Mid-conversation system messages: rendered in place where the template allows it (so the prompt
before them is unchanged), folded into the leading system turn where it refuses."""

from __future__ import annotations

from kvgate.plugins.jinja_chat_format import JinjaChatFormat, fold_late_system
from kvgate.core.types import ChatRequest, Message, Tool
from kvgate.dialects.chatml_json import ChatmlJson

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# a template in the style of those that allow one leading system message only
FIRST_ONLY = ("{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
              "{{ raise_exception('System role only at the start') }}{% endif %}"
              "[{{ m.role }}] {{ m.content }}\n{% endfor %}")
TOOL = Tool(name="read", description="Read a file", parameters={"type": "object", "properties": {"path": {"type": "string"}}})


def conversation(*late: str) -> list[Message]:
    turns = [Message(role="system", content="Be brief."), Message(role="user", content="hi"),
             Message(role="assistant", content="Hello.")]
    return turns + [Message(role="system", content=text) for text in late] + [Message(role="user", content="go on")]


def render(template: str, messages: list[Message], generation: bool = True) -> str:
    return JinjaChatFormat(template, ChatmlJson(), {}).render(ChatRequest("m", messages, tools=[TOOL]), generation)


def test_in_place_keeps_the_previous_turn_as_a_prefix():
    previous = render(CHATML, conversation()[:3], generation=False)
    current = render(CHATML, conversation("Reminder."))
    assert current.startswith(previous)
    assert current[len(previous):] == ("<|im_start|>system\nReminder.<|im_end|>\n"
                                       "<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")


def test_a_template_that_refuses_gets_them_folded():
    text = render(FIRST_ONLY, conversation("Reminder.", "Second."))
    assert text.count("[system]") == 1
    head = text.split("\n[user]")[0]
    assert head.startswith("[system] Be brief.\n\nReminder.\n\nSecond.") and '"name": "read"' in head
    assert text.endswith("[user] hi\n[assistant] Hello.\n[user] go on\n")


def test_fold_creates_a_leading_system_turn_when_there_is_none():
    folded = fold_late_system([Message(role="user", content="a"), Message(role="system", content="b")])
    assert [(m.role, m.content) for m in folded] == [("system", "b"), ("user", "a")]
