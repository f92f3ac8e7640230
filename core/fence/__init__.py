"""Token fences: which tokens may be sampled next, for tool calls, structured output and guards.

Public API (engine thread):

* ``tokenizer_info(runtime_tokenizer, eos_token_ids)`` -> :class:`TokenizerInfo` (once per runtime);
* ``build_request_fence(request, dialect, tokenizer_info, config, pm, start_in="content")`` ->
  :class:`RequestFence` or None;
* ``prepare_fences(tokenizer_info, dialect, config, pm)``: the one-time work, at startup;
* ``check_schema_limits(request, tokenizer_info, config, pm)``: the schema preparer's cheap limits;
* :class:`RequestFence`: ``set_budget``, ``apply``, ``advance``, ``forced_tokens``, ``clone``,
  ``take_state``, ``must_stop``, ``guard_stop``, ``interventions``.
"""

import importlib
from typing import Any

# Each name is imported on first use, so that importing one torch-free submodule (the schema
# worker process imports errors, cancel, backend, ...) does not import build's chain and torch.
_HOMES = {"build_request_fence": "build", "prepare_fences": "build", "FenceError": "errors",
          "FenceRequestError": "errors", "RequestFence": "request", "check_schema_limits": "schema_preparer",
          "TokenizerInfo": "tokens", "tokenizer_info": "tokens"}

__all__ = ["build_request_fence", "check_schema_limits", "prepare_fences", "tokenizer_info", "RequestFence",
           "TokenizerInfo", "FenceError", "FenceRequestError"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
