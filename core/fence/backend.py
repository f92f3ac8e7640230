"""The grammar-backend plugin interface and how a fence finds its backend.

A backend is contributed through the ``register_grammar_backends`` hook:
``register(name, build_backend)`` where ``build_backend(tokenizer_info)`` returns a
:class:`GrammarBackend`. The built-in one is ``llguidance`` (:mod:`kvgate.plugins.grammar_llguidance`);
``[fence] backend`` in the config picks another. A backend compiles the neutral grammar of
:mod:`kvgate.core.fence.grammar` into matchers: one per request, advanced token by token.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import numpy as np

from kvgate.core.fence.errors import FenceError
from kvgate.core.fence.grammar import Node
from kvgate.core.fence.tokens import TokenizerInfo


class Matcher(Protocol):
    """One request's grammar state. Bit ``i`` of a mask word set means token ``i`` is allowed."""

    def fill_mask(self, bitmask: np.ndarray) -> None:
        """Write the allowed set into ``bitmask`` (int32, ``ceil(vocab / 32)`` words)."""

    def consume(self, token: int) -> bool:
        """Advance by one token; False (and the matcher unusable) when the token is not allowed."""

    def allows(self, tokens: list[int]) -> int:
        """How many of ``tokens``, in order, the grammar accepts from here (state unchanged)."""

    def rollback(self, count: int) -> None:
        """Undo the last ``count`` consumed tokens."""

    def copy(self) -> "Matcher":
        """An independent copy (for draft checking)."""

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces next, in order (may be empty)."""

    def forced_bytes(self) -> bytes:
        """Bytes the grammar forces next (may reach past ``forced_tokens``, which holds back a
        last token that a longer one could extend)."""

    def is_accepting(self) -> bool:
        """The output may end here."""

    def is_stopped(self) -> bool:
        """Nothing may follow but the end of the output."""

    def error(self) -> str:
        """Why the matcher failed, or ''."""


class GrammarBackend(Protocol):
    """What ``register_grammar_backends`` builds: one engine compiling grammars for one tokenizer."""

    name: str
    unsupported_keywords: frozenset[str]
    """JSON Schema keywords the engine cannot enforce (the fence relaxes them and says so)."""
    formats: Optional[frozenset[str]]
    """The ``format`` values it enforces; None: every format it is given."""

    def matcher(self, grammar: Node) -> Matcher:
        """A fresh matcher for ``grammar``; raises FenceRequestError when it cannot compile."""

    def schema_error(self, schema: Any) -> str:
        """Why ``schema`` alone does not compile, or "" when it does (the fence then falls back to
        the schema's ``type``)."""


def grammar_backend(pm, name: str, info: TokenizerInfo) -> GrammarBackend:
    """The backend ``name`` for this tokenizer, built once and cached on ``info``.

    An empty ``name`` means the one registered backend; with several registered, ``[fence] backend``
    must say which.
    """
    with info.lock:
        built = info.backends.grammar
        backend = built.get(name)
        if backend is None:
            from kvgate.core.plugins import collect

            registry = collect(pm, "register_grammar_backends", "grammar backend")
            chosen = name or (registry.names()[0] if len(registry.names()) == 1 else "")
            if chosen not in registry:
                known = ", ".join(registry.names()) or "none"
                wanted = f"named {name!r}" if name else "chosen: set [fence] backend to one of them"
                raise FenceError(f"no grammar backend {wanted} (registered: {known}); "
                                 f"set [fence] backend or enable the plugin")
            backend = built.get(chosen) or registry.get(chosen)(info)
            built[chosen] = built[name] = backend
        return backend
