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

from kvgate.core.fence.build import build_request_fence, prepare_fences
from kvgate.core.fence.errors import FenceError, FenceRequestError
from kvgate.core.fence.request import RequestFence
from kvgate.core.fence.schema_preparer import check_schema_limits
from kvgate.core.fence.tokens import TokenizerInfo, tokenizer_info

__all__ = ["build_request_fence", "check_schema_limits", "prepare_fences", "tokenizer_info", "RequestFence",
           "TokenizerInfo", "FenceError", "FenceRequestError"]
