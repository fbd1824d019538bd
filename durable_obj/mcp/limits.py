"""What one MCP tool call may carry, and the checks of its inputs.

`Limits` bounds every input and answer; the `_check_*` functions turn a bad
argument (a huge string, a bad id, too many tags, metadata that is not JSON)
into `InvalidArgument` before anything reaches SQL; `stored_metadata` reads
back what a row holds, whoever wrote it. `load_embedder` resolves
`--embed module:function`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from durable_obj.errors import InvalidArgument
from durable_obj.gate.bounds import MAX_BOUND, MAX_BOUND_SECONDS
from durable_obj.wire.untrusted import MAX_JSON_DEPTH, json_depth

#: A function from a text to its embedding.
Embedder = Callable[[str], Sequence[float]]

_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Limits:
    """What one tool call may carry or return (a larger input is a tool error)."""

    content_bytes: int = 256 * 1024
    tags: int = 32
    tag_chars: int = 128
    metadata_bytes: int = 64 * 1024
    query_chars: int = 4096
    page: int = 1000
    sql_chars: int = 64 * 1024
    #: A list, search or sql answer stops adding rows past this many bytes
    #: and says `truncated`.
    result_bytes: int = 1024 * 1024
    embedding_dims: int = 8192
    #: The sql tool's bounds, enforced by the engine (`durable_obj.Bounds`): a
    #: query past them is stopped, and the next call finds the memory free.
    sql_seconds: float = 10.0
    sql_memory_bytes: int = 1024 * 1024 * 1024

    def __post_init__(self) -> None:
        """`InvalidArgument` unless every limit is a positive number (`tags`
        may be 0: no tags), the sql tool's within `Bounds`' own."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "sql_seconds":
                ok = isinstance(value, int | float) and 0 < value <= MAX_BOUND_SECONDS
                want = f"a number of seconds above 0, at most {MAX_BOUND_SECONDS:g}"
            else:
                low = 0 if field.name == "tags" else 1
                ok = isinstance(value, int) and low <= value <= MAX_BOUND
                want = f"a whole number from {low} to {MAX_BOUND}"
            if isinstance(value, bool) or not ok:
                raise InvalidArgument(f"Limits.{field.name} must be {want}, not {value!r}"[:200])


# -- validation -------------------------------------------------------------------


def _check_id(memory_id: str) -> str:
    mid = memory_id.strip().lower().replace("-", "") if len(memory_id) <= 64 else ""
    if not _ID.fullmatch(mid):
        raise InvalidArgument(
            "not a memory id (32 hex digits, as remember returned it); nothing was changed"
        )
    return mid


#: The longest retention or age a tool call may name, in days (about 270 years).
MAX_DAYS = 100_000.0


def _check_days(days: object, what: str = "older_than_days") -> float:
    """A positive, finite number of days (a bool, a string, NaN or 0 refused)."""
    if isinstance(days, bool) or not isinstance(days, int | float):
        raise InvalidArgument(f"{what} must be a number of days; nothing was changed")
    if not 0 < days <= MAX_DAYS:  # also refuses NaN
        raise InvalidArgument(
            f"{what} must be over 0 and at most {MAX_DAYS:.0f} days; nothing was changed"
        )
    return float(days)


def _check_content(content: str, limits: Limits) -> str:
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > limits.content_bytes:
        raise InvalidArgument(
            f"content is {size} bytes, over the limit of {limits.content_bytes}; "
            "nothing was written. Split it into several memories."
        )
    if not content.strip():
        raise InvalidArgument("content is empty; nothing was written")
    return content


def _check_tags(tags: Sequence[str] | None, limits: Limits) -> list[str]:
    if tags is None:
        return []
    if len(tags) > limits.tags:
        raise InvalidArgument(f"{len(tags)} tags, over the limit of {limits.tags}")
    out: list[str] = []
    for tag in tags:
        if not tag or len(tag) > limits.tag_chars:
            raise InvalidArgument(f"a tag must have 1 to {limits.tag_chars} characters")
        if tag not in out:
            out.append(tag)
    return out


def _check_metadata(metadata: dict[str, Any] | None, limits: Limits) -> str:
    try:
        text = json.dumps(metadata or {}, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgument(f"metadata is not a JSON object: {reason}") from None
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > limits.metadata_bytes:
        raise InvalidArgument(f"metadata is over the limit of {limits.metadata_bytes} bytes")
    if (depth := json_depth(data)) > MAX_JSON_DEPTH:  # what a read of the row would refuse
        raise InvalidArgument(
            f"metadata is nested {depth} levels deep, more than the {MAX_JSON_DEPTH} allowed"
        )
    return text


def stored_metadata(raw: str | None) -> Any:
    """A row's metadata as stored. What is not a JSON object of finite
    numbers (another writer's row: text that is no JSON, `NaN`, nested past
    the bound) is shown as `{"unreadable": <its first KiB>}`, so one such
    row never fails a get, list or search of the others."""
    text = raw or "{}"

    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        if json_depth(text.encode("utf-8", "surrogatepass")) > MAX_JSON_DEPTH:
            raise ValueError("too deep")
        value = json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return {"unreadable": text[:1024]}
    return value if isinstance(value, dict) else {"unreadable": text[:1024]}


def _check_page(limit: int, offset: int, limits: Limits) -> None:
    if not 1 <= limit <= limits.page:
        raise InvalidArgument(f"limit must be 1 to {limits.page}")
    if not 0 <= offset <= 2**53 - 1:
        raise InvalidArgument("offset must be 0 or more")


def load_embedder(spec: str) -> Embedder:
    """The function named by `module:function` (an import path), e.g.
    `mypkg.embeddings:embed`. It takes a text and returns its embedding."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidArgument(f"--embed takes module:function, got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot load the embedding function {spec!r}: {exc}") from None
    if not callable(target):
        raise InvalidArgument(f"the embedding function {spec!r} is not callable")
    fn: Embedder = target
    return fn
