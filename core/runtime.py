"""The contract between the host and a model runtime.

A runtime owns everything model-private: weights, the layout of per-token state, forward passes
and the byte encoding of a session's state. The host only holds :class:`Session` handles and
token ids. Per-token state lives in fixed-size blocks in a pool; a session is a block table (plus
any auxiliary state that is not per token: compressed entries, rings of not-yet-compressed tokens,
a draft head's hidden state). Blocks are reference-counted so that forked sessions share a
prefix's blocks; the partial last block is copied on write.

State travels as *chunks* (:meth:`ModelRuntime.export_chunk` / :meth:`ModelRuntime.import_chunk`):
a chunk carries the per-token state of its token range plus whatever auxiliary state the runtime
needs at the chunk's end, so a session rebuilt chunk by chunk from position 0 is exactly the
session that was exported. ``fork`` and ``truncate`` are exact at *any* token for every runtime
(the cache truncates a restored session to a length inside a chunk, and forks resident sessions
at any prefix length): a runtime whose auxiliary state is not per token must be able to rebuild
it at any position.

A runtime whose model carries its own draft layers (GLM-4.5's MTP layer) offers them as a
:class:`DraftHead` (:meth:`ModelRuntime.draft_head`); the engine's speculative step drafts with it.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Optional, Protocol, Sequence

import attrs
import torch


class OutOfBlocks(RuntimeError):
    """The block pool has no free block for the requested state; the engine reclaims and retries."""


def check_decode_batch(sessions, tokens) -> None:
    """The contract's rule for ``decode``: one token per session, each session at most once."""
    if len(sessions) != len(tokens) or not sessions:
        raise ValueError(f"decode needs one token per session, got {len(sessions)} sessions, {len(tokens)} tokens")
    if len({id(s) for s in sessions}) != len(sessions):
        raise ValueError("a session appears twice in one decode batch")


class PrefillInterrupted(RuntimeError):
    """A prefill stopped early because its ``interrupted`` callback said so; the session is unchanged."""


@attrs.define
class ModelSource:
    """Where a model comes from and what it says it is, read by a model-format plugin (no weights).

    ``kind`` names the format (``"hf"`` directory, ``"gguf"`` file). ``architecture`` is the GGUF
    ``general.architecture`` or the Hugging Face ``model_type`` (else its first class name);
    ``architectures`` holds the Hugging Face ``architectures`` class names.
    """

    path: str
    kind: str
    architecture: str = ""
    architectures: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.define
class ModelInfo:
    name: str
    architecture: str
    vocab_size: int
    max_context: int
    trained_context: int
    eos_token_ids: list[int]
    bos_token_id: Optional[int]
    dtype: str
    device: str
    has_vision: bool = False
    sampling_defaults: dict[str, float] = attrs.field(factory=dict)  # from generation_config.json
    max_output_tokens: int = 0  # the model's own output clamp (0: none); [model] max_output_tokens overrides


@attrs.define(eq=False)
class Session:
    """A sequence's state on the device: the tokens it holds and the blocks that hold them.

    ``tokens`` are exactly the tokens whose state is present; ``len(tokens)`` is the position the
    next token is written at. ``aux`` holds runtime-private auxiliary state.
    """

    id: int
    tokens: list[int] = attrs.field(factory=list)
    block_table: list[int] = attrs.field(factory=list)
    aux: dict[str, Any] = attrs.field(factory=dict)

    @property
    def length(self) -> int:
        return len(self.tokens)


class DraftHead(Protocol):
    """A model's own draft layers: greedy guesses of the tokens that follow a session's next token.

    What it drafts from (hidden states, its own per-position state) is auxiliary state of the
    session, which the runtime keeps consistent under :meth:`ModelRuntime.fork` and
    :meth:`ModelRuntime.truncate`; it is not part of exported chunks. A draft is only a guess: the
    engine verifies every drafted token with the main model, so the output never depends on it.
    """

    def draft(self, session: Session, token: int, count: int) -> list[int]:
        """Up to ``count`` tokens expected after ``token``, the token about to be appended to
        ``session`` (not in it yet); fewer, or none, when the session lacks the state to draft from."""


class ModelRuntime(abc.ABC):
    """One loaded model. Not thread-safe: the engine calls it from its single worker thread."""

    info: ModelInfo
    tokenizer: Any  # tokenizers.Tokenizer
    chat_template: Optional[str]
    special_tokens: dict[str, str]  # bos_token / eos_token / unk_token / pad_token -> text
    block_size: int

    @property
    @abc.abstractmethod
    def fingerprint(self) -> str:
        """A hash of weights, dtype and architecture: state from another fingerprint never matches."""

    # --- sessions -------------------------------------------------------------------------------
    @abc.abstractmethod
    def new_session(self) -> Session:
        """An empty session."""

    @abc.abstractmethod
    def fork(self, session: Session, length: Optional[int] = None) -> Session:
        """A new session sharing the first ``length`` tokens' blocks of ``session`` (all by default).

        Exact at any ``length``: the fork holds exactly the state a prefill of those tokens gives,
        auxiliary state included.
        """

    @abc.abstractmethod
    def truncate(self, session: Session, length: int) -> None:
        """Drop the state of every token past ``length``; exact at any ``length`` (auxiliary state
        included), like :meth:`fork`."""

    @abc.abstractmethod
    def release(self, session: Session) -> None:
        """Return the session's blocks to the pool (shared blocks survive while referenced)."""

    def draft_head(self) -> Optional[DraftHead]:
        """The model's own draft layers when loaded (``[engine] speculative = "mtp"``), else None."""
        return None

    # --- auxiliary state that cannot be cut -----------------------------------------------------
    def cut_replay_tokens(self, session: Session, length: int) -> int:
        """How many tokens a :meth:`fork` or :meth:`truncate` of ``session`` at ``length`` would run
        again to rebuild auxiliary state that cannot be cut at a token (a recurrent state restored
        from the nearest snapshot at or before ``length``, a raw tail). Asked before the cut; the
        cache reports it per hit. 0 here: per-token state cuts exactly."""
        return 0

    def mark_boundaries(self, session: Session, positions: Sequence[int]) -> None:
        """Where messages end in the prompt about to be prefilled into ``session``: ascending
        absolute positions past its length (the end of the system prompt with the tools, of each
        turn), with those where the cache will pin a marked prefix (a fork there). A later request
        most likely parts from this one there (a sibling conversation on the same system prompt,
        an edited last turn). The engine calls it once, when the cache has
        attached the session and before the prompt's first prefill. A runtime whose state cannot be
        cut keeps snapshots there as its prefill passes them, so a fork at one replays nothing.
        Nothing here: per-token state cuts exactly anywhere."""

    def aux_state_bytes(self, sessions: Sequence[Session]) -> int:
        """Real bytes of the auxiliary state ``sessions`` hold beside their blocks (recurrent
        states and their snapshots, entries, raw tails), what they share counted once. 0 here."""
        return 0

    def set_state_stride(self, stride: int) -> None:
        """``[cache] state_stride``: take a recurrent-state snapshot every ``stride`` tokens (called
        once, before the first session). A runtime that takes snapshots raises ``ValueError`` naming
        the option for a stride it cannot use; one that takes none ignores it."""

    # --- forward passes -------------------------------------------------------------------------
    @abc.abstractmethod
    def prefill(self, session: Session, tokens: Sequence[int], all_logits: bool = False,
                interrupted: Optional[Callable[[], bool]] = None) -> torch.Tensor:
        """Append ``tokens`` to the session (works on an empty or a non-empty session).

        Returns the fp32 logits of the last position, shape [vocab], or of every new position,
        shape [len(tokens), vocab], when ``all_logits``. ``interrupted``, when given, may be polled
        during the forward (the Llama forward polls it before each layer); once it returns True the
        runtime leaves the session as it was and raises :class:`PrefillInterrupted`.
        """

    @abc.abstractmethod
    def decode(self, sessions: Sequence[Session], tokens: Sequence[int]) -> torch.Tensor:
        """Append one token to each session in one batched forward; sessions may differ in length.

        Returns fp32 logits, shape [len(sessions), vocab].
        """

    # --- state as bytes and its size ------------------------------------------------------------
    @property
    @abc.abstractmethod
    def state_format(self) -> str:
        """A version string of the chunk layout (e.g. ``"llama-kv/1 float32 30x3x64"``).

        Stored with every backed-up chunk; stored state whose format differs is dropped, never
        imported. Change it whenever :meth:`export_chunk`'s layout changes.
        """

    @abc.abstractmethod
    def export_chunk(self, session: Session, start: int, end: int) -> bytes:
        """The state of tokens [start, end) of ``session`` as bytes (layout private to the runtime):
        the per-token state of the range plus the auxiliary state the runtime needs at ``end``.

        Raises ``ValueError`` for a range outside ``[0, session.length]``.
        """

    @abc.abstractmethod
    def import_chunk(self, session: Session, tokens: Sequence[int], data: bytes) -> None:
        """Append ``tokens`` with their state ``data`` (from :meth:`export_chunk` of the range that
        starts at ``session.length``) after the session's current end.

        Raises ``ValueError`` when ``data`` does not fit ``tokens`` or the session (wrong length,
        layout or format); the session is then unchanged.
        """

    @abc.abstractmethod
    def state_bytes(self, length: int) -> int:
        """An estimate of the bytes of state a session of ``length`` tokens holds (exported size)."""

    @abc.abstractmethod
    def session_bytes(self, session: Session) -> int:
        """Real bytes allocated for the session (whole blocks, shared ones included)."""

    @abc.abstractmethod
    def pool_stats(self) -> dict[str, int]:
        """``{"blocks_total", "blocks_free", "block_bytes"}`` of the block pool."""
