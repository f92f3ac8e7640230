"""Which rope a Llama-family model is served with, for the context it serves.

A checkpoint's declared ``rope_scaling`` / ``rope_parameters`` is kept (``dynamic`` is fixed at the
served context: a plain base, so cached state stays valid at every length). A checkpoint that
declares none and is served past its trained context is extended by ``model.context_extension``:
``yarn`` (default), ``linear`` or ``none`` (plain RoPE extrapolation).
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from kvgate.models.rope import SUPPORTED, scaling_type

EXTENSIONS = ("yarn", "linear", "none")
EXTENSION_NAMES = {"yarn": "YaRN", "linear": "linear position interpolation", "none": "plain RoPE extrapolation"}


def declared_scaling(rope: dict[str, Any], trained_context: int) -> Optional[dict[str, Any]]:
    """A config's rope dict with Hugging Face's defaults filled in; None for plain RoPE."""
    kind = scaling_type(rope)
    if kind == "default":
        return None
    if kind not in SUPPORTED + ("dynamic",):
        raise ValueError(f"unsupported rope scaling type {kind!r} (supported: {', '.join(SUPPORTED)}, dynamic)")
    if float(rope.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings (partial_rotary_factor) are not supported")
    scaling = {key: value for key, value in rope.items() if key != "rope_theta"}
    scaling["rope_type"] = kind
    if kind == "yarn":
        scaling.setdefault("original_max_position_embeddings", trained_context)
        if scaling.get("factor") is None:
            scaling["factor"] = trained_context / float(scaling["original_max_position_embeddings"])
    if kind == "dynamic":
        scaling["max_position_embeddings"] = trained_context
    return scaling


def dynamic_theta(theta: float, head_dim: int, scaling: dict[str, Any], context: int) -> float:
    """Dynamic NTK's base at ``context`` tokens (Hugging Face's formula, at a fixed length)."""
    trained = int(scaling["max_position_embeddings"])
    factor, length = float(scaling["factor"]), max(context, trained)
    return theta * ((factor * length / trained) - (factor - 1)) ** (head_dim / (head_dim - 2))


def served_rope(arch: Any, context: int, extension: str) -> tuple[Any, Optional[str]]:
    """(``arch`` with the rope it is served with at ``context``, the quality caveat or None)."""
    scaling, trained = arch.rope_scaling, arch.trained_context
    kind = scaling_type(scaling)
    if kind == "dynamic":
        theta = dynamic_theta(arch.rope_theta, arch.head_dim, scaling, context)
        return attrs.evolve(arch, rope_theta=theta, rope_scaling=None), None
    past = context > trained
    if not past:
        return arch, None
    if scaling is not None:
        caveat = (f"serving {context} tokens of context, past the {trained} its rope scaling ({kind}) "
                  "declares: positions past it are extrapolated and answers there are less reliable")
        return arch, caveat
    factor = context / trained
    if extension == "yarn":
        scaling = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": trained}
    elif extension == "linear":
        scaling = {"rope_type": "linear", "factor": factor}
    effect = (f"answers past {trained} tokens degrade" if extension == "none" else
              f"without fine-tuning this lowers answer quality somewhat at every length, more past {trained} tokens")
    caveat = (f"serving {context} tokens of context, {factor:g}x the trained {trained}, through "
              f"{EXTENSION_NAMES[extension]} (model.context_extension): {effect}; "
              f"model.max_context = {trained} serves the model as trained")
    return attrs.evolve(arch, rope_scaling=scaling), caveat
