"""`file:` URLs are percent-decoded as RFC 8089 says, and name the folder
chdb.durable names for the same URL; `local:` and bare paths are literal."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

import durable_obj
from durable_obj.errors import InvalidArgument
from durable_obj.service.namespace import split_object_url
from durable_obj.stores import open_store, split_url
from durable_obj.stores.file import FileStore

#: Names a user may well have: a space, non-ASCII (NFC and NFD), a literal
#: percent sign, and characters a URL gives a meaning to.
ODD_NAMES = ["a b", "été", "e\u0301te\u0301", "日本 語", "50%", "a%20b", "x#y", "q?", "+&=;@:,"]


def file_url(path: str) -> str:
    return "file://" + quote(path, safe="/")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("file:///srv/a%20b/ns", "/srv/a b/ns"),
        ("file:///srv/%C3%A9t%C3%A9/ns", "/srv/été/ns"),
        ("file:///srv/%E6%97%A5%E6%9C%AC", "/srv/日本"),
        ("file://localhost/srv/a%20b", "/srv/a b"),
        ("file://LOCALHOST/srv", "/srv"),
        ("FILE:///srv/x", "/srv/x"),
        ("file:/srv/a%20b", "/srv/a b"),
        ("file:///srv/a%2520b", "/srv/a%20b"),
        ("file:///srv/already decoded", "/srv/already decoded"),
        ("file:////srv//x/", "/srv/x"),
        ("file://", "/"),
        ("file:///", "/"),
        # literal forms: no decoding
        ("local:/srv/a%20b", "/srv/a%20b"),
        ("local:///srv/a%20b", "/srv/a%20b"),
        ("/srv/a%20b", "/srv/a%20b"),
    ],
)
def test_split_url_decodes_file_urls_only(url: str, path: str) -> None:
    assert split_url(url) == ("file", path)


def test_relative_file_url_is_relative_to_the_working_directory() -> None:
    assert split_url("file:rel/a%20b") == ("file", os.path.abspath("rel/a b"))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("file://server/share/ns", "names the host 'server'"),
        ("file://tmp/ns", "three slashes"),
        ("file:///srv/ns?x=1", "query or fragment"),
        ("file:///srv/ns#frag", "%23"),
        ("file:///srv/%FF%FE", "not UTF-8"),
        ("file:///srv/a%00b", "NUL"),
    ],
)
def test_unusable_file_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why) as info:
        open_store(url)
    assert info.value.category == "invalid_argument"
    assert url in str(info.value)


@pytest.mark.parametrize(
    ("url", "ns", "oid"),
    [
        ("file:///srv/a%20b/ns/agent%201", "file:///srv/a%20b/ns", "agent 1"),
        ("file:///srv/ns/%C3%A9t%C3%A9", "file:///srv/ns", "été"),
        ("file:///srv/ns/50%25", "file:///srv/ns", "50%"),
        ("file:/srv/ns/a%20b", "file:/srv/ns", "a b"),
        # literal everywhere else
        ("/srv/ns/a%20b", "/srv/ns", "a%20b"),
        ("local:/srv/ns/a%20b", "local:/srv/ns", "a%20b"),
        ("memory://ns/a%20b", "memory://ns", "a%20b"),
        ("s3://bucket/ns/a%20b", "s3://bucket/ns", "a%20b"),
    ],
)
def test_object_url_id_is_decoded_in_file_urls(url: str, ns: str, oid: str) -> None:
    assert split_object_url(url) == (ns, oid)


def test_encoded_slash_in_an_id_is_not_an_id() -> None:
    import durable_obj

    with pytest.raises(InvalidArgument, match="invalid object id 'a/b'"):
        durable_obj.open("file:///srv/ns/a%2Fb", read_only=True)


@pytest.mark.parametrize("name", ODD_NAMES)
def test_store_url_names_its_own_folder(tmp_path: Path, name: str) -> None:
    """A FileStore's URL is percent-encoded, so opening it again (as the
    conformance suite's child processes do) reaches the same folder."""
    root = tmp_path / name / "ns"
    store = FileStore(str(root))
    assert store.create("o/head.json", b"x") is not None
    again = open_store(store.url)
    assert isinstance(again, FileStore)
    blob = again.get("o/head.json")
    assert blob is not None and blob.data == b"x"
    assert (root / "o" / "head.json").read_bytes() == b"x"
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("name", ["a b", "été", "日本 語"])
def test_encoded_and_literal_urls_name_one_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name / "ns"
    by_encoded = open_store(file_url(str(folder)))
    assert by_encoded.create("o/head.json", b"1") is not None
    for url in (str(folder), f"local:{folder}"):
        blob = open_store(url).get("o/head.json")
        assert blob is not None and blob.data == b"1", url
    assert sorted(os.listdir(tmp_path)) == [name]


def test_open_through_a_file_url_with_a_space_and_non_ascii(tmp_path: Path) -> None:
    """The public API: the object lands in the decoded folder, under the
    decoded id, and a bare-path open of that folder finds it."""
    import durable_obj

    folder = tmp_path / "my data" / "été"
    url = file_url(str(folder / "ns" / "agent 1"))
    assert "%20" in url and "%C3%A9" in url
    with durable_obj.open(url, owner="w") as obj:
        obj.execute("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x")
        obj.execute("INSERT INTO t VALUES (7)")
        obj.flush()
    assert (folder / "ns" / "agent 1" / "head.json").is_file()
    assert sorted(os.listdir(tmp_path)) == ["my data"]
    with durable_obj.Namespace(str(folder / "ns")).open("agent 1", read_only=True) as obj:
        assert obj.query("SELECT x FROM t", "CSV").strip() == "7"


# -- the same folder as chdb.durable --------------------------------------------
def chdb_root(url: str, oid: str) -> str:
    from chdb.durable.backends import make_backend

    backend = make_backend(url, oid)
    root: str = backend.root  # type: ignore[attr-defined]
    return root


# chdb.durable runs even a `local:` URL and a bare path through urlparse, so
# a literal '#' or '?' cuts its path short there: those two pairs differ, and
# a name with them is written percent-encoded in a file: URL, where both agree.
SAME_FOLDER = [
    (name, form)
    for name in ODD_NAMES
    for form in ("file:///", "file:/", "local:", "bare")
    if form.startswith("file:") or not {"#", "?"} & set(name)
]


@pytest.mark.parametrize(("name", "form"), SAME_FOLDER)
def test_same_folder_as_chdb_durable(tmp_path: Path, name: str, form: str) -> None:
    base = os.path.realpath(tmp_path / name / "ns")
    if form == "file:///":
        url = "file://" + quote(base, safe="/")
    elif form == "file:/":
        url = "file:" + quote(base, safe="/")
    else:
        url = f"local:{base}" if form == "local:" else base
    protocol, path = split_url(url)
    assert protocol == "file"
    assert os.path.join(path, "o") == chdb_root(url, "o")


@given(
    segments=st.lists(
        st.text(
            st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"),
            min_size=1,
            max_size=8,
        ).filter(lambda s: s not in (".", "..")),
        min_size=1,
        max_size=4,
    )
)
def test_any_encoded_path_decodes_as_chdb_durable_does(segments: list[str]) -> None:
    path = "/tmp/durable-obj-url-test/" + "/".join(segments)
    url = "file://" + quote(path, safe="/")
    decoded = split_url(url)[1]
    assert decoded == os.path.abspath(path)
    assert os.path.realpath(os.path.join(decoded, "o")) == chdb_root(url, "o")


def test_the_zone_warning_only_when_the_engine_zone_really_differs() -> None:
    """Issue 26: TZ=Etc/UTC warned that the engine's zone "is Etc/UTC, not UTC"."""
    from durable_obj.replica.server import _is_utc

    for same in ("UTC", "Etc/UTC", "Etc/UCT", "GMT", "Etc/GMT+0", "Zulu", "Universal"):
        assert _is_utc(same), same
    for other in ("Europe/London", "Africa/Abidjan", "Asia/Tokyo", "no/such/zone", ""):
        assert not _is_utc(other), other


def test_a_url_ending_in_a_slash_names_a_folder_not_an_object(tmp_path: Path) -> None:
    """Issue 26: open("/data/agents/") opened the namespace folder itself as
    an object named `agents`, sharing wal/ and checkpoints/ with objects so named."""
    with pytest.raises(durable_obj.InvalidArgument, match="names a folder"):
        durable_obj.open(f"{tmp_path}/agents/", owner="w")
    assert not (tmp_path / "agents").exists()


@pytest.mark.parametrize(
    "oid", ["\ud800", "a\u202eb", "\ufeffagent", "zero\u200bwidth", "line\u2028sep"]
)
def test_object_ids_that_hide_what_they_are_are_refused(tmp_path: Path, oid: str) -> None:
    with pytest.raises(durable_obj.InvalidArgument, match="invalid object id"):
        durable_obj.Namespace(str(tmp_path), owner="w").open(oid)
    assert list(tmp_path.iterdir()) == []
