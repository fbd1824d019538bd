"""A credential never reaches a WAL segment, an error message or a log record."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.stores import open_store
from tests.integration import replay_child

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


#: Statements whose kind and credential both refuse them: V1 judges the kind
#: (control, global) before the secret, then the secret before a database's
#: lifecycle. Plus one it cannot classify.
GATED = [
    "CREATE NAMED COLLECTION nc AS key = 'value'",
    f"ALTER NAMED COLLECTION nc SET key = '{SECRET}'",
    f"CREATE USER u2 IDENTIFIED BY '{SECRET}'",
    f"CREATE DATABASE d ENGINE = MySQL('127.0.0.1:9', 'db', 'user', '{SECRET}')",
    f"INSERT INTO t SELECT * FROM s3('http://127.0.0.1:9/b/x.csv', '{KEY_ID}', '{SECRET}', 'CSV')",
    "SELEC 1",
]


@pytest.mark.slow
def test_statement_kind_is_judged_before_its_secrets_as_in_v1(tmp_path: Path) -> None:
    def answers(impl: str) -> list[list[str]]:
        params = {"statements": GATED, "oid": "o", "impl": impl, "url": str(tmp_path / impl)}
        outcomes: list[list[str]] = replay_child.run("categories", "UTC", params)["outcomes"]
        return outcomes

    ours, v1 = answers("durable_obj"), answers("chdb.durable")
    assert [c for c, _ in ours] == [c for c, _ in v1]
    assert ours[0][0] == "classification_refused"
    assert ours[3][0] == "secret_refused"
    unclassified = ours[-1]
    assert unclassified[0] == "classification_refused" and "could not classify" in unclassified[1]
    for _, message in ours:
        assert SECRET not in message and KEY_ID not in message
