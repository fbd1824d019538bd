"""What an obstore error's text says about the request, for the conditional
writes of `s3writes` and `azwrites`.

object_store's error classes say little (one class for 409 and 412 on S3),
so both read the HTTP status and the provider's error `Code` from the text
and judge them with their own provider's table. The text itself never leaves
them: it may echo the request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_STATUS = re.compile(r"\bStatus \{\s*status: (\d{3}),")
_CODE = re.compile(r"<Code>([A-Za-z0-9.]{1,64})</Code>")
_NEVER_SENT = re.compile(r"\bHttpError \{\s*kind: Connect,")
_TIMEOUT = re.compile(r"\bHttpError \{\s*kind: Timeout,")


@dataclass(frozen=True)
class Read:
    """The server's answer (`status`, `code`: "" if it named none), or, with
    `status` None, why there was none: `unanswered` is "unreachable" (the
    connection was never made), "timeout" or "no answer"."""

    status: int | None
    code: str = ""
    unanswered: str = ""


def read(text: str) -> Read:
    """The answer an obstore error's text reports."""
    status = _STATUS.search(text)
    if status is not None:
        code = _CODE.search(text)
        return Read(int(status.group(1)), code.group(1) if code else "")
    if _NEVER_SENT.search(text):
        return Read(None, unanswered="unreachable")
    if _TIMEOUT.search(text):
        return Read(None, unanswered="timeout")
    return Read(None, unanswered="no answer")
