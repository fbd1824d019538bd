"""The key options: which key an encrypted object is read or written with.

`key_options` adds `--key-env VAR` (an environment variable holding the key
as 64 hex digits or base64), `--key-file PATH` and `--kms-key KEY_ID` (AWS
KMS: region and credentials from the usual AWS environment, `--kms-endpoint
URL` for a local KMS), one at most, and hands the command one `encryption`
value: a key provider (`durable_obj.wire.keys`) or None. `new_key_options`
(`--new-key-*`, for rotate-key) and `to_key_options` (`--to-key-*` and
`--to-plain`, a fork's destination) are the same with other names.

A key value is never an argument: it would sit in the shell history and the
process list. A flag whose value looks like a key itself is refused without
showing it, and whatever the key text is, it is registered with the
invocation's redaction before anything can fail on it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click

from durable_obj.cli.failures import Failure
from durable_obj.cli.session import session
from durable_obj.errors import DurableError
from durable_obj.wire.keys import AwsKms, EnvKey, KeyFile, KeyProvider, parse_key

F = TypeVar("F", bound=Callable[..., Any])

#: The `dst_encryption` of a fork that keeps the source's key (no --to-* flag).
SAME_KEY = object()


@dataclass(frozen=True)
class _Group:
    """One family of key flags: `--{prefix}key-env` and so on, handed to the
    command as keyword `dest`."""

    prefix: str
    dest: str
    what: str
    plain: bool = False

    def flag(self, name: str) -> str:
        return f"--{self.prefix}{name}"

    def param(self, name: str) -> str:
        return f"{self.prefix}{name}".replace("-", "_")

    @property
    def names(self) -> tuple[str, ...]:
        base = ("key-env", "key-file", "kms-key", "kms-endpoint")
        return (*base, "plain") if self.plain else base


def _looks_like_key(text: str) -> bool:
    try:
        parse_key(text, "the value")
    except DurableError:
        return False
    return True


def _register(text: str) -> None:
    """Key text, redacted from everything this invocation prints."""
    secrets = session().secrets
    secrets.add(text)
    secrets.add(text.strip())


def _refuse_key_value(group: _Group, name: str, value: str) -> None:
    if _looks_like_key(value):
        _register(value)
        holder = "an environment variable" if name == "key-env" else "a file"
        raise Failure(
            "invalid_argument",
            f"{group.flag(name)} takes the name of {holder} holding the key, and its value "
            "looks like a key itself: never put a key on a "
            "command line (it stays in the shell history and the process list). Put it in an "
            "environment variable or a file (mode 600) and name that. Nothing was read.",
            2,
        )


def _from_env(group: _Group, variable: str) -> KeyProvider:
    if variable not in os.environ:
        _refuse_key_value(group, "key-env", variable)
    value = os.environ.get(variable)
    if value:
        _register(value)
    return EnvKey(variable)


def _from_file(group: _Group, path: str) -> KeyProvider:
    if not os.path.exists(path):
        _refuse_key_value(group, "key-file", path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(4096)
    except OSError:
        data = b""  # KeyFile says why, naming the path
    if data:
        _register(data.decode("utf-8", "replace"))
    return KeyFile(path)


def _from_kms(key_id: str, endpoint: str | None) -> KeyProvider:
    return AwsKms(key_id) if endpoint is None else AwsKms(key_id, endpoint_url=endpoint)


def provider(group: _Group, values: dict[str, Any]) -> Any:
    """The group's flags -> a key provider, None (no key; `--to-plain`), or
    `SAME_KEY` (a destination group given no flag)."""
    env, path, kms = values["key-env"], values["key-file"], values["kms-key"]
    endpoint, plain = values["kms-endpoint"], bool(values.get("plain"))
    chosen = [
        group.flag(name)
        for name, value in (
            ("key-env", env),
            ("key-file", path),
            ("kms-key", kms),
            ("plain", plain),
        )
        if value
    ]
    if len(chosen) > 1:
        raise Failure(
            "invalid_argument",
            f"{' and '.join(chosen)} each name {group.what}: give one. Nothing was read.",
            2,
        )
    if endpoint and not kms:
        raise Failure(
            "invalid_argument",
            f"{group.flag('kms-endpoint')} goes with {group.flag('kms-key')}. Nothing was read.",
            2,
        )
    if env:
        return _from_env(group, env)
    if path:
        return _from_file(group, path)
    if kms:
        return _from_kms(kms, endpoint)
    if group.plain and not plain:
        return SAME_KEY
    return None


def _decorator(group: _Group) -> Callable[[F], F]:
    what = group.what.capitalize()
    helps = {
        "key-env": (
            "VAR",
            f"{what}: the environment variable VAR holds it (64 hex digits "
            "or base64 of 32 bytes). Never the key itself.",
        ),
        "key-file": ("PATH", f"{what}: the file PATH holds it (32 bytes, hex or base64)."),
        "kms-key": (
            "KEY_ID",
            f"{what}: this AWS KMS key (id, ARN or alias; region and "
            "credentials from the AWS environment).",
        ),
        "kms-endpoint": ("URL", f"With {group.flag('kms-key')}: the KMS endpoint (a local KMS)."),
        "plain": ("", "The copy is not encrypted (default: the source's key)."),
    }

    def decorate(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(group.param(name), None) for name in group.names}
            kwargs[group.dest] = provider(group, values)
            return f(*args, **kwargs)

        for name in reversed(group.names):
            metavar, text = helps[name]
            if name == "plain":
                option = click.option(group.flag(name), group.param(name), is_flag=True, help=text)
            else:
                option = click.option(
                    group.flag(name), group.param(name), metavar=metavar, help=text
                )
            wrapper = option(wrapper)
        return cast(F, wrapper)

    return decorate


#: `--key-env/--key-file/--kms-key [--kms-endpoint]` -> `encryption`.
key_options = _decorator(_Group("", "encryption", "the object's key"))
#: `--new-key-env/--new-key-file/--new-kms-key [--new-kms-endpoint]` -> `new_key`.
new_key_options = _decorator(_Group("new-", "new_key", "the new key"))
#: `--to-key-env/--to-key-file/--to-kms-key [--to-kms-endpoint]`, `--to-plain`
#: -> `dst_encryption` (`SAME_KEY` when none is given).
to_key_options = _decorator(_Group("to-", "dst_encryption", "the copy's key", plain=True))
