"""The Llama-family runtime (Llama, Qwen2): architecture and weights, forward passes, the runtime.

Its plugin, the ``llama`` entry point, is :mod:`kvgate.models.llama.plugin`.
"""
