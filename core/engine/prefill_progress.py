"""Long cold prefills on the progress board (:mod:`kvgate.core.observe.progress`).

A prompt with at least :data:`kvgate.core.observe.progress.LONG_WORK_TOKENS` tokens left to compute after its cached prefix
is put on the board at its first chunk and advanced after each one; it leaves the board when its
prompt is in state, or when the sequence ends first (cancelled, failed). Called on the engine
thread only.
"""

from __future__ import annotations

from kvgate.core.engine.sequence import Phase, Sequence
from kvgate.core.observe.progress import LONG_WORK_TOKENS, Operation, ProgressBoard

IN_STATE = ("done", "stop", "length")  # the prompt was computed (a warm-up ends with "stop" right after)


class PrefillProgress:
    def __init__(self, board: ProgressBoard, min_tokens: int = LONG_WORK_TOKENS):
        self.board = board
        self.min_tokens = min_tokens
        self._operations: dict[int, Operation] = {}  # sequence id -> its prefill on the board

    def chunk_done(self, seq: Sequence) -> None:
        """After one prefill chunk of ``seq``."""
        if seq.phase is not Phase.PREFILL:  # its prompt is in state (or it ended: already off the board)
            self.ended(seq, "done")
            return
        cached = seq.plan.cached_tokens if seq.plan is not None else 0
        operation = self._operations.get(seq.id)
        if operation is None:
            total = len(seq.prompt) - cached
            if total < self.min_tokens:
                return
            what = f"request {seq.id}, {total} of {len(seq.prompt)} prompt tokens to compute"
            operation = self._operations[seq.id] = self.board.start("prefill", what, total)
        self.board.advance(operation, seq.computed - cached)

    def ended(self, seq: Sequence, outcome: str) -> None:
        """``seq`` left prefill: its prompt is in state (``done``) or the sequence ended with
        ``outcome`` (a :class:`SequenceDone` reason)."""
        operation = self._operations.pop(seq.id, None)
        if operation is None:
            return
        if outcome in IN_STATE:
            self.board.advance(operation, operation.total)
            outcome = "done"
        self.board.finish(operation, outcome)
