"""The V1 contract: what is stored, byte for byte, and what chdb.durable reads.

    protocol  versions, layout (head.json, wal/, checkpoints/), key names
    head      the head manifest: parse, check, render; the CAS target
    wal       one WAL segment: JSONL lines, their checksums, their order
    digest    sha256 of every stored artifact, streamed
    lease     the single-writer lease inside the head, and its fencing
    v1base    a base of the `default` database shaped as chdb.durable writes it

Nothing here touches a network, an engine or a file: the modules take and
give bytes and values. May import: `durable_obj.errors` and each other.
"""
