"""The DeepSeek V3.1 / R1 tool-call markers (each one added token in DeepSeek's vocabulary, ``｜``
being U+FF5C and ``▁`` U+2581), written by the dialect and named in the chat formats' tool list."""

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
EOS = "<｜end▁of▁sentence｜>"
