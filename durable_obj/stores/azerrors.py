"""How an Azure Blob answer is judged, in the terms the Azure store decides on.

One table for both transports: the SDK path (`kind_of`) reads the status
and the error code from azure-core's exception, the obstore path
(`azwrites`) reads them from object_store's error text; both then ask
`answered`, so a conditional write means the same whichever sent it.
"""

from __future__ import annotations

import asyncio

AUTH_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "AuthorizationProtocolMismatch",
        "AuthorizationResourceTypeMismatch",
        "AuthorizationServiceMismatch",
        "AuthorizationSourceIPMismatch",
        "InsufficientAccountPermissions",
        "InvalidAuthenticationInfo",
        "KeyBasedAuthenticationNotPermitted",
        "NoAuthenticationInformation",
    }
)


def answered(status: int, code: str) -> str:
    """What an Azure error answer (its HTTP status and error code) means:
    precondition | exists | missing_bucket | missing_key | auth |
    invalid_blocks | server | other."""
    if status == 412:
        return "precondition"
    if status == 409 and code == "BlobAlreadyExists":
        return "exists"
    if code == "ContainerNotFound":
        return "missing_bucket"
    if status == 404:
        return "missing_key"
    if code in AUTH_CODES or status in (401, 403):
        return "auth"
    if code == "InvalidBlockList":
        return "invalid_blocks"
    if status in (408, 429) or status >= 500:
        return "server"
    return "other"


def lost(kind: str, replace: bool) -> bool:
    """Whether a refused conditional write means "precondition failed" (the
    caller gets None): on a create the blob exists, on a replace its ETag
    moved or it is gone."""
    if not replace:
        return kind in ("exists", "precondition")
    return kind in ("precondition", "missing_key")


def ambiguous(kind: str) -> bool:
    """Whether a conditional write that failed so may still have applied."""
    return kind in ("server", "network")


def code_of(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    if code is None:
        return ""
    return str(getattr(code, "value", code))


def kind_of(exc: BaseException) -> str:
    """What an exception of the SDK path means: precondition | exists |
    missing_key | missing_bucket | auth | unreachable | server | network |
    invalid_blocks | other"""
    from azure.core import exceptions as az

    if isinstance(exc, az.ClientAuthenticationError):
        return "auth"
    if isinstance(exc, az.HttpResponseError):
        return answered(exc.status_code or 0, code_of(exc))
    if isinstance(exc, az.ServiceRequestError):
        # azure-core files every aiohttp client error here, including a server
        # that hung up after reading the request; only a failed connect (or a
        # connect timeout) proves that nothing was sent.
        if isinstance(exc, az.ServiceRequestTimeoutError):
            return "unreachable"
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        try:
            import aiohttp

            if isinstance(inner, aiohttp.ClientConnectorError):
                return "unreachable"
        except ImportError:  # pragma: no cover - the async SDK needs aiohttp
            pass
        return "network"
    if isinstance(exc, az.ServiceResponseError | az.IncompleteReadError):
        return "network"
    if isinstance(exc, OSError | asyncio.TimeoutError):
        return "network"
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientError):
            return "network"
    except ImportError:  # pragma: no cover - the async SDK needs aiohttp
        pass
    return "other"
