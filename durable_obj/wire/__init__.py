"""The V1 contract: what is stored, byte for byte, and what chdb.durable reads.

    protocol  versions, layout (head.json, wal/, checkpoints/), key names
    head      the head manifest: parse, check, render; the CAS target
    wal       one WAL segment: JSONL lines, their checksums, their order
    digest    sha256 of every stored artifact, streamed
    lease     the single-writer lease inside the head, and its fencing
    v1base    a base of the `default` database shaped as chdb.durable writes it
    sealing   sealed (AES-256-GCM, streamed) and zstd blobs; an object's codec
    sealer    a base sealed as BACKUP writes it, chunks encrypted in parallel
    unsealing a sealed base opened into a local file, chunks in parallel
    keyring   an object's encryption and compression as its head records them
    keys      key providers: StaticKey, EnvKey, KeyFile, AwsKms
    untrusted JSON read from a store, its depth bounded before parsing

Nothing here touches an engine or a store: the modules take and give bytes,
values and local files. The one exception is a key provider, which may
call the caller's key service (AwsKms). May import: `durable_obj.errors`
and each other.
"""
