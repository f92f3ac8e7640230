"""The multi-token-prediction (MTP) draft layer of GLM-4.5 over the Llama forward's hidden states: its
weights (:mod:`.weights`), its per-session state (:mod:`.state`) and the draft head (:mod:`.head`),
which :class:`kvgate.models.kv_runtime.KVRuntime` feeds after every pass once it is attached.
"""
