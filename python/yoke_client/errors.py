"""Exceptions of yoke_client: each carries the gRPC status code and the
coordinator's message unchanged (an invalid spec names the field path, a
refused credential says why)."""

from __future__ import annotations

from typing import Any, Dict, Type

import grpc


class YokeError(Exception):
    """A call failed. `code` is the gRPC status code, `message` the server's
    text (or, when the coordinator could not be reached, where the client
    looked and what to do)."""

    def __init__(self, code: grpc.StatusCode, message: str, address: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.address = address

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.name}, message={self.message!r})"


class InvalidArgumentError(YokeError):
    """INVALID_ARGUMENT: a bad spec (the message starts with the field path)
    or a malformed request."""


class NotFoundError(YokeError):
    """NOT_FOUND: no such job, or no such spec file."""


class PermissionDeniedError(YokeError):
    """PERMISSION_DENIED: the caller's role may not do this (a viewer's
    submit, a submitter cancelling another's job)."""


class UnauthenticatedError(YokeError):
    """UNAUTHENTICATED: the credential was refused (a revoked or expired
    token, a certificate from another CA); the message says which."""


class UnavailableError(YokeError):
    """UNAVAILABLE: the coordinator could not be reached or went away."""


class ResourceExhaustedError(YokeError):
    """RESOURCE_EXHAUSTED: a quota or rate limit of the coordinator."""


class VersionSkewError(YokeError):
    """This client and the coordinator are not compatible; the message says
    which side is too old and what to install."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, message, address)


_BY_CODE: Dict[grpc.StatusCode, Type[YokeError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def error_for(code: grpc.StatusCode, message: str, address: str = "") -> YokeError:
    """The exception class of `code` (YokeError for the others)."""
    return _BY_CODE.get(code, YokeError)(code, message, address)


def rpc_status(e: grpc.RpcError) -> "tuple[grpc.StatusCode, str]":
    """The code and details of a failed call (a grpc.Call at run time)."""
    call: Any = e
    code = call.code() if hasattr(call, "code") else None
    details = call.details() if hasattr(call, "details") else None
    return (code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN,
            details if isinstance(details, str) and details else str(e))


def from_rpc_error(e: grpc.RpcError, address: str) -> YokeError:
    """A failed call as the CLI reports it (client/client.cc FromGrpcStatus):
    the server's code and message kept; a transport failure says where the
    client looked and how to start a coordinator."""
    code, details = rpc_status(e)
    if code == grpc.StatusCode.UNAVAILABLE and ("andshake" in details or "SSL" in details):
        details = (f"TLS with the coordinator at {address} failed (is its certificate from the "
                   f"CA in your tls_dir, and for this address? does it run --insecure?): {details}")
    elif code == grpc.StatusCode.UNAVAILABLE:
        details = (f"cannot reach the coordinator at {address} (is it running? start one with "
                   f"`yoke up`): {details}")
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        details = f"the coordinator at {address} did not answer in time: {details}"
    return error_for(code, details, address)
