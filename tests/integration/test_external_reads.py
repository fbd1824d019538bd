"""Issue 26: an opt-in lets a read-only query() read external data (url(),
s3(), file() under named folders), as V1 allows; off by default, never a
mutation, a credential never in an error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import durable_obj
from durable_obj import errors
from tests.tenants import web as serving


@pytest.fixture(scope="module")
def web() -> Iterator[str]:
    with serving(b"from-url\n") as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/x.csv"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    inside = tmp_path / "in"
    inside.mkdir()
    (inside / "a.csv").write_text("from-file\n")
    (tmp_path / "outside.csv").write_text("secret\n")
    os.symlink(tmp_path / "outside.csv", inside / "escape.csv")
    return inside


def test_off_by_default(tmp_path: Path, files: Path, web: str) -> None:
    with durable_obj.open(str(tmp_path / "o"), owner="t") as obj:
        for sql in (f"SELECT * FROM url('{web}', CSV, 'x String')",
                    f"SELECT * FROM file('{files}/a.csv', CSV, 'x String')"):  # fmt: skip
            with pytest.raises(errors.ClassificationRefused):
                obj.query(sql)


def test_a_read_may_reach_what_the_opt_in_names(tmp_path: Path, files: Path, web: str) -> None:
    with durable_obj.open(
        str(tmp_path / "o"), owner="t", external_reads=("url", str(files))
    ) as obj:
        obj.execute("CREATE TABLE t (x String) ENGINE = MergeTree ORDER BY x")
        obj.execute("INSERT INTO t VALUES ('from-url'), ('mine')")
        assert obj.rows(f"SELECT x FROM url('{web}', CSV, 'x String')") == [("from-url",)]
        joined = obj.rows(f"SELECT t.x FROM t JOIN url('{web}', CSV, 'x String') AS u ON t.x = u.x")
        assert joined == [("from-url",)]
        assert obj.rows(f"SELECT * FROM file('{files}/a.csv', CSV, 'x String')") == [("from-file",)]
        for sql in (
            f"SELECT * FROM file('{files.parent}/outside.csv', CSV, 'x String')",
            f"SELECT * FROM file('{files}/../outside.csv', CSV, 'x String')",
            f"SELECT * FROM file('{files}/escape.csv', CSV, 'x String')",  # a symlink out
            f"SELECT * FROM file('{files}/*.csv', CSV, 'x String')",  # a glob follows it too
            f"SELECT file('{files}/a.csv')",  # the scalar function: still refused
            "SELECT * FROM s3('http://127.0.0.1:9/b/k.csv', CSV, 'x String')",  # not named
        ):
            with pytest.raises(errors.ClassificationRefused):
                obj.query(sql)
        # never a mutation, with or without the opt-in
        for sql in (
            f"INSERT INTO t SELECT * FROM url('{web}', CSV, 'x String')",
            f"INSERT INTO t SELECT * FROM file('{files}/a.csv', CSV, 'x String')",
        ):
            with pytest.raises((errors.ClassificationRefused, errors.Nondeterministic)):
                obj.execute(sql)
        assert obj.rows("SELECT count() FROM t") == [(2,)]


def test_a_credential_never_shows_in_an_error(tmp_path: Path) -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    with durable_obj.open(str(tmp_path / "o"), owner="t", external_reads="s3") as obj:
        with pytest.raises(errors.DurableError) as info:
            obj.query(
                f"SELECT * FROM s3('http://127.0.0.1:9/b/k.csv', 'AKIAEXAMPLE', '{secret}', "
                "CSV, 'x String')"
            )
        assert secret not in str(info.value)
        assert info.value.__cause__ is None or secret not in str(info.value.__cause__)


def test_the_option_is_checked(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidArgument, match="external_reads"):
        durable_obj.open(str(tmp_path / "o"), owner="t", external_reads=("relative/dir",))
