"""Data keys wrapped by AWS KMS (`durable_obj.AwsKms`), against moto's KMS:
an encrypted object opens with its KMS key only, a wrapped key copied into
another object does not unwrap there (the encryption context), a refusal
names the key id and never a credential, and rotation moves between a
static key and a KMS key in one head write."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import durable_obj
from durable_obj import AwsKms, KeyRefused, StaticKey

DDL = "CREATE TABLE m (k String, v String) ENGINE = MergeTree ORDER BY k"
SECRET = "kms-test-secret-never-shown"


@pytest.fixture
def kms() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client(
            "kms",
            region_name="us-east-1",
            aws_access_key_id="kms-test-access",
            aws_secret_access_key=SECRET,
        )


def _key(kms: Any) -> str:
    return str(kms.create_key(Description="durable_obj test")["KeyMetadata"]["KeyId"])


def test_an_object_under_a_kms_key_opens_with_that_key_only(kms: Any, tmp_path: Path) -> None:
    one, two = AwsKms(_key(kms), client=kms), AwsKms(_key(kms), client=kms)
    url = str(tmp_path / "ns" / "o")
    with durable_obj.open(url, owner="w", encryption=one) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 'b')")
        obj.flush()
        obj.checkpoint()  # a second data key, wrapped by KMS too
        obj.execute("INSERT INTO m VALUES ('c', 'd')")
    head = json.loads(Path(url, "head.json").read_bytes())
    entries = head["durable_obj"]["encryption"]["keys"]
    assert len(entries) == 2 and {e["kek"] for e in entries} == {one.key_id}
    with durable_obj.open(url, read_only=True, encryption=one) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "2\n"
    with pytest.raises(KeyRefused, match=one.key_id) as info:
        durable_obj.open(url, read_only=True, encryption=two)
    assert SECRET not in str(info.value)


def test_a_wrapped_key_copied_into_another_object_does_not_unwrap(kms: Any, tmp_path: Path) -> None:
    key = AwsKms(_key(kms), client=kms)
    ns = tmp_path / "ns"
    for oid in ("a", "b"):
        with durable_obj.open(str(ns / oid), owner="w", encryption=key) as obj:
            obj.execute(DDL)
    a = json.loads((ns / "a" / "head.json").read_bytes())
    b = json.loads((ns / "b" / "head.json").read_bytes())
    b["durable_obj"]["encryption"] = a["durable_obj"]["encryption"]  # a's data key into b
    (ns / "b" / "head.json").write_text(json.dumps(b))
    with pytest.raises(KeyRefused, match="refused to unwrap: InvalidCiphertextException") as info:
        durable_obj.open(str(ns / "b"), read_only=True, encryption=key)
    assert SECRET not in str(info.value)


def test_rotation_between_a_static_key_and_kms(kms: Any, tmp_path: Path) -> None:
    static, cloud = StaticKey(os.urandom(32)), AwsKms(_key(kms), client=kms)
    url = str(tmp_path / "ns" / "o")
    with durable_obj.open(url, owner="w", encryption=static) as obj:
        obj.execute(DDL)
        obj.execute("INSERT INTO m VALUES ('a', 'b')")
        obj.flush()
        assert obj.rotate_key(cloud) == 1
    with pytest.raises(KeyRefused, match=cloud.key_id):
        durable_obj.open(url, read_only=True, encryption=static)
    with durable_obj.open(url, owner="w", encryption=cloud) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "1\n"
        assert obj.rotate_key(static) == 1
    with durable_obj.open(url, read_only=True, encryption=static) as obj:
        assert obj.query("SELECT count() FROM m", "TSV") == "1\n"
