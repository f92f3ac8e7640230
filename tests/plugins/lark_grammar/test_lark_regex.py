"""Lark -> regex translation for custom tools' grammars (the lark_grammar plugin, through
core/fence/custom.py's register_tool_grammars): the regex accepts what the grammar accepts, checked against llguidance's own Lark
parser (an independent matcher) as well as Python's ``re``; what cannot be enforced is refused."""

from __future__ import annotations

import re

import llguidance
import pytest

import kvgate.plugins.lark_grammar
from kvgate.adapters.custom_tools import custom_tool
from kvgate.core.fence.custom import GrammarError, fenced_parameters, input_pattern, tool_grammars
from kvgate.core.fence.errors import FenceRequestError
from kvgate.core.plugins import build_plugin_manager
from kvgate.core.types import InputFormat
from kvgate.plugins.lark_grammar.to_regex import lark_to_regex

SYNTAXES = {"lark": kvgate.plugins.lark_grammar.LarkSyntax()}

# Codex 0.171's ``exec`` tool, as its request sends it
CODEX_EXEC = ("\nstart: pragma_source | plain_source\npragma_source: PRAGMA_LINE NEWLINE SOURCE\n"
              "plain_source: SOURCE\n\nPRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\nNEWLINE: /\\r?\\n/\n"
              "SOURCE: /[\\s\\S]+/\n")
APPLY_PATCH = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""  # Codex's apply_patch grammar
COMMANDS = """
// a command line: alternations, repetitions, optional parts, ranges, imports
?start: command (" " argument)* [" &"]
command: "ls" | "cat"i | "git" " " ("status" | "log")
argument: FLAG | PATH
FLAG: "-" LETTER~1..3
PATH: ("a".."z" | "/" | ".")+
%import common.LETTER
"""


@pytest.fixture(scope="module")
def lark_accepts(smol_tokenizer):
    """Whether llguidance's Lark parser accepts ``text`` under ``grammar`` (fed as the model's tokens)."""
    tokenizer = llguidance.LLTokenizer(smol_tokenizer.to_str())

    def accepts(grammar: str, text: str) -> bool:
        matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar))
        return matcher.consume_tokens(tokenizer.tokenize_str(text)) and matcher.is_accepting()
    return accepts


@pytest.mark.parametrize("text, ok", [
    ("// @exec: {\"timeout\": 5}\nconst r = await tools.exec_command({cmd: 'ls'});", True),
    ("console.log(1)", True), ("\n", True), ("", False)])
def test_codex_exec_grammar(text, ok, lark_accepts):
    regex = lark_to_regex(CODEX_EXEC)
    assert bool(re.fullmatch(regex, text)) is ok
    assert lark_accepts(CODEX_EXEC, text) is ok


@pytest.mark.parametrize("text, ok", [
    ("ls", True), ("ls -la /tmp", True), ("CaT ./a.txt &", True), ("git log", True), ("git push", False),
    ("ls -abcd", False), ("rm -rf /", False), ("ls  -l", False), ("cat x &&", False)])
def test_alternations_repetitions_and_ranges(text, ok, lark_accepts):
    regex = lark_to_regex(COMMANDS)
    assert bool(re.fullmatch(regex, text)) is ok
    assert lark_accepts(COMMANDS, text) is ok


@pytest.mark.parametrize("text, ok", [
    ("*** Begin Patch\n*** Add File: a.txt\n+hello\n+\n*** End Patch\n", True),
    ("*** Begin Patch\n*** Update File: src/x.py\n@@ def f():\n-    return 1\n+    return 2\n*** End Patch", True),
    ("*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n", True),
    ("*** Begin Patch\n*** End Patch\n", False),  # at least one hunk
    ("*** Begin Patch\n*** Add File: a.txt\nhello\n*** End Patch\n", False)])
def test_codex_apply_patch_grammar(text, ok, lark_accepts):
    assert bool(re.fullmatch(lark_to_regex(APPLY_PATCH), text)) is ok
    assert lark_accepts(APPLY_PATCH, text) is ok


@pytest.mark.parametrize("grammar, why", [
    ('start: expr\nexpr: "(" expr ")" | "x"', "recursive"),
    ('start: a\na: b\nb: "x" a?', "recursive"),
    ('start: WORD\n%ignore " "', "not supported"),
    ('start: NUMBER\n%import common.NUMBER', "not supported"),
    ("start: /a(?=b)/", "look-around"),
    ("start: /a/x", "flags"),
    ('start: item\nitem{x}: x', "template"),
    ('start: missing', "does not define"),
    ('expr: "x"', "no 'start' rule"),
    ('start: ' + " | ".join(f'"{i:04d}"' for i in range(800)), "too large"),
])
def test_what_cannot_be_enforced_is_refused(grammar, why):
    with pytest.raises(GrammarError, match=why):
        lark_to_regex(grammar)


def test_modifiers_priorities_and_aliases_shape_the_tree_only():
    assert lark_to_regex('!start: A -> one\n    | "y"\nA.2: "x"') == lark_to_regex('start: A | "y"\nA: "x"')


def test_input_patterns_are_anchored_and_refusals_name_the_tool():
    assert input_pattern(InputFormat(), SYNTAXES) is None
    assert input_pattern(InputFormat("regex", "[a-z]+|[0-9]+"), SYNTAXES) == "^(?:[a-z]+|[0-9]+)$"
    assert re.fullmatch(input_pattern(InputFormat("lark", CODEX_EXEC), SYNTAXES), "x")
    calc = custom_tool("calc", fmt=InputFormat("lark", 'start: e\ne: "(" e ")" | "1"'))
    with pytest.raises(FenceRequestError, match="custom tool 'calc'.*recursive") as error:
        fenced_parameters(calc, SYNTAXES)
    assert error.value.param == "tools"


def test_lark_is_the_plugins_syntax_through_the_hook():
    assert isinstance(tool_grammars(build_plugin_manager())["lark"], kvgate.plugins.lark_grammar.LarkSyntax)
    without = tool_grammars(build_plugin_manager(disabled=["lark_grammar"]))
    assert "lark" not in without
    with pytest.raises(GrammarError, match="no plugin enforces grammar syntax 'lark'"):
        input_pattern(InputFormat("lark", CODEX_EXEC), without)
    assert input_pattern(InputFormat("regex", "ls"), without) == "^(?:ls)$"
