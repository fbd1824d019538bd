"""Reads before the client: an S3 store whose every setting is given, read
through `s3reads.FastReads` without importing s3fs or botocore.

Importing s3fs and aiobotocore costs a fresh process 0.3-0.4 s, and making
the client another 0.25-0.3 s (botocore's service model), before the first
byte of a cold open is asked for. Where the store's `storage_options` leave
botocore nothing to look up, where a GET goes and how it is signed follow
from them alone, and the store's reads go out at once:

* keys given: `key` and `secret` (and `token`), which botocore takes before
  any other source of credentials;
* an `endpoint_url` over plain HTTP whose host is an IP address, with no
  path: botocore sends every request to it in path style
  (`/bucket/key`), whatever the bucket's name;
* a region given (`client_kwargs` or `config_kwargs` `region_name`), which
  the signature names;
* keys, token and region that are plain header text (printable ASCII);
* nothing else that changes a request: no other option, no fsspec
  configuration for s3, no AWS config
  file (or an empty one) or profile, no `AWS_*` setting but those the
  given options override or a plain GET never uses (`_OVERRIDDEN_ENV`),
  no proxy.

Anything else builds the client first, as before; so does every write, and
every read this one does not take as is (`FastReads`: a missing key, a
refusal, a redirect, a body without a length, a failed connection), so a
missing bucket or a wrong key is still named by the client's own error.
`tests/stores/test_s3static.py` holds the target here equal to the one read
off a URL the client presigns, for every shape of options it accepts.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from typing import Any
from urllib.parse import urlsplit

from durable_obj.stores import s3reads

#: The storage_options a store read this way may hold.
OPTIONS = frozenset(
    {"key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs"}
    | {"skip_instance_cache"}
)
_CLIENT_KWARGS = frozenset({"region_name", "endpoint_url"})
#: `retries` is the store's own setting (see `s3client.S3Base`).
_CONFIG_KWARGS = frozenset({"region_name", "retries", "connect_timeout", "read_timeout"})
#: `AWS_*` variables the given options override (keys, region, retries),
#: or that a plain HTTP GET with given keys never uses (how credentials are
#: otherwise found, a CA bundle); the config file is judged apart.
_OVERRIDDEN_ENV = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}
    | {"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"}
    | {"AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED", "AWS_CA_BUNDLE"}
    | {"AWS_METADATA_SERVICE_TIMEOUT", "AWS_METADATA_SERVICE_NUM_ATTEMPTS", "AWS_CONFIG_FILE"}
)
#: A bucket name S3 accepts (lower case, digits, dots and hyphens).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
#: What the keys may hold to go into a request's headers as they are
#: (printable ASCII, no space): anything else is the client's to judge
#: (found by attack: a CR or LF in a token, a key or a region made a
#: header, or a second request, of its own).
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")
#: A region as botocore accepts one.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


def static_reads(opts: dict[str, Any], bucket: str) -> s3reads.FastReads | None:
    """The batched reader for a store of these (validated) options whose
    GETs follow from them alone, or None."""
    found = _target(opts, bucket)
    if found is None:
        return None
    config = opts.get("config_kwargs") or {}
    timeout = float(config.get("read_timeout") or 60)
    return s3reads.FastReads(found, None, timeout)


def static_credentials(opts: dict[str, Any]) -> s3reads.Credentials:
    """The keys given (`static_reads` returned a reader for `opts`)."""
    return s3reads.Credentials(opts["key"], opts["secret"], opts.get("token") or None)


def _target(opts: dict[str, Any], bucket: str) -> s3reads.Target | None:
    if not set(opts) <= OPTIONS:
        return None
    key, secret, token = opts.get("key"), opts.get("secret"), opts.get("token")
    if not (isinstance(key, str) and isinstance(secret, str) and _safe(key) and _safe(secret)):
        return None
    if token is not None and not (isinstance(token, str) and _safe(token)):
        return None
    client = opts.get("client_kwargs") or {}
    config = opts.get("config_kwargs") or {}
    if not isinstance(client, dict) or not set(client) <= _CLIENT_KWARGS:
        return None
    if not isinstance(config, dict) or not set(config) <= _CONFIG_KWARGS:
        return None
    endpoint = opts.get("endpoint_url") or client.get("endpoint_url")
    region = client.get("region_name") or config.get("region_name")
    if not isinstance(endpoint, str) or not isinstance(region, str):
        return None
    if not _REGION.fullmatch(region) or _fsspec_configured():
        return None
    if not _BUCKET.fullmatch(bucket) or _configured_elsewhere() or s3reads.proxies_configured({}):
        return None
    try:
        parts = urlsplit(endpoint)
        port = 80 if parts.port is None else parts.port
        ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return None
    if not 0 < port < 65536 or parts.netloc.endswith(":"):
        return None  # port 0, or none after the colon: the client's to judge
    if (
        parts.scheme != "http"
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
        or parts.password is not None
        or parts.hostname is None
    ):
        return None
    return s3reads.Target(
        scheme="http",
        host=parts.netloc,
        hostname=parts.hostname,
        port=port,
        path_prefix=f"/{bucket}/",
        region=region,
    )


def _safe(text: str) -> bool:
    return _HEADER_SAFE.fullmatch(text) is not None


#: The protocols s3fs's filesystem answers to: fsspec applies the
#: configuration of each to every S3FileSystem (`apply_config`).
S3FS_PROTOCOLS = ("s3", "s3a")


def _fsspec_configured() -> bool:
    """Whether fsspec's own configuration (`FSSPEC_S3_*` and `FSSPEC_S3A_*`
    variables, its config folder) may give s3fs defaults: the client would
    take them (found by attack: a configuration under `s3a` was missed).

    Once fsspec is imported, its `conf` says (a program may have changed
    it). Before, fsspec is not imported to ask (it costs a cold open about
    50 ms): any `FSSPEC_*` variable but the folder's, or any `.ini` or
    `.json` file in the folder fsspec reads (`FSSPEC_CONFIG_DIR`, else
    ~/.config/fsspec), counts as configured, a superset of what fsspec
    would read for s3."""
    config = sys.modules.get("fsspec.config")
    if config is not None:
        conf = getattr(config, "conf", {})
        return any(conf.get(protocol) for protocol in S3FS_PROTOCOLS)
    if any(name.startswith("FSSPEC_") and name != "FSSPEC_CONFIG_DIR" for name in os.environ):
        return True
    folder = os.environ.get("FSSPEC_CONFIG_DIR") or os.path.join(
        os.path.expanduser("~"), ".config", "fsspec"
    )
    try:
        names = os.listdir(folder)
    except OSError:
        return False  # no such folder: nothing to read
    return any(name.endswith((".ini", ".json")) for name in names)


def _configured_elsewhere() -> bool:
    """Whether botocore would read settings from the environment or a file
    (a profile, a config file that is not empty, an `AWS_*` variable the
    options do not override)."""
    if any(name.startswith("AWS_") and name not in _OVERRIDDEN_ENV for name in os.environ):
        return True
    config = os.environ.get("AWS_CONFIG_FILE") or os.path.join("~", ".aws", "config")
    try:
        return os.path.getsize(os.path.expanduser(config)) > 0
    except OSError:
        return False  # no such file
