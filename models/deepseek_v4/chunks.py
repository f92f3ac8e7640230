"""The auxiliary part of a DeepSeek V4 chunk: what a session needs at the chunk's end beyond the
K=V rows of its tokens.

A chunk of tokens ``[start, end)`` carries, after its K=V rows (the Llama chunk framing's KV bytes),
``aux_len`` bytes: ``u64 start`` (little-endian), then per compressed layer in ascending order, each
a C-order array in the runtime dtype,

- its entries of the windows that complete within ``(start, end]``, ``[end // rate - start // rate,
  head_dim]``, and for CSA its indexer keys of the same windows ``[.., index_dim]``;
- its raw tail at ``end``, the rows of positions ``[need_start(end), end)``, ``[.., width]``
  (:class:`~kvgate.models.deepseek_v4.tail.RawLayer`).

Imported chunk by chunk from position 0, the entries add up to the session's, and the last chunk's
tails are what it needs to go on from there. Stored chunks are untrusted input: every size is
checked before the session is touched.
"""

from __future__ import annotations

import torch

from kvgate.core.runtime import Session
from kvgate.models.deepseek_v4.state import ENTRIES, entry_count, entry_view
from kvgate.models.deepseek_v4.tail import RawLayout, RawTail, tails

START_BYTES = 8


def aux_parts(layout: RawLayout, start: int, end: int) -> list[tuple[tuple[int, str], int, int]]:
    """``((layer, "kv" | "index" | "tail"), rows, width)`` of each array of a chunk's aux, in order."""
    parts = []
    for index, layer in layout.layers.items():
        windows = end // layer.rate - start // layer.rate
        for which in ("kv", "index") if layer.overlap else ("kv",):
            parts.append(((index, which), windows, layer.entry_dims(which)))
        parts.append(((index, "tail"), end - layer.need_start(end), layer.width))
    return parts


def aux_bytes(layout: RawLayout, start: int, end: int, element_size: int) -> int:
    return START_BYTES + element_size * sum(rows * width for _, rows, width in aux_parts(layout, start, end))


def encode(session: Session, layout: RawLayout, start: int, end: int, tails_at_end: dict) -> bytes:
    """The aux bytes of the session's chunk ``[start, end)``; ``tails_at_end`` hold its rows at ``end``."""
    arrays = []
    for (index, which), rows, _ in aux_parts(layout, start, end):
        rate = layout.layers[index].rate
        if which == "tail":
            arrays.append(tails_at_end[index].between(end - rows, end) if rows else None)
        else:
            arrays.append(session.aux[ENTRIES][(index, which)].rows()[start // rate:end // rate]
                          if rows else None)
    body = [a.contiguous().cpu().view(torch.uint8).numpy().tobytes() for a in arrays if a is not None]
    return start.to_bytes(START_BYTES, "little") + b"".join(body)


def decode(data: memoryview, layout: RawLayout, start: int, end: int, dtype: torch.dtype) -> dict:
    """``{(layer, which): array}`` of aux ``data`` for a session at ``start`` taking ``end - start``
    tokens; ``ValueError`` for aux of another range or size."""
    if len(data) < START_BYTES:
        raise ValueError(f"a DeepSeek V4 chunk's aux needs {START_BYTES} bytes, got {len(data)}")
    chunk_start = int.from_bytes(data[:START_BYTES], "little")
    if chunk_start != start:
        raise ValueError(f"chunk of the tokens from {chunk_start}, the session holds {start}")
    parts = aux_parts(layout, start, end)
    size = torch.empty(0, dtype=dtype).element_size()
    expected = aux_bytes(layout, start, end, size)
    if len(data) != expected:
        raise ValueError(f"aux of {len(data)} bytes, tokens [{start}, {end}) need {expected}")
    flat = torch.frombuffer(bytearray(data[START_BYTES:]), dtype=torch.uint8).view(dtype) if expected > START_BYTES \
        else torch.empty(0, dtype=dtype)
    arrays, offset = {}, 0
    for key, rows, width in parts:
        arrays[key], offset = flat[offset:offset + rows * width].view(rows, width), offset + rows * width
    return arrays


def check_entries(session: Session, layout: RawLayout, start: int) -> None:
    """The session must hold exactly the entries of the windows complete within its ``start`` tokens."""
    for index, layer in layout.layers.items():
        for which in ("kv", "index") if layer.overlap else ("kv",):
            held = entry_count(session, (index, which))
            if held != start // layer.rate:
                raise ValueError(f"layer {index} holds {held} entries, a session of {start} tokens "
                                 f"{start // layer.rate}")


def install(session: Session, layout: RawLayout, arrays: dict, end: int, device: torch.device) -> None:
    """Append the decoded entries and take the tails at ``end``."""
    held = tails(session)
    for (index, which), array in arrays.items():
        array = array.to(device)
        if which == "tail":
            held[index] = RawTail(layout.layers[index].need_start(end), array.clone())
        else:
            entry_view(session, (index, which), array[:0].clone()).append(array)
