"""Normalise Claude Code's volatile attribution line so it does not fork the cached prefix.

Claude Code puts ``x-anthropic-billing-header: cc_version=...; cc_entrypoint=cli; cch=<hex>;`` in
the first system block, and ``cch`` changes on every request: left alone, every turn's prompt
differs from the cached one a few dozen tokens in, and the whole context is prefilled again.

Modes (``[anthropic] normalize_billing_header`` in the config):

- ``true`` or ``"drop"`` (default): remove the attribution block (or line) entirely; the model
  never needed it.
- ``"constant"``: keep the line but replace the ``cch`` value with ``00000``.
- ``false`` or ``"off"``: leave the text as the client sent it.
"""

from __future__ import annotations

import re
from typing import Union

BILLING_PREFIX = "x-anthropic-billing-header:"
_CCH = re.compile(r"(\bcch=)[0-9A-Za-z]+")


def billing_mode(setting: Union[bool, str]) -> str:
    """The normalisation mode for a config value (bool or mode name)."""
    if setting is True:
        return "drop"
    if setting is False:
        return "off"
    mode = str(setting).strip().lower()
    if mode not in ("drop", "constant", "off"):
        raise ValueError(f"anthropic.normalize_billing_header: unknown mode {setting!r}")
    return mode


def is_billing_text(text: str) -> bool:
    return text.lstrip().startswith(BILLING_PREFIX)


def normalize_billing_text(text: str, mode: str) -> str:
    """``text`` with every attribution line dropped or made constant (other lines untouched)."""
    if mode == "off" or BILLING_PREFIX not in text:
        return text
    lines = text.split("\n")
    if mode == "drop":
        kept = [line for line in lines if not is_billing_text(line)]
    else:
        kept = [_CCH.sub(r"\g<1>00000", line) if is_billing_text(line) else line for line in lines]
    return "\n".join(kept)
