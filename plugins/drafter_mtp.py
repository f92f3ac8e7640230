"""The MTP drafter: the model's own draft layers (a :class:`kvgate.core.runtime.DraftHead`, e.g.
GLM-4.5's or DeepSeek V4's MTP layer) draft ``[engine] speculative_mtp`` tokens a step when
``[engine] speculative = "mtp"`` (the runtime loads the layer only then).
"""

from __future__ import annotations

from typing import Optional

import attrs

from kvgate.core.config import EngineConfig
from kvgate.core.engine.sequence import Sequence
from kvgate.core.hookspecs import hookimpl
from kvgate.core.runtime import DraftHead, ModelRuntime

NAME = "mtp"


@attrs.frozen
class HeadDrafts:
    """The model's draft head. It drafts from the last verified position only, so behind forced
    tokens (not in the session yet) it proposes nothing: the forced run is the whole draft."""

    head: DraftHead

    def propose(self, seq: Sequence, forced: list[int], count: int) -> list[int]:
        if forced or count <= 0 or seq.session is None:
            return []
        return self.head.draft(seq.session, seq.output[-1], count)

    def max_draft(self, config: EngineConfig) -> int:
        return config.speculative_mtp


def build_mtp_drafter(runtime: Optional[ModelRuntime], config: EngineConfig) -> Optional[HeadDrafts]:
    if config.speculative != NAME:
        return None
    head = runtime.draft_head() if runtime is not None else None
    if head is None:
        raise ValueError('[engine] speculative = "mtp" needs a model with an MTP layer loaded '
                         "(GLM-4.5's num_nextn_predict_layers)")
    return HeadDrafts(head)


@hookimpl
def register_drafters(register):
    register(NAME, build_mtp_drafter)
