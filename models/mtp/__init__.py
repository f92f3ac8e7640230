"""The multi-token-prediction (MTP) draft layer of GLM-4.5 over the Llama runtime's machinery: its
weights (:mod:`.weights`), its per-session state (:mod:`.state`), the draft head (:mod:`.head`) and
the runtime mixin that feeds it the main model's hidden states (:mod:`.runtime`).
"""
