"""Generation guards: per-request state machines composed into the request fence.

A guard is contributed through the ``register_generation_guards`` hook:
``register(name, build_guard)``; ``build_guard(setup)`` receives a :class:`GuardSetup` (the
whole config, where a guard reads its own section with ``setup.config.section(name)``, plus what
the request's dialect and tokenizer say about reasoning) and returns None when it has nothing to
watch (e.g. switched off in its section), else a fresh object with this interface:

* ``banned() -> list[int]``: tokens to exclude before the next sample (the looping successor);
* ``forced() -> list[int]``: tokens the guard forces next (e.g. the end of reasoning), or [];
* ``ends_reply() -> bool``: the guard asks to end the reply here (a loop that exclusions do not
  break); the fence ends it as soon as no structure is open (never inside a call);
* ``advance(token)``: after a token is chosen;
* ``clone()``: an independent copy (draft checking).

The fence applies bans only when something stays allowed, and counts an intervention for each
position where a guard actually removed or forced a token.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from kvgate.core.config import Config
from kvgate.core.fence.tokens import TokenizerInfo


@attrs.frozen
class GuardSetup:
    config: Config  # the whole bound config; each guard reads its own section
    info: TokenizerInfo
    think_open: str = ""
    think_close: str = ""
    in_reasoning: bool = False  # the completion starts inside a reasoning block


class Guard(Protocol):
    def banned(self) -> list[int]: ...

    def forced(self) -> list[int]: ...

    def ends_reply(self) -> bool:
        """Whether the reply should end now (the server's decision, not the model's end of turn)."""
        ...

    def advance(self, token: int) -> None: ...

    def clone(self) -> "Guard": ...


def build_guards(pm, setup: GuardSetup) -> list[Any]:
    """One fresh instance of every registered guard that has something to watch (disabled plugins
    are not loaded at all; a guard switched off in its own section builds None)."""
    from kvgate.core.plugins import collect

    registry = collect(pm, "register_generation_guards", "generation guard")
    guards = [registry.get(name)(setup) for name in registry.names()]
    return [guard for guard in guards if guard is not None]
