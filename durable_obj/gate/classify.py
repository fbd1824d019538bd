"""What a statement may be, judged on the engine's analysis of it
(`Engine.analyze`): query() takes exactly one read-only statement, execute()
one statement that changes only the object's database. The checks run in
chdb.durable V1's order, so both libraries give a statement the same
category. Messages never quote the statement: it may carry a credential.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from durable_obj.errors import ClassificationRefused, SecretRefused

if TYPE_CHECKING:
    from durable_obj.replica.engine import Analysis


#: The call a refusal names first ("execute() could not classify ...").
_NAMED_CALL = re.compile(r"^[a-z_]+\(\) ")


@contextlib.contextmanager
def speaking_as(call: str) -> Iterator[None]:
    """A refusal raised inside names `call` (e.g. "write()", "aexecute()"),
    the method the caller actually called, instead of the one the gate
    checks for (execute() or query()). The gate is shared by every call
    and cannot know which one it serves; the call's own layer says so here.
    Nested calls rename in turn, so the outermost (the caller's own) wins."""
    try:
        yield
    except ClassificationRefused as exc:
        text = str(exc)
        if _NAMED_CALL.match(text):
            exc.args = (_NAMED_CALL.sub(call + " ", text, count=1),)
        raise


def check_read(analysis: Analysis, syntax: str) -> None:
    """query() takes exactly one read-only statement."""
    if analysis.query_class == "UNKNOWN":
        raise ClassificationRefused(f"query() could not classify the statement: {syntax}")
    if analysis.statement_count != 1:
        raise ClassificationRefused(
            f"query() takes exactly one statement; chDB counted {analysis.statement_count}"
        )
    if analysis.query_class != "READ_ONLY":
        raise ClassificationRefused(
            f"query() takes a read-only statement; this one is {analysis.query_class}. "
            "Use execute() for a change, which logs it to the WAL."
        )


def check_mutation(analysis: Analysis, db: str, syntax: str) -> None:
    """execute() takes one statement that changes only the object's database.

    The checks run in chdb.durable V1's order: what kind of statement it is
    (control, global) is judged before its secrets, so both libraries give a
    statement the same category. Messages never quote the statement: it may
    carry a credential.
    """
    if analysis.query_class == "UNKNOWN":
        raise ClassificationRefused(
            f"execute() could not classify the statement ({syntax}); refusing rather than "
            "logging something whose effect is unknown. Nothing was run or logged."
        )
    if analysis.statement_count != 1:
        raise ClassificationRefused(
            f"execute() takes exactly one statement; chDB counted {analysis.statement_count}. "
            "Nothing was run or logged; call execute() once per statement."
        )
    if analysis.query_class == "READ_ONLY":
        raise ClassificationRefused(
            "this statement changes nothing; use query(), which does not write the WAL"
        )
    if analysis.query_class == "CONTROL":
        raise ClassificationRefused(
            "control statements (USE, SET, SYSTEM, BACKUP, RESTORE, per-statement settings "
            "or writes outside the engine) are managed by the durable object; not run. "
            "Instead, write the statement without its SETTINGS clause (the object runs a "
            "mutation to its end and sets its own bounds), and use the object's methods "
            "(checkpoint(), Options bounds) for the rest"
        )
    if analysis.query_class == "MUTATING_GLOBAL":
        raise ClassificationRefused(
            "this statement changes state outside every database (users, settings "
            "profiles, ...), which a checkpoint cannot carry; not run"
        )
    if analysis.has_secrets:
        raise SecretRefused(
            "this mutation carries a credential, and no credential is ever written to a WAL "
            "segment (an encrypted one too: whoever holds the object's key would read it); "
            "it was not run or logged. Load the data in the caller and INSERT literals."
        )
    if analysis.changes_database_lifecycle:
        raise ClassificationRefused(
            "creating, dropping or renaming a database changes the object's own container; "
            "the durable object manages that. Not run."
        )
    if not analysis.writes_only_target_database:
        raise ClassificationRefused(
            f"chDB could not prove that every write lands in the object's database {db!r}; "
            "a write to another database, system, a table function or a file is not part "
            "of the object. Not run."
        )
