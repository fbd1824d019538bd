"""A credential never reaches a WAL segment, an error message or a log record."""

from __future__ import annotations

import logging

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.stores import open_store

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"

CARRIERS = [
    f"INSERT INTO t SELECT * FROM s3('http://127.0.0.1:9/b/x.csv', '{KEY_ID}', '{SECRET}', 'CSV')",
    f"CREATE TABLE s3t (a String) ENGINE = S3('http://127.0.0.1:9/b/x.csv', '{KEY_ID}', "
    f"'{SECRET}', 'CSV')",
    f"INSERT INTO t SELECT * FROM mysql('127.0.0.1:9', 'db', 'tbl', 'user', '{SECRET}')",
    f"CREATE USER u IDENTIFIED BY '{SECRET}'",
    f"INSERT INTO t SELECT * FROM postgresql('127.0.0.1:9', 'db', 'tbl', 'user', '{SECRET}')",
]


@pytest.mark.parametrize("sql", CARRIERS)
def test_credentials_are_refused_and_never_stored_or_shown(
    ns_url: str, sql: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="durable_obj")
    messages = []
    with durable_obj.open(f"{ns_url}/o", owner="w") as obj:
        obj.execute("CREATE TABLE t (a String) ENGINE = MergeTree ORDER BY a")
        with pytest.raises((errors.SecretRefused, errors.ClassificationRefused)) as info:
            obj.execute(sql)
        messages.append(str(info.value))
        # the pinning path never sees it either: refused before anything runs
        assert obj.pending == 1
        # a read-only statement carrying a credential runs, and its failure is redacted
        with pytest.raises(errors.DurableError) as failed:
            obj.query(f"SELECT * FROM s3('http://127.0.0.1:9/b/x.csv', '{KEY_ID}', '{SECRET}')")
        messages.append(str(failed.value))
        obj.flush()
        obj.checkpoint()
    store = open_store(ns_url)
    stored = b"".join(
        blob.data for e in store.list_keys() if (blob := store.get(e.key)) is not None
    )
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in (SECRET, KEY_ID):
        assert secret.encode() not in stored, "a credential reached storage"
        assert secret not in logged, "a credential reached the log"
        for message in messages:
            assert secret not in message, f"a credential reached an error: {message}"
