"""The public surface: __all__, the error tree, options, URL splitting."""

from __future__ import annotations

import pytest

import durable_obj
from durable_obj import errors
from durable_obj.core.options import Options, make_options
from durable_obj.service.namespace import check_oid, split_object_url


def test_all_is_pinned() -> None:
    assert set(durable_obj.__all__) == {
        "AsyncDurableObject", "AsyncPool", "aopen",
        "BackendError", "Bounds", "ClassificationRefused", "Closed", "CommitAmbiguous", "Corrupt",
        "DurableError", "DurableObject", "EngineError", "EngineIncompatible", "HostLost",
        "InvalidArgument", "LeaseError", "LeaseFenced", "LeaseHeld", "LimitExceeded",
        "MissingDependency", "Namespace", "Nondeterministic", "NotFound", "Pool",
        "ProtocolUnsupported", "Result", "SecretRefused", "Timeout", "UnsupportedStore",
        "errors", "export", "fork", "open",
        "KeyRefused", "KeyProvider", "StaticKey", "EnvKey", "KeyFile", "AwsKms",
        "Change", "FeedGap", "Update", "configure_engine",
    }  # fmt: skip
    for name in durable_obj.__all__:
        assert hasattr(durable_obj, name)


def test_exception_tree() -> None:
    v1 = {
        "not_found", "lease_held", "lease_fenced", "engine_incompatible",
        "protocol_unsupported", "corrupt", "classification_refused", "secret_refused",
        "engine", "backend", "timeout", "commit_ambiguous", "limit_exceeded", "closed",
    }  # fmt: skip
    ours = {"nondeterministic", "invalid_argument", "host_lost", "key_refused"}
    assert v1 | ours == set(errors.CATEGORIES)
    for category, cls in errors.CATEGORIES.items():
        assert issubclass(cls, errors.DurableError)
        assert cls.category == category
    assert issubclass(errors.NotFound, FileNotFoundError)
    assert issubclass(errors.LeaseHeld, errors.LeaseError)
    assert issubclass(errors.LeaseFenced, errors.LeaseError)
    assert issubclass(errors.StoreAmbiguous, errors.BackendError)
    assert issubclass(errors.Timeout, TimeoutError)
    assert errors.UnsupportedStore.category == "invalid_argument"


@pytest.mark.parametrize(
    ("url", "ns", "oid"),
    [
        ("/abs/path/ns/agent-1", "/abs/path/ns", "agent-1"),
        ("memory://ns/agent-1", "memory://ns", "agent-1"),
        ("memory://agent-1", "memory://", "agent-1"),
        ("s3://bucket/prefix/agent-1", "s3://bucket/prefix", "agent-1"),
        ("rel/agent", "rel", "agent"),
        ("/agent", "/", "agent"),
    ],
)
def test_split_object_url(url: str, ns: str, oid: str) -> None:
    assert split_object_url(url) == (ns, oid)


@pytest.mark.parametrize("oid", ["", ".", "..", "a/b", "a\\b", "tab\there", "x" * 256])
def test_bad_object_ids(oid: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        check_oid(oid)


def test_options_defaults_and_errors() -> None:
    opts = make_options({})
    assert opts.lease_ttl == 30.0 and opts.heartbeat == pytest.approx(10.0)
    assert make_options({"lease_ttl": 9}).heartbeat == pytest.approx(3.0)
    with pytest.raises(errors.InvalidArgument, match="heartbeat_interval"):
        make_options({"lease_ttl": 9, "heartbeat_interval": 4})
    with pytest.raises(errors.InvalidArgument, match="unknown option"):
        make_options({"leese_ttl": 9})
    with pytest.raises(errors.InvalidArgument, match="lease_ttl"):
        make_options({"lease_ttl": -1})
    with pytest.raises(errors.InvalidArgument, match="lease_ttl"):
        make_options({"lease_ttl": float("inf")})


@pytest.mark.parametrize(
    ("name", "least"),
    [
        ("lease_ttl", 0.1),
        ("heartbeat_interval", 0.01),
        ("follow", 0.001),
        ("ttl_sweep_interval", 0.01),
    ],
)
def test_a_period_too_short_to_run_at_is_refused(name: str, least: float) -> None:
    """A period of 1e-300 s made a busy loop of the heartbeat scheduler."""
    for tiny in (1e-300, least / 2):
        with pytest.raises(errors.InvalidArgument, match=f"{name}: .*at least {least}"):
            make_options({name: tiny})
    assert getattr(make_options({name: least}), name) == least
    if name == "ttl_sweep_interval":
        assert make_options({name: 0}).ttl_sweep_interval == 0  # off


def test_an_external_folder_is_kept_as_the_path_it_names() -> None:
    opts = make_options({"external_reads": ["/a/../b/", "//data//in/", "url", "/"]})
    assert opts.external_reads == ("/b", "/data/in", "url", "/")


def test_options_take_any_real_number_and_refuse_what_is_no_value() -> None:
    """Numbers as numpy's, Decimal or Fraction too; never a bool, digits of
    other scripts, an integer past 2**53, text with a lone surrogate, or a
    bound that is no non-negative number."""
    import decimal
    import fractions

    import numpy as np

    from durable_obj.gate.bounds import Bounds

    opts = make_options(
        {
            "lease_ttl": np.int64(30),
            "clock_skew": decimal.Decimal("2.5"),
            "commit_deadline": fractions.Fraction(7, 2),
            "fetch_concurrency": np.int32(4),
            "fold_segments": 8.0,
            "auto_flush": np.bool_(True),
            "incremental_checkpoints": 0,
            "external_reads": False,
            "query_bounds": {"seconds": "2", "result_rows": np.int64(10)},
        }
    )
    assert (opts.lease_ttl, opts.clock_skew, opts.commit_deadline) == (30.0, 2.5, 3.5)
    assert (opts.fetch_concurrency, opts.fold_segments) == (4, 8)
    assert opts.auto_flush is True and opts.incremental_checkpoints is False
    assert opts.external_reads == () and opts.query_bounds == Bounds(2.0, 10)
    assert type(opts.fetch_concurrency) is int and type(opts.query_bounds.result_rows) is int
    assert opts.given()["lease_ttl"] == 30.0 and "db" not in opts.given()
    bad: list[tuple[str, object, str]] = [
        ("lease_ttl", True, "valid number"),
        ("lease_ttl", "\u0663", "valid number"),  # ARABIC-INDIC DIGIT THREE
        ("lease_ttl", "\uff11", "valid number"),  # FULLWIDTH DIGIT ONE
        ("fetch_concurrency", False, "valid integer"),
        ("fold_bytes", 1e300, "this large"),
        ("auto_flush", 2, "boolean"),
        ("db", "x\ud800", "lone surrogate"),
        ("timezone", "x\ud800", "lone surrogate"),
        ("description", "x\ud800", "lone surrogate"),
        ("external_reads", 5, "list"),
        ("external_reads", {"url": 1}, "list"),
        ("query_bounds", {"seconds": -1}, "seconds"),
        ("write_bounds", {"seconds": "x"}, "seconds"),
        ("write_bounds", {"seconds": 1e303}, "seconds"),
        ("query_bounds", {"result_rows": 10**100}, "result_rows"),
        ("query_bounds", {"bogus": 1}, "not a bound"),
        ("nondeterminism", np.array(["pin"]), "'pin' or 'refuse'"),
        ("external_reads", np.array(["url"]), "list"),
        ("description", "a\u2028b", "one line"),
        ("fold_bytes", 10**100, "less than or equal"),
    ]
    for name, value, words in bad:
        with pytest.raises(errors.InvalidArgument, match=f"option {name}: .*{words}"):
            make_options({name: value})

    class Odd(float):
        def __float__(self) -> float:
            raise ZeroDivisionError

    with pytest.raises(errors.InvalidArgument, match=r"option lease_ttl: .*ZeroDivisionError"):
        make_options({"lease_ttl": Odd(3.0)})
    for bounds in ({"seconds": "5"}, {"seconds": float("nan")}, {"memory_bytes": True}):
        with pytest.raises(errors.InvalidArgument, match="Bounds"):
            Bounds(**bounds)  # type: ignore[arg-type]  # also as query(bounds=...) takes it


def test_a_str_subclass_is_taken_as_its_text() -> None:
    """A StrEnum member or numpy string (an owner, a db, a choice) is its
    text, a plain str, in options and in the head alike."""
    import enum

    import numpy as np

    from durable_obj.wire.head import Lease

    class Mode(enum.StrEnum):
        PIN = "pin"

    opts = make_options({"db": np.str_("mem"), "nondeterminism": Mode.PIN})
    assert (opts.db, opts.nondeterminism) == ("mem", "pin")
    assert type(opts.db) is str and type(opts.nondeterminism) is str
    lease = Lease(generation=1, owner=Mode.PIN, instance=np.str_("i"), expires_at=1.0)
    assert type(lease.owner) is str and type(lease.instance) is str


def test_namespace_documents_every_option() -> None:
    """The option list in Namespace's docstring does not go stale."""
    doc = durable_obj.Namespace.__doc__ or ""
    missing = [name for name in Options.names() if name not in doc]
    assert not missing, f"Namespace's docstring does not name {missing}"
