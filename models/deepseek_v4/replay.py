"""Rebuilding a session's raw tails at its length by running its last tokens through the layers again.

A fork or a truncation to length ``L`` keeps the K=V rows and the entries of every window complete
within ``L``; what it may lack is the raw rows the tails need (:meth:`RawLayout.replay_start`: the
open HCA window, the open CSA window and the one before). Those depend only on the layers' inputs at
those tokens, which attend to stored K=V rows and entries alone, so a forward over tokens
``[replay_start(L), L)`` that writes no K=V rows and pools no entry (:mod:`.forward`'s replay)
reproduces them: at most ``max(hca_rate, 2 * csa_rate) - 1`` tokens (V4-Flash: 127).
"""

from __future__ import annotations

import torch

from kvgate.core.runtime import Session
from kvgate.models.deepseek_v4.forward import DeepseekV4Forward, Segment
from kvgate.models.deepseek_v4.tail import RawLayout, tails


@torch.inference_mode()
def replay(forward: DeepseekV4Forward, layout: RawLayout, session: Session) -> int:
    """Rebuild ``session``'s raw tails at its length; the number of tokens run again."""
    length = session.length
    first = layout.replay_start(length)
    held = tails(session)
    held.clear()
    if first == length:
        return 0
    ids = torch.tensor(session.tokens[first:length], dtype=torch.long, device=forward.weights.embed.device)
    kept, forward.hidden = forward.hidden, None
    try:
        forward.run([Segment(session, first, length - first)], ids, False, replay=True)
    finally:
        forward.hidden = kept  # the MTP head drafts from the streams of real forwards only
    return length - first
