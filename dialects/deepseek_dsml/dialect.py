"""DeepSeek DSML tool dialect: V3.2 (``v32``, ``function_calls`` block), V4 (``v4``, ``tool_calls``)
and V4.1 (``v41``, "spaced DSML", ``calls``).

Wire format (byte-exact; ``D`` is ``'｜DSML｜'`` (fullwidth bars) for v32 and v4 and ``'｜DSML｜ '``
(one space after the bar) for v41; BLOCK is ``function_calls`` for v32, ``tool_calls`` for v4 and
``calls`` for v41):

* An assistant turn is ``THINK + content + CALLS + '<｜end▁of▁sentence｜>'`` where
  CALLS = ``'\\n\\n<' + D + BLOCK + '>\\n' + '\\n'.join(INVOKES) + '\\n</' + D + BLOCK + '>'``
  (empty without calls), INVOKE = ``'<' + D + 'invoke name="' + NAME + '">\\n' + '\\n'.join(PARAMS)
  + '\\n</' + D + 'invoke>'`` and PARAM = ``'<' + D + 'parameter name="' + KEY + '" string="' +
  ('true' | 'false') + '">' + VALUE + '</' + D + 'parameter>'``. String values are written raw
  (``string="true"``); every other value is the raw JSON text the model generated. THINK is
  ``reasoning + '</think>'`` in thinking mode for turns after the last user message.
* v4 only: inside a string value ``</｜DSML｜parameter>`` is written ``&lt;/｜DSML｜parameter>`` (and
  text already spelled ``&(amp;)*lt;/｜DSML｜parameter>`` gains one ``amp;``, so reading inverts
  writing). v32 has no escaping: such a value cannot be represented.
* v41 (DeepSeek-V4.1-Flash, 2026-09-10; its ``encoding/encoding.py`` as described by
  smg-project/smg#2525 and its test ``crates/tool_parser/tests/tool_parser_deepseek_v41.rs``, and
  ai-dynamo/frontend-crates#252): the V4 layout with every tag spelled with the space, e.g.
  ``'\\n\\n<｜DSML｜ calls>\\n<｜DSML｜ invoke name="f">\\n<｜DSML｜ parameter name="k" string="true">v'
  '</｜DSML｜ parameter>\\n</｜DSML｜ invoke>\\n</｜DSML｜ calls>'``; arguments read back as Python
  ``json.dumps`` text. No escaping rule for V4.1 is documented in those sources, so none is applied
  (as v32). Its prompt encoder is not reproduced here: v41 names no chat format.
* Tool definitions, user turns and tool results belong to the whole prompt: see
  :mod:`kvgate.dialects.deepseek_dsml.chat_format` (chat formats ``deepseek_v32`` / ``deepseek_v4``).

Parsing: text before the block is content (the ``'\\n\\n'`` before it is syntax; one or no newline
is read too), ``<think>``/``</think>`` delimit reasoning, whitespace between tags is lenient, the
end-of-sentence token is swallowed. Arguments are rebuilt as ``{"k": value, ...}`` (default JSON
separators), string values streamed as they arrive. Duplicate parameters, an unknown tool, a
``string="false"`` value that is not JSON and an unclosed block give ParseIssues; an invoke that is
malformed or unclosed gives one and no ``ToolCallEnd`` (``kvgate.core.dialect.StreamParser``).
Values are typed by the parameter's schema, which wins over the flag when the text reads as the
schema's type: ``string="true"`` ``42`` for an integer is ``42``, ``string="false"`` ``20240116``
for a string is ``"20240116"`` (:mod:`kvgate.dialects._typing`). Variants read and reported: those
two, a JSON object as the invoke's body (no parameter tags) is the arguments, and one undeclared
parameter ``arguments`` / ``input`` holding an object is the arguments (as vLLM reads them). The
peers' cases are in tests/dialects/test_peer_cases_deepseek_dsml.py; kvgate agrees with vLLM on
each, and reports the variants it read. A variant read renders back canonically.

Leaked spellings (tolerant reading; seen from models served without a DSML parser: NousResearch/
hermes-agent#15453, OpenHands/software-agent-sdk#4845, local-inference-lab/vllm#417, AgentFlocks/
flocks#687): a marker written with ASCII ``|`` bars or doubled bars, one space after ``<`` / ``</``
and on either side of ``DSML``, spaces before the name, or another DeepSeek block name
(``function_calls`` / ``tool_calls`` / ``calls``) is read as this variant's marker (``MARKER``),
and an invoke written without its block is read as a call; each is reported as a ParseIssue and
none reaches the content. A leaked spelling is rewritten wherever it appears: inside a string value
it is read as the marker, inside reasoning it stays reasoning text, spelled canonically. The
rewrites are reported at the end of the output (one issue per spelling), so that every split of the
output reports them alike; ``TextDelta.at`` still points into what the model wrote.

Fence grammar: ``auto`` lets text run until ``'\n\n<' + D + BLOCK + '>\n'``; then one or more
INVOKEs of the request's tools, their PARAMs in any order, each at most once, every required one
before the invoke closes. Neither text nor a string value contains the start of a marker, canonical
or leaked (``LEAK_STARTS``: ``'<'``, ``'/'``?, a space?, the bar(s), a space?, ``DSML``); any other
value is compact JSON valid against the parameter's schema (its strings without those either); a
parameter without a declared type may take either flag.

Serves: architectures named ``deepseek*``. Variant: ``v41`` for a V4.1 architecture (``v41``,
``v4_1``, ``v4.1`` in its name), ``v4`` for a V4 one, else ``v32``.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from typing import Any, Optional

import attrs

from kvgate.core.dialect import ARCHITECTURE_MATCH, CallIdFactory, Dialect
from kvgate.core.fence.compose import any_tool, compose, literal, tag_value, with_reasoning
from kvgate.core.fence.grammar import AnyOrder, Field, Lit, Node, TextThen, alt, seq
from kvgate.core.fence.plan import FencePlan
from kvgate.core.fence.schema import is_string_schema, properties
from kvgate.core.types import Event, Message, TextDelta, Tool, ToolCall, ToolChoice
from kvgate.dialects._args import history_members, wire_value
from kvgate.dialects._stream import NEED_MORE
from kvgate.dialects._tagcall import THINK_CLOSE, THINK_OPEN, TagCallParser
from kvgate.dialects._typing import json_object
from kvgate.dialects.deepseek_dsml.chat_format import DeepseekChatFormat

VARIANTS = {"v32": "function_calls", "v4": "tool_calls", "v41": "calls"}
DSML = "｜DSML｜"
PREFIXES = {"v32": DSML, "v4": DSML, "v41": DSML + " "}
EOS = "<｜end▁of▁sentence｜>"
TAG_NAMES = ("invoke", "parameter")
# a DSML marker as written, canonical or leaked: '<', '/'?, one space at most, a bar (fullwidth or
# ASCII, maybe doubled), one space at most, DSML, a bar, spaces, then a tag or block name
MARKER = re.compile(
    r"<(/?) ?(?:｜{1,2}|\|{1,2}) ?DSML ?[｜|]{1,2} *(function_calls|tool_calls|calls|invoke|parameter)")
MARKER_START = re.compile(r"</? ?(?:(?:｜{1,2}|\|{1,2}) ?(?:D(?:S(?:M(?:L ?(?:[｜|]{1,2} *[a-z_]*)?)?)?)?)?)?")
# what every marker spelling begins with: text and values exclude these (the fence grammar)
LEAK_STARTS = tuple("<" + slash + space + bar + gap + "DSML" for slash in ("", "/") for space in ("", " ")
                    for bar in ("｜", "|", "｜｜", "||") for gap in ("", " "))
PARAM_CLOSE = f"</{DSML}parameter>"
PARAM_HEAD = re.compile(r'^(.*)" string="(true|false)$', re.DOTALL)
ESCAPED_CLOSE = "lt;/" + PARAM_CLOSE[2:]
ESCAPE = re.compile(r"&((?:amp;)*)" + re.escape(ESCAPED_CLOSE))


def escape_value(text: str) -> str:
    """V4: a closing parameter tag inside a string value is written ``&lt;/｜DSML｜parameter>``;
    text that already reads like that escape gains one ``amp;`` so the mapping stays invertible."""
    bumped = ESCAPE.sub(lambda m: "&amp;" + m.group(1) + ESCAPED_CLOSE, text)
    return bumped.replace(PARAM_CLOSE, "&" + ESCAPED_CLOSE)


def unescape_value(text: str) -> str:
    return ESCAPE.sub(lambda m: ("&" + m.group(1)[4:] + ESCAPED_CLOSE) if m.group(1) else PARAM_CLOSE, text)


class DeepseekDsml(Dialect):
    name = "deepseek_dsml"

    def __init__(self, variant: str = "v32"):
        if variant not in VARIANTS:
            raise ValueError(f"deepseek_dsml variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.block = VARIANTS[variant]
        self.prefix = PREFIXES[variant]

    @classmethod
    def serves(cls, architecture: str, chat_template: str) -> int:
        return ARCHITECTURE_MATCH if "deepseek" in architecture.lower() else 0

    @classmethod
    def variant_for(cls, architecture: str, chat_template: str) -> str:
        lowered = architecture.lower()
        if any(tag in lowered for tag in ("v41", "v4_1", "v4.1")):
            return "v41"
        return "v4" if "v4" in lowered else ""

    def chat_format_without_template(self) -> str:
        # V3.2 and V4 ship their prompt encoding as Python; V4.1's is not reproduced (module docstring)
        return "" if self.variant == "v41" else "deepseek_" + self.variant

    @property
    def literals(self) -> dict[str, str]:
        d, block = self.prefix, self.block
        return {
            "trigger": f"<{d}{block}>", "block_open": f"\n\n<{d}{block}>\n",
            "block_close": f"</{d}{block}>", "invoke_open": f'<{d}invoke name="',
            "invoke_head_close": '">\n', "invoke_close": f"</{d}invoke>",
            "param_open": f'<{d}parameter name="', "param_string_true": '" string="true">',
            "param_string_false": '" string="false">', "param_close": f"</{d}parameter>",
            "think_open": "<think>", "think_close": "</think>", "eos": EOS, "dsml": DSML,
        }

    def render_param(self, key: str, raw: str) -> str:
        is_string, value = wire_value(raw)
        if is_string and self.variant == "v4":
            value = escape_value(value)
        flag = "true" if is_string else "false"
        return f'<{self.prefix}parameter name="{key}" string="{flag}">{value}</{self.prefix}parameter>'

    def render_tool_call(self, name: str, arguments: str) -> str:
        params = [self.render_param(k, raw) for k, raw in history_members(arguments, f"tool call {name!r}")]
        return f'<{self.prefix}invoke name="{name}">\n' + "\n".join(params) + f"\n</{self.prefix}invoke>"

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        invokes = "\n".join(self.render_tool_call(qualified(c), c.arguments) for c in calls)
        return f"\n\n<{self.prefix}{self.block}>\n" + invokes + f"\n</{self.prefix}{self.block}>"

    def assistant_body(self, message: Message, with_reasoning: bool) -> str:
        """What the model generated for this turn, end-of-sentence token included."""
        think = (message.reasoning or "") + "</think>" if with_reasoning else ""
        return think + message.content + self.render_calls(message.tool_calls) + EOS

    def render_messages(self, messages: list[Message], tools: list[Tool], tool_choice: ToolChoice,
                        *, thinking: Optional[bool] = None) -> list[dict[str, Any]]:
        """Per-message text of the chat format as role/content dicts (see chat_format)."""
        return DeepseekChatFormat(self).message_texts(messages, tools, bool(thinking))

    def new_parser(self, tools: list[Tool], call_id: CallIdFactory, *,
                   start_in: str = "content") -> DsmlParser:
        return DsmlParser(tools, call_id, start_in=start_in, variant=self.variant)

    def fence_grammar(self, plan: FencePlan) -> Node:
        lit = lambda key: literal(self, key)  # noqa: E731
        # no tag may start inside text or a value, canonical or leaked, in any token split
        markup = LEAK_STARTS
        flags = {True: lit("param_string_true"), False: lit("param_string_false")}

        def field(key: str, schema: Any, required: bool) -> Field:
            string = is_string_schema(schema)
            kinds = [string] if (schema and "type" in schema) or string else [True, False]
            bodies = [seq(Lit(lit("param_open") + key + flags[kind]),
                          tag_value(schema, kind, lit("param_close"), markup), Lit("\n")) for kind in kinds]
            return Field(alt(*bodies), required)

        def one(tool: Tool) -> Node:
            head = Lit(lit("invoke_open") + tool.qualified_name + lit("invoke_head_close"))
            fields = tuple(field(k, s, r) for k, s, r in properties(tool))
            params = AnyOrder(fields, empty="\n") if fields else Lit("\n")
            return seq(head, params, Lit(lit("invoke_close")))

        block_open, block_close = lit("block_open"), lit("block_close")
        head_auto = seq(TextThen(end=block_open.rstrip("\n"), excludes=markup), Lit("\n"))
        rest = compose(plan, Lit(block_open), head_auto, any_tool(plan, one), "\n", (lit("trigger"),) + LEAK_STARTS,
                       "\n" + block_close)
        return with_reasoning(self, plan, rest)


def qualified(call: ToolCall) -> str:
    return f"{call.namespace}__{call.name}" if call.namespace else call.name


# ---- leaked spellings (module docstring): rewritten to the canonical markers before parsing

class MarkerReader:
    """Rewrites every DSML marker spelling to the variant's canonical one, holding back a tail
    that may still become a marker; records each rewrite (original, canonical, where)."""

    def __init__(self, variant: str):
        self.prefix, self.block = PREFIXES[variant], VARIANTS[variant]
        self.pending = ""
        self.rewrites: list[tuple[str, str]] = []
        self.shifts: list[tuple[int, int]] = []  # (canonical offset after a rewrite, length change so far)
        self.change = self.emitted = 0

    def canonical(self, match: re.Match) -> str:
        name = match.group(2)
        return "<" + match.group(1) + self.prefix + (name if name in TAG_NAMES else self.block)

    def read(self, text: str, final: bool) -> str:
        self.pending += text
        keep = 0 if final else self._undecided_tail()
        cut = len(self.pending) - keep
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        out, pos = [], 0
        for match in MARKER.finditer(ready):
            written, canonical = match.group(0), self.canonical(match)
            out += [ready[pos:match.start()], canonical]
            pos = match.end()
            if written != canonical:
                self.change += len(written) - len(canonical)
                self.shifts.append((self.emitted + sum(map(len, out)), self.change))
                self.rewrites.append((written, canonical))
        out.append(ready[pos:])
        result = "".join(out)
        self.emitted += len(result)
        return result

    def original_offset(self, at: int) -> int:
        """Where canonical offset ``at`` lies in what the model wrote."""
        found = bisect.bisect_right(self.shifts, (at, float("inf")))
        return at + (self.shifts[found - 1][1] if found else 0)

    def _undecided_tail(self) -> int:
        start = self.pending.rfind("<", max(0, len(self.pending) - 48))
        if start < 0:
            return 0
        tail = self.pending[start:]
        return len(tail) if MARKER_START.fullmatch(tail) or MARKER.fullmatch(tail) else 0


# ---- parsing (incremental; the format is in the module docstring)

class DsmlParser(TagCallParser):
    tool_states = ("block_body", "invoke_name", "invoke_body", "json_body", "param_head", "value_text",
                   "skip_call", "skip_block")

    def __init__(self, tools, call_id, start_in="content", variant="v32"):
        d, block = PREFIXES[variant], VARIANTS[variant]
        self.block_open, self.block_close = f"<{d}{block}>", f"</{d}{block}>"
        self.invoke_open, self.invoke_close = f'<{d}invoke name="', f"</{d}invoke>"
        self.param_open = f'<{d}parameter name="'
        self.value_close, self.skip_until = f"</{d}parameter>", self.invoke_close
        self.escaping = variant == "v4"
        self.in_block = self.bare = False
        self.markers = MarkerReader(variant)
        super().__init__(tools, call_id, start_in)

    # -- leaked spellings: the states below only ever see canonical markers

    def feed(self, text: str) -> list[Event]:
        return self._mapped(super().feed(self.markers.read(text, final=False)))

    def finish(self) -> list[Event]:
        rest = self.markers.read("", final=True)
        self.buf += rest
        self.fed += len(rest)
        return self._mapped(super().finish())

    def at_end(self) -> None:
        was_open = self.call_open
        super().at_end()
        if self.in_block and not was_open:
            self.issue(f"unclosed {self.block_open} block", self.raw)
        # reported once the output is whole, so that every split reports them in the same place
        counts = Counter(self.markers.rewrites)
        for (written, fixed), count in counts.items():
            times = f" ({count} times)" if count > 1 else ""
            self.issue(f"DSML marker {written!r} read as {fixed!r}{times}", written)

    def _mapped(self, events: list[Event]) -> list[Event]:
        """TextDelta.at is an offset into what the model wrote, not into the rewritten text."""
        if not self.markers.shifts:
            return events
        return [attrs.evolve(e, at=self.markers.original_offset(e.at))
                if isinstance(e, TextDelta) and e.at is not None else e for e in events]

    def content(self) -> bool:
        opens = ["\n\n" + self.block_open, "\n" + self.block_open, self.block_open]
        bare = ["\n\n" + self.invoke_open, "\n" + self.invoke_open, self.invoke_open]
        head, tag = self.scan(opens + bare + [THINK_OPEN, THINK_CLOSE, EOS])
        self.text(head)
        if tag == THINK_OPEN:
            return self.goto(self.reasoning_text)
        if tag in opens:
            self.in_block, self.raw = True, tag
            return self.goto(self.block_body)
        if tag in bare:
            self.issue(f"an invoke written without its {self.block_open} block read as a call", tag)
            self.bare, self.raw = True, tag
            return self.goto(self.invoke_name)
        return bool(head) or tag is not None

    def after_think(self) -> bool:
        return self.goto(self.content)

    def after_call(self):
        if self.bare:
            self.bare = False
            return self.content
        return self.block_body

    def block_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self.expect_any([(self.invoke_open, self.invoke_name), (self.block_close, self.content)])
        if state is NEED_MORE:
            return False
        if state is None:
            self.problem = f"expected an invoke or {self.block_close} in the tool calls block"
            return self.goto(self.skip_block)
        if state == self.content:
            self.in_block, self.raw = False, ""
        return self.goto(state)

    def invoke_name(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        name = self.take(pos)
        self.raw += name + self.take(2)
        return self.begin_call(name, self.invoke_body)

    def _unclosed_head(self) -> bool:
        self.raw += self.take(len(self.buf))
        return False

    def invoke_body(self) -> bool:
        if self.final and not self.buf.strip():
            return False
        state = self.expect_any([(self.param_open, self.param_head), (self.invoke_close, "end")])
        if state is NEED_MORE:
            return False
        if state is None:
            if not self.args.keys and self.buf.lstrip().startswith("{"):
                self.body = ""
                return self.goto(self.json_body)
            return self.malformed(f"expected a parameter or {self.invoke_close}")
        return self.end_call() if state == "end" else self.goto(state)

    def json_body(self) -> bool:
        """State: the arguments written as one JSON object between the invoke's tags (a variant)."""
        head, tag = self.scan([self.invoke_close])
        self.raw += head + (tag or "")
        self.body += head
        if tag is None:
            return bool(head)
        if not json_object(self.body):
            self.issue("the invoke's body is neither parameters nor a JSON object", self.raw)
            self.fail_call()
            self.raw = ""
            return self.goto(self.after_call())
        self.issue("arguments written as a JSON object in the invoke's body", self.raw)
        self._delta(self.args.whole(self.body.strip()))
        return self.end_call()

    def param_head(self) -> bool:
        pos = self.buf.find('">')
        if pos < 0:
            return self.final and self._unclosed_head()
        head = self.take(pos)
        self.raw += head + self.take(2)
        match = PARAM_HEAD.match(head)
        if not match:
            return self.malformed("malformed parameter tag")
        return self.begin_value(match.group(1), match.group(2) == "true", self.invoke_body)

    def decided(self, raw: str) -> str:
        if not self.escaping:
            return raw
        amp = raw.rfind("&")
        if amp < 0:
            return raw
        rest = raw[amp + 1:]
        while rest.startswith("amp;"):
            rest = rest[4:]
        pending = "amp;".startswith(rest) or (ESCAPED_CLOSE.startswith(rest) and rest != ESCAPED_CLOSE)
        return raw[:amp] if pending else raw

    def unescape(self, text: str) -> str:
        return unescape_value(text) if self.escaping else text
