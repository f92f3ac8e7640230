"""The llguidance grammar backend and its matcher (Earley parser over a derivative-based lexer).

Grammars are written as llguidance Lark (see :mod:`kvgate.plugins.grammar_llguidance.lark`),
compiled once per distinct grammar text and kept as a template matcher; each request gets a
``deep_copy`` of it (microseconds, where compiling takes milliseconds). Masks are computed straight into the fence's
bitmask buffer; rollback and copy serve speculative decoding.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import llguidance
import numpy as np

from kvgate.core.fence.errors import FenceError, FenceRequestError
from kvgate.core.fence.grammar import Node, json_node
from kvgate.core.fence.mask import bitmask_words
from kvgate.core.fence.tokens import TokenizerInfo
from kvgate.plugins.grammar_llguidance.lark import to_lark
from kvgate.plugins.grammar_llguidance.trial import first_steps_error

TEMPLATE_CACHE_SIZE = 128
# JSON Schema keywords llguidance 1.9 refuses ("Unimplemented keys"): the fence drops them (a superset)
UNSUPPORTED_KEYWORDS = frozenset({
    "propertyNames", "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties",
    "unevaluatedItems", "uniqueItems", "contains", "minContains", "maxContains", "not", "if", "then", "else",
    "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor",
})
FORMATS = frozenset({
    "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri", "unknown",
})
ERROR_CHARS = 300
STEP_LEXER_FUEL = 4_000_000  # 20x the default: a mask that runs out of fuel comes back empty


class LlgMatcher:
    """:class:`kvgate.core.fence.backend.Matcher` over an ``llguidance.LLMatcher``."""

    __slots__ = ("inner",)

    def __init__(self, inner: llguidance.LLMatcher):
        self.inner = inner

    def fill_mask(self, bitmask: np.ndarray) -> None:
        self.inner.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)

    def consume(self, token: int) -> bool:
        return self.inner.consume_token(token)

    def allows(self, tokens: list[int]) -> int:
        return self.inner.validate_tokens(tokens)

    def rollback(self, count: int) -> None:
        if count and not self.inner.rollback(count):
            raise FenceError(f"grammar rollback of {count} tokens failed: {self.inner.get_error()}")

    def copy(self) -> "LlgMatcher":
        return type(self)(self.inner.deep_copy())

    def forced_tokens(self) -> list[int]:
        return self.inner.compute_ff_tokens()

    def forced_bytes(self) -> bytes:
        return self.inner.compute_ff_bytes()

    def is_accepting(self) -> bool:
        return self.inner.is_accepting()

    def is_stopped(self) -> bool:
        return self.inner.is_stopped()

    def error(self) -> str:
        return short(self.inner.get_error())  # one line: never the grammar listing, which may reach a client


class LlgBackend:
    name = "llguidance"
    unsupported_keywords = UNSUPPORTED_KEYWORDS
    formats = FORMATS

    def __init__(self, info: TokenizerInfo):
        self.info = info
        try:
            self.tokenizer = llguidance.LLTokenizer(info.tokenizer.to_str(), eos_token=list(info.eos_ids) or None)
        except Exception as exc:  # llguidance reports unsupported tokenizers as plain exceptions
            raise FenceError(f"llguidance cannot use this tokenizer: {exc}") from None
        self.templates: OrderedDict[str, llguidance.LLMatcher] = OrderedDict()
        self.refused: OrderedDict[str, str] = OrderedDict()  # grammar text -> why its first steps fail
        self.lock = threading.Lock()

    def __reduce__(self):
        """Pickled as what rebuilds it (the tokenizer), so a worker process can compile with it."""
        return rebuilt_backend, (self.info.tokenizer.to_str(), self.info.eos_ids)

    def lark(self, grammar: Node) -> str:
        return to_lark(grammar, self.info.unit_texts, self.info.special_texts)

    def matcher(self, grammar: Node) -> LlgMatcher:
        text = self.lark(grammar)
        with self.lock:
            template = self.templates.get(text)
            if template is not None:
                self.templates.move_to_end(text)
                return LlgMatcher(template.deep_copy())
        template = self.compile(text)
        with self.lock:
            self.templates[text] = template
            while len(self.templates) > TEMPLATE_CACHE_SIZE:
                self.templates.popitem(last=False)
        return LlgMatcher(template.deep_copy())

    def compile(self, text: str) -> llguidance.LLMatcher:
        """The template of ``text``, tried on its first steps; a failure is remembered, so every
        retry gets the same 400 at once."""
        with self.lock:
            error = self.refused.get(text)
        matcher = None
        if error is None:
            matcher = self.build(text)
            error = matcher.get_error() if matcher.is_error() else first_steps_error(matcher, self.info.vocab_size)
        if error:
            with self.lock:
                self.refused[text] = error
                while len(self.refused) > TEMPLATE_CACHE_SIZE:
                    self.refused.popitem(last=False)
            raise FenceRequestError(f"the requested constraint cannot be compiled: {short(error)}", param="tools")
        return matcher

    def build(self, text: str) -> llguidance.LLMatcher:
        compiled = llguidance.LLMatcher.grammar_from_lark(text)
        limits = llguidance.LLParserLimits(step_lexer_fuel=STEP_LEXER_FUEL)
        return llguidance.LLMatcher(self.tokenizer, compiled, log_level=0, limits=limits)

    def schema_error(self, schema) -> str:
        """Why ``schema`` alone does not compile (its first mask included), or ''."""
        matcher = self.build(self.lark(json_node(schema)))
        if not matcher.is_error():
            mask = np.zeros(bitmask_words(self.info.vocab_size), dtype=np.int32)
            matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        return short(matcher.get_error()) if matcher.is_error() else ""


def rebuilt_backend(tokenizer_json: str, eos_ids: tuple[int, ...]) -> LlgBackend:
    """The backend of a pickled :class:`LlgBackend` (its caches start empty)."""
    from tokenizers import Tokenizer

    return LlgBackend(TokenizerInfo(Tokenizer.from_str(tokenizer_json), eos_ids))


def short(error: str) -> str:
    """The engine's message in one line: no grammar listing, no regex excerpt, no "at 3(5)" position."""
    body = error.split("\n   1 |")[0]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    reason = next((line[len("error:"):].strip() for line in lines if line.startswith("error:")), "")
    text = lines[0] if lines else error.strip()
    text = text.split(": ", 1)[1] if text.startswith("at ") and ": " in text else text
    text = f"{text} {reason}" if reason else text
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + "..."
