"""Strict documents with unknown fields kept: the V1 head's schema machinery.

A `Model` declares its fields as `Field`s, each with a check that returns
the value or raises `Invalid`; nothing is ever coerced (no "1" for 1, no
true for 1, no 1.0 for 1; a number where a float is expected is taken as
its float, as JSON has one number type). Fields a model does not declare
are kept, in order, and written back after the declared ones (V1 §4.2).
Assigning a declared field checks it the same way.

Hand-written rather than pydantic: the head is parsed first thing on every
open, and importing pydantic and building its models cost ~0.09 s of a
fresh process's cold open, more than all of durable_obj's own modules.
The messages are pydantic's wording, so an error reads as it always did.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from typing import Any, ClassVar, Self

from durable_obj.wire.protocol import MAX_SAFE_INT

#: Where a value sits: field names and list positions from the document's root.
Loc = tuple[str | int, ...]


class Invalid(ValueError):
    """A document that does not fit its schema: every problem found, each
    as (where, what), the first first."""

    def __init__(self, problems: list[tuple[Loc, str]]) -> None:
        super().__init__(f"{_path(problems[0][0])}: {problems[0][1]}")
        self.problems = problems


def _path(loc: Loc) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)[1:]


Check = Callable[[Any, Loc], Any]


@dataclass(frozen=True, slots=True)
class Field:
    check: Check
    #: The value when absent (unless `required`).
    default: Any = None
    required: bool = False
    #: A fresh default each time (a list).
    factory: Callable[[], Any] | None = None


def required(check: Check) -> Field:
    return Field(check, required=True)


def fail(loc: Loc, msg: str) -> Invalid:
    return Invalid([(loc, msg)])


def integer(low: int = 0, high: int = MAX_SAFE_INT) -> Check:
    def check(value: Any, loc: Loc) -> int:
        if type(value) is not int:
            raise fail(loc, "Input should be a valid integer")
        if value < low:
            raise fail(loc, f"Input should be greater than or equal to {low}")
        if value > high:
            raise fail(loc, f"Input should be less than or equal to {high}")
        return value

    return check


def text(value: Any, loc: Loc) -> str:
    """A string that is valid Unicode (no lone surrogate: it could not be
    written back as UTF-8), as a plain `str` (a caller's StrEnum member or
    numpy string is taken as its text)."""
    if not isinstance(value, str):
        raise fail(loc, "Input should be a valid string")
    plain: str = str.__str__(value)
    try:
        plain.encode("utf-8")
    except UnicodeEncodeError:
        raise fail(
            loc, "Input should be a valid string, unable to parse raw data as a unicode string"
        ) from None
    return plain


def non_empty(value: Any, loc: Loc) -> str:
    plain = text(value, loc)
    if not plain:
        raise fail(loc, "String should have at least 1 character")
    return plain


def finite(value: Any, loc: Loc) -> float:
    """A finite number, as a float (JSON's 5 is 5.0 here)."""
    if type(value) not in (int, float):
        raise fail(loc, "Input should be a valid number")
    try:
        number = float(value)
    except OverflowError:
        raise fail(loc, "Input should be a finite number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise fail(loc, "Input should be a finite number")
    return number


def optional(inner: Check) -> Check:
    def check(value: Any, loc: Loc) -> Any:
        return None if value is None else inner(value, loc)

    return check


def after(inner: Check, then: Callable[[Any], Any]) -> Check:
    """`inner`, then `then` on its value (a ValueError names the problem)."""

    def check(value: Any, loc: Loc) -> Any:
        value = inner(value, loc)
        try:
            return then(value)
        except ValueError as exc:
            raise fail(loc, str(exc)) from None

    return check


def list_of(inner: Check) -> Check:
    kind: type | None = getattr(inner, "model", None)

    def check(value: Any, loc: Loc) -> list[Any]:
        if type(value) is not list:
            raise fail(loc, "Input should be a valid list")
        if kind is not None and all(map(isinstance, value, repeat(kind))):
            return list(value)  # instances already (a head's WAL, every flush): as `model`
        out, problems = [], []
        for i, item in enumerate(value):
            try:
                out.append(inner(item, (*loc, i)))
            except Invalid as exc:
                problems += exc.problems
        if problems:
            raise Invalid(problems)
        return out

    return check


def model(cls: type[Model]) -> Check:
    """A nested model: an instance as it is, or a dict validated as one."""

    def check(value: Any, loc: Loc) -> Any:
        if isinstance(value, cls):
            return value
        return cls.validate_at(value, loc)

    check.model = cls  # type: ignore[attr-defined]  # for `list_of`
    return check


class Model:
    """A document of declared `FIELDS` and kept unknown ones (`model_extra`)."""

    FIELDS: ClassVar[dict[str, Field]] = {}
    _extra: dict[str, Any]

    def __init__(self, **values: Any) -> None:
        self._fill(values, ())

    @classmethod
    def model_validate(cls, doc: Any) -> Self:
        """`doc` (parsed JSON, or an instance) as this model; `Invalid` otherwise."""
        return doc if isinstance(doc, cls) else cls.validate_at(doc, ())

    @classmethod
    def validate_at(cls, doc: Any, loc: Loc) -> Self:
        if not isinstance(doc, dict):
            raise fail(loc, f"Input should be a valid dictionary or instance of {cls.__name__}")
        out = cls.__new__(cls)
        out._fill(doc, loc)
        return out

    def _fill(self, doc: dict[str, Any], loc: Loc) -> None:
        problems: list[tuple[Loc, str]] = []
        values = {}
        for name, spec in self.FIELDS.items():
            if name in doc:
                try:
                    values[name] = spec.check(doc[name], (*loc, name))
                except Invalid as exc:
                    problems += exc.problems
            elif spec.required:
                problems.append(((*loc, name), "Field required"))
            else:
                values[name] = spec.factory() if spec.factory is not None else spec.default
        if problems:
            raise Invalid(problems)
        self.__dict__.update(values)
        object.__setattr__(self, "_extra", {k: v for k, v in doc.items() if k not in self.FIELDS})
        try:
            self._after()
        except ValueError as exc:
            raise fail(loc, str(exc)) from None

    def _after(self) -> None:
        """A check across fields, after each field passed its own."""

    def __setattr__(self, name: str, value: Any) -> None:
        spec = self.FIELDS.get(name)
        if spec is None:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        checked = spec.check(value, (name,))
        before = self.__dict__.get(name)
        self.__dict__[name] = checked
        try:
            self._after()
        except ValueError as exc:
            self.__dict__[name] = before  # nothing changes on a refusal
            raise fail((name,), str(exc)) from None

    @property
    def model_extra(self) -> dict[str, Any]:
        """The fields this version does not know, as read (written back as they are)."""
        return self._extra

    def model_copy(self, *, deep: bool = False, update: dict[str, Any] | None = None) -> Self:
        """A copy (`deep`: of every nested model and unknown value too), with
        the fields in `update` replaced unchecked, as pydantic's copy does."""
        out = self.__class__.__new__(self.__class__)
        if deep:
            out.__dict__.update({k: _deep(v) for k, v in self.__dict__.items()})
        else:
            out.__dict__.update(self.__dict__)
            out.__dict__["_extra"] = dict(self._extra)
        if update:
            out.__dict__.update(update)
        return out

    def model_dump(self, *, mode: str = "json", exclude: set[str] | None = None) -> dict[str, Any]:
        """The document, a copy: declared fields in order, then the unknown ones."""
        out: dict[str, Any] = json_copy(self.document())
        for name in exclude or ():
            out.pop(name, None)
        return out

    def document(self) -> dict[str, Any]:
        """The document as JSON values, for serializing: new dicts for the
        models, the unknown fields' values shared, not copied."""
        out = {name: _dumped(self.__dict__[name]) for name in self.FIELDS}
        out.update(self._extra)
        return out

    def json_text(self, extra: dict[str, Any] | None = None) -> str:
        """`document()` as compact JSON text, text as it is (not as escapes),
        with the unknown fields in `extra` set (added last, or in place):
        json.dumps of the same document, made of each nested model's own
        `json_text` (which a model may keep: `ObjectRef`'s)."""
        fields = self.__dict__
        parts = [f"{_quote(name)}:{self._field_json(name, fields[name])}" for name in self.FIELDS]
        unknown = {**self._extra, **extra} if extra else self._extra
        parts += [f"{_quote(name)}:{_json(value)}" for name, value in unknown.items()]
        return "{" + ",".join(parts) + "}"

    def _field_json(self, name: str, value: Any) -> str:
        """A declared field's value as JSON text (a model may keep some)."""
        return _json(value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={self.__dict__[k]!r}" for k in self.FIELDS)
        return f"{type(self).__name__}({fields})"


def _deep(value: Any) -> Any:
    if isinstance(value, Model):
        return value.model_copy(deep=True)
    if isinstance(value, list):
        return [_deep(item) for item in value]
    if isinstance(value, dict):
        return {k: _deep(v) for k, v in value.items()}
    return value


def _dumped(value: Any) -> Any:
    if isinstance(value, Model):
        return value.document()
    if isinstance(value, list):
        return [_dumped(item) for item in value]
    return value


_text = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_quote: Callable[[str], str] = json.encoder.encode_basestring


def _json(value: Any) -> str:
    """`value` as `_text` writes it; a string, a whole number or a list
    without the encoder's set-up, a model as its `json_text`."""
    kind = type(value)
    if kind is str:
        return _quote(value)
    if kind is int:
        return int.__repr__(value)
    if isinstance(value, Model):
        return value.json_text()
    if kind is list:
        return "[" + ",".join(map(_json, value)) + "]"
    return _text(value)


def json_copy(value: Any) -> Any:
    """A copy of JSON values (dicts and lists new, the rest immutable)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(item) for item in value]
    return value
