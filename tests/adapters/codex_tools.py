"""Codex 0.171's tools as its request sends them (an ``additional_tools`` input item holding
namespaces), cut to a few tools with their first description line: the custom ``exec`` tool with
its Lark grammar verbatim, next to function tools."""

EXEC_GRAMMAR = '\nstart: pragma_source | plain_source\npragma_source: PRAGMA_LINE NEWLINE SOURCE\nplain_source: SOURCE\n\nPRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\nNEWLINE: /\\r?\\n/\nSOURCE: /[\\s\\S]+/\n'

NAMESPACES = [{'type': 'namespace',
  'name': 'functions',
  'description': '',
  'tools': [{'type': 'custom',
             'name': 'exec',
             'description': 'Run JavaScript code to orchestrate/compose tool calls',
             'format': {'type': 'grammar',
                        'syntax': 'lark',
                        'definition': '\n'
                                      'start: pragma_source | plain_source\n'
                                      'pragma_source: PRAGMA_LINE NEWLINE SOURCE\n'
                                      'plain_source: SOURCE\n'
                                      '\n'
                                      'PRAGMA_LINE: /[ \\t]*\\/\\/ @exec:[^\\r\\n]*/\n'
                                      'NEWLINE: /\\r?\\n/\n'
                                      'SOURCE: /[\\s\\S]+/\n'}},
            {'type': 'function',
             'name': 'wait',
             'description': 'Waits on a yielded `exec` cell and returns new output or completion.',
             'strict': False,
             'parameters': {'type': 'object',
                            'properties': {'cell_id': {'type': 'string',
                                                       'description': 'Identifier of the running exec cell.'},
                                           'max_tokens': {'type': 'number',
                                                          'description': 'Output token budget for this wait call. '
                                                                         'Defaults to 10000 tokens.'},
                                           'terminate': {'type': 'boolean',
                                                         'description': 'True stops the running exec cell; false '
                                                                        'or omitted waits for output.'},
                                           'yield_time_ms': {'type': 'number',
                                                             'description': 'Wait before yielding more output. '
                                                                            'Defaults to 10000 ms.'}},
                            'required': ['cell_id'],
                            'additionalProperties': False}},
            {'type': 'function',
             'name': 'send_message_to_user_async',
             'description': "Send a concise message that needs the user's attention during ongoing work. The tool "
                            'returns immediately without ending the turn or waiting for a reply; any rep',
             'strict': False,
             'parameters': {'type': 'object',
                            'properties': {'message': {'type': 'string',
                                                       'description': 'The concise question or update to send to '
                                                                      'the user.'}},
                            'required': ['message'],
                            'additionalProperties': False}}]},
 {'type': 'namespace',
  'name': 'clock',
  'description': 'Tools for reading and waiting on time.',
  'tools': [{'type': 'function',
             'name': 'sleep',
             'description': 'Pause execution for a specified duration. The sleep ends early when new input arrives '
                            'for the active turn. Returns the elapsed wall-clock time.',
             'strict': False,
             'parameters': {'type': 'object',
                            'properties': {'duration_ms': {'type': 'number',
                                                           'description': 'How long to sleep in milliseconds. Must '
                                                                          'be between 1 and 43200000.'}},
                            'required': ['duration_ms'],
                            'additionalProperties': False}}]},
 {'type': 'namespace',
  'name': 'collaboration',
  'description': 'Tools for spawning and managing sub-agents.',
  'tools': [{'type': 'function',
             'name': 'interrupt_agent',
             'description': "Interrupt an agent's current turn, if any, and return its previous status. The agent "
                            'remains available for messages and follow-up tasks.',
             'strict': False,
             'parameters': {'type': 'object',
                            'properties': {'target': {'type': 'string',
                                                      'description': 'Agent id or canonical task name to interrupt '
                                                                     '(from spawn_agent).'}},
                            'required': ['target'],
                            'additionalProperties': False}},
            {'type': 'function',
             'name': 'list_agents',
             'description': 'List live agents in the current root thread tree. Optionally filter by task-path '
                            'prefix.',
             'strict': False,
             'parameters': {'type': 'object',
                            'properties': {'path_prefix': {'type': 'string',
                                                           'description': 'Task-path prefix filter without a '
                                                                          'trailing slash. Omit to list all live '
                                                                          'agents.'}},
                            'additionalProperties': False}}]}]


def additional_tools_item() -> dict:
    return {"type": "additional_tools", "id": "at_codex", "role": "developer", "tools": NAMESPACES}
