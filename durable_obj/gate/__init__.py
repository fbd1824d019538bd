"""The statement gate: what a statement means is what the engine reads.

Every statement from every caller (execute, query, params, the CLI, MCP,
LangGraph, Ray, and every replayed WAL line) passes `reading.engine_text`
first: the text it returns is the text every later check reads, the text
that runs and the text that is logged. Then `reach.check` refuses, whatever
flag is set, anything that reaches past the object: files, the network,
another database, the engine's configuration.

May import: `durable_obj.errors`, `durable_obj.sql` (the lexer, used only
on text the engine has vouched for), and `durable_obj.engine` for types.
"""
