"""The Gemma 4 text runtime (``gemma4``): sliding-window and full attention layers with their own
head widths and rope, Gemma's norms (q/k/v norms, sandwich norms around attention and MLP),
scaled embeddings, per-layer inputs, KV-shared layers, the MoE block beside the MLP and soft-capped
logits, its forward composed in this package over the shared pool, rope and invariant attention.

Every layer keeps every token's K/V (a sliding layer's window is a mask), so state can be cut at
any token. :mod:`.arch` refuses, naming the key, what it cannot serve exactly. The plugin, the
``gemma4`` entry point, is :mod:`.plugin`; its tool calls are the ``gemma4`` dialect.
"""
