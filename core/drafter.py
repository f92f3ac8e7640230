"""The contract of a speculative-decoding drafter, contributed through ``register_drafters``.

A drafter guesses the tokens that follow a running sequence; the engine's speculative step
(:mod:`kvgate.core.engine.speculative`) puts the tokens the fence forces first, cuts the guess
where a clone of the fence refuses it, and verifies it in one forward of the main model, so the
output never depends on the drafter: a good one only makes decoding faster.

A plugin registers ``register(name, build)``, ``build`` being a :data:`DrafterBuild`. Which
drafter runs is the one whose build answers the ``[engine]`` config (see
:mod:`kvgate.core.engine.drafter_choice`).
"""

from __future__ import annotations

from typing import Callable, Optional, Protocol

from kvgate.core.config import EngineConfig
from kvgate.core.engine.sequence import Sequence
from kvgate.core.runtime import ModelRuntime


class Drafter(Protocol):
    """A source of draft tokens; one serves every running sequence of the engine."""

    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        """Up to ``count`` tokens expected after ``seq``'s prompt and output followed by the
        ``forced`` tokens (the fence's, not in ``seq.session`` yet); fewer or none when it has no
        guess. Called on the engine thread once per decode step and running sequence."""

    def max_draft(self, config: EngineConfig) -> int:
        """The most tokens one step verifies per sequence (forced tokens included) under
        ``config``, e.g. read from the ``[engine]`` key that sets this drafter's draft length."""


DrafterBuild = Callable[[Optional[ModelRuntime], EngineConfig], Optional[Drafter]]
"""``build(runtime, engine_config)``: called once when the engine is built, with the loaded model's
runtime (None when a decode step is chosen without a model) and the ``[engine]`` config. Returns a
:class:`Drafter` when the config asks for this drafter -- ``[engine] speculative`` names it, or,
with ``speculative`` empty, keys of its own ask for it -- else None. Raises ValueError when it is
asked for but cannot draft for this model (the message says why)."""
