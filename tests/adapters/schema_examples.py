"""Request bodies for :mod:`tests.adapters.test_request_schemas`: ones agents send, which the
adapters accept, and ones that break a published schema's types, ranges or required fields, which
the adapters refuse (several were 500s before: an array or object where a name is looked up)."""

from __future__ import annotations

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ACCEPTED = {  # name -> bodies an agent sends, each accepted
    "chat": [
        {"messages": [{"role": "user", "content": "hi"}]},
        {"model": "m", "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
         "tools": [{"type": "function", "function": {"name": "weather", "parameters": WEATHER}}],
         "tool_choice": {"type": "function", "function": {"name": "weather"}}, "stop": ["", "x"] + ["s"] * 31,
         "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": WEATHER}},
         "max_completion_tokens": 3, "max_tokens": None, "n": 1.0, "temperature": 2, "top_k": -1, "seed": -5,
         "stream": True, "stream_options": {"include_usage": True}, "cache_salt": "s"},
    ],
    "messages": [
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "stream": 1},
        {"system": [{"type": "text", "text": "Be brief."}], "messages": [
            {"role": "system", "content": None},
            {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                         {"type": "document", "source": {"type": "text", "data": "doc"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "redacted_thinking"},
                                              {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": 0}]}],
         "tools": [{"name": "weather", "input_schema": WEATHER, "description": None},
                   {"type": "web_search_20250305", "name": "web_search"}],
         "tool_choice": {"type": "tool", "name": "weather"}, "stop_sequences": ["END"], "top_k": 0,
         "thinking": {"type": "enabled", "budget_tokens": 10}, "metadata": {"user_id": "u"}},
    ],
    "responses": [
        {"input": "hi"},
        {"instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "reasoning", "summary": [], "content": []},
            {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "some_future_item", "role": 5}, {"type": None}],
         "tools": [{"type": "function", "name": "weather", "parameters": WEATHER}, {"type": "web_search"},
                   {"type": "namespace", "name": "ns", "tools": [{"name": "inner"}, {"type": None}, 5]}],
         "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": []}, "background": False,
         "text": {"format": {"type": "json_schema", "name": "r", "schema": WEATHER}}, "truncation": "auto",
         "metadata": {"k" * 64: "v" * 512}, "include": ["message.output_text.logprobs"], "top_logprobs": 20,
         "max_output_tokens": 4, "reasoning": {"effort": "none"}, "store": False},
    ],
    "detokenize": [{"tokens": [1, 2, 3]}, {"tokens": [], "model": None}],
}
REFUSED = {  # name -> bodies the schema refuses, each also refused by the adapter
    "chat": [{}, {"messages": []}, {"messages": [{"role": "function", "content": "x"}]},
             {"messages": [{"role": "tool", "content": "x"}]}, {"messages": [{"role": "user"}], "temperature": 2.5},
             {"messages": [{"role": "user"}], "n": 2}, {"messages": [{"role": "user"}], "stop": ["s"] * 33},
             {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
             {"messages": [{"role": "user"}], "max_tokens": True}, {"messages": [{"role": "user"}], "cache_salt": ""}],
    "messages": [{"messages": []}, {"messages": [{"role": "user"}]}, {"messages": [{"role": "user", "content": 5}]},
                 {"messages": [{"role": "user", "content": "x"}], "temperature": 1.5},
                 {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                 {"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": ["auto"]}},
                 {"messages": [{"role": "user", "content": "x"}], "stop_sequences": [""]}],
    "responses": [{}, {"input": []}, {"instructions": ""}, {"input": 5}, {"input": "x", "background": True}, {"input": "x", "metadata": {"k": 5}},
                  {"input": [{"role": ["user"], "content": "x"}]},
                  {"input": [{"role": "user", "content": [{"type": {"a": 1}}]}]},
                  {"input": "x", "metadata": {str(i): "v" for i in range(17)}}, {"input": "x", "top_p": 1.5},
                  {"input": [{"type": "item_reference", "id": "x"}]}, {"input": "x", "truncation": "none"}],
    "detokenize": [{}, {"tokens": [1.5]}, {"tokens": [True]}, {"tokens": "1"}],
}
