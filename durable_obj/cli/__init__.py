"""`durable-obj`: inspect and administer durable objects from a shell.

    durable-obj ls s3://bucket/agents -o endpoint_url=http://127.0.0.1:9000 -o key=... -o secret=...
    durable-obj info /srv/agents/checkout-api
    durable-obj sql /srv/agents/checkout-api "SELECT count() FROM memories"
    durable-obj exec /srv/agents/checkout-api "DELETE FROM memories WHERE id = 7"
    durable-obj verify /srv/agents/checkout-api --restore
    durable-obj history /srv/agents/checkout-api
    durable-obj tail /srv/agents/checkout-api --since 0 --json
    durable-obj sql /srv/agents/checkout-api "SELECT count() FROM memories" --at 2026-05-01T14:03Z
    durable-obj sql /srv/agents/vault "SELECT count() FROM memories" --key-env AGENT_KEY

An object URL's last path segment is the object id; the rest is its
namespace. Every command takes repeated `-o/--storage-option key=value`
(dotted keys nest: `-o client_kwargs.region_name=eu-west-1`), passed to the
store as `storage_options`.

Every failure is one line on stderr, `error: <category>: <message>`, and a
non-zero exit: 2 for bad input (category `invalid_argument`), 1 otherwise.
Values of storage options whose key names a credential (secret, key, token,
password, credential, connection_string) are replaced by `***` wherever they
would appear in the output.

The commands use only the public API (`Namespace`, `durable_obj.core.ops`).
An encrypted object's key goes in by name, never as a value:
`--key-env VAR`, `--key-file PATH` or `--kms-key KEY_ID` (`keys`).

Layout: `app` (the command group, failure and warning handling), `read`
(ls, info, verify, sql), `write` (exec), `admin` (checkpoint, gc, fork,
rotate-key, release), `exporting` (export), `history` (history, and --at
for sql and fork), `tail` (the change feed, like tail -f), `mcp` (the MCP memory server),
and private helpers: `failures`, `redaction`, `options` (`-o` parsing),
`session` (per-invocation output), `keys` (the key options), `progress`,
`formatting`.

Needs the `cli` extra: `pip install 'durable_obj[cli]'`.
"""

from __future__ import annotations

# Importing the command modules registers their commands on the group.
from durable_obj.cli import admin, exporting, history, mcp, read, tail, write
from durable_obj.cli.app import cli, main

__all__ = ["admin", "cli", "exporting", "history", "main", "mcp", "read", "tail", "write"]
