"""The Llama family (Llama, Qwen2): architecture and weights, the forward, and the parts of
:class:`kvgate.models.kv_runtime.KVRuntime` that serve it (:mod:`.runtime`).

Its plugin, the ``llama`` entry point, is :mod:`kvgate.models.llama.plugin`.
"""
