"""The client's errors: what a node answered (with rowcall's code, message and hint), or why
no node could answer, or why an invocation's outcome is unknown.

Every exception the client raises is a :class:`RowcallError`. A node's refusal is a
:class:`Rejected` (or one of its subclasses, by gRPC status); the same server answer gives
the same error as the Rust client (``rowcall_client::Error``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc
from google.rpc import error_details_pb2, status_pb2

#: ``ErrorInfo.domain`` of rowcall's errors.
DOMAIN = "rowcall"
#: Trailing metadata that carries the ``google.rpc.Status`` with the details.
STATUS_DETAILS = "grpc-status-details-bin"

Metadata = Sequence[tuple[str, str | bytes]]


@dataclass(frozen=True)
class Rejection:
    """A node's error answer: the gRPC status and rowcall's code, message and hint."""

    #: The gRPC status code.
    status: grpc.StatusCode
    #: rowcall's code, as over HTTP (``not_found``, ``invalid_row``, ``behind``, ...); empty
    #: when the status did not come from rowcall (a connection failure, a timeout).
    code: str
    #: What went wrong.
    message: str
    #: How to fix it.
    hint: str = ""
    #: For ``outcome_unknown``: the request id a retry must carry.
    request_id: str | None = None
    #: For ``invalid_args``: ``(JSON pointer, message)`` per violation.
    violations: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @classmethod
    def from_status(cls, status: grpc.StatusCode, message: str, trailing: Metadata) -> Rejection:
        """Reads rowcall's error details out of a failed call's status and trailers."""
        code, hint, request_id = "", "", None
        violations: list[tuple[str, str]] = []
        for name, value in trailing:
            if name != STATUS_DETAILS or not isinstance(value, bytes):
                continue
            details = status_pb2.Status()
            try:
                details.ParseFromString(value)
            except Exception:  # a malformed detail is no detail
                continue
            for any_detail in details.details:
                if any_detail.type_url.endswith("/google.rpc.ErrorInfo"):
                    info = error_details_pb2.ErrorInfo()
                    any_detail.Unpack(info)
                    if info.domain == DOMAIN:
                        code = info.reason
                        hint = info.metadata.get("hint", "")
                        request_id = info.metadata.get("request_id")
                elif any_detail.type_url.endswith("/google.rpc.BadRequest"):
                    bad = error_details_pb2.BadRequest()
                    any_detail.Unpack(bad)
                    violations.extend((v.field, v.description) for v in bad.field_violations)
        return cls(status, code, message, hint, request_id, tuple(violations))

    @property
    def from_rowcall(self) -> bool:
        """Whether this came from rowcall (it carries a code), not from the transport."""
        return bool(self.code)

    def __str__(self) -> str:
        text = (
            f"{self.message} ({self.code})" if self.code else f"{self.status.name}: {self.message}"
        )
        for pointer, message in self.violations:
            text += f"; {pointer}: {message}"
        if self.hint:
            text += f"; hint: {self.hint}"
        return text


class RowcallError(Exception):
    """Any failure of a rowcall call."""

    @property
    def rejection(self) -> Rejection | None:
        """The node's answer behind this error, if any."""
        return None

    @property
    def code(self) -> str | None:
        """rowcall's error code (``not_found``, ``invalid_row``, ...) when a node gave one."""
        rejection = self.rejection
        return rejection.code if rejection is not None and rejection.code else None

    @property
    def hint(self) -> str:
        """How to fix it, as the node said (empty when it said nothing)."""
        rejection = self.rejection
        return rejection.hint if rejection is not None else ""


class Rejected(RowcallError):
    """A node answered with an error: the request was wrong, not allowed, or refers to
    something that is not there. Retrying it unchanged gives the same answer."""

    def __init__(self, rejection: Rejection) -> None:
        super().__init__(str(rejection))
        self._rejection = rejection

    @property
    def rejection(self) -> Rejection:
        return self._rejection

    @property
    def status(self) -> grpc.StatusCode:
        """The gRPC status code."""
        return self._rejection.status

    @property
    def message(self) -> str:
        """What went wrong, as the node said."""
        return self._rejection.message

    @property
    def violations(self) -> tuple[tuple[str, str], ...]:
        """For ``invalid_args``: ``(JSON pointer, message)`` per violation."""
        return self._rejection.violations


class InvalidArgument(Rejected):
    """INVALID_ARGUMENT (HTTP 400, 415, 422): a bad row, bad arguments, a bad request."""


class Unauthenticated(Rejected):
    """UNAUTHENTICATED (HTTP 401): no credential, or a wrong one."""


class PermissionDenied(Rejected):
    """PERMISSION_DENIED (HTTP 403): the credential may not do this, or the row is disabled."""


class NotFound(Rejected):
    """NOT_FOUND (HTTP 404): no such row, receipt or member."""


class Conflict(Rejected):
    """FAILED_PRECONDITION (HTTP 409): a version mismatch, or not possible in this state."""


class TooLarge(Rejected):
    """RESOURCE_EXHAUSTED (HTTP 413, 429, 507): too big, over a rate quota, or a member short
    of disk space (code ``no_space``: writes wait until an operator frees space)."""


_BY_STATUS: dict[grpc.StatusCode, type[Rejected]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TooLarge,
}


def rejected(rejection: Rejection) -> Rejected:
    """The typed exception for a node's answer."""
    return _BY_STATUS.get(rejection.status, Rejected)(rejection)


class Unavailable(RowcallError):
    """No node gave an answer within the call's deadline (each was unreachable, behind,
    without a quorum, or slow); ``last`` says why the last one failed."""

    def __init__(self, attempts: int, last: Rejection) -> None:
        super().__init__(f"no node answered after {attempts} attempts: {last}")
        self.attempts = attempts
        self.last = last

    @property
    def rejection(self) -> Rejection:
        return self.last


class OutcomeUnknown(RowcallError):
    """A call that must not run twice (an invocation, a removal) reached a node and then no
    answer came: it may or may not have taken effect, so it was not retried.

    What to do: do not simply call again (that could run the capability twice). Once the
    node is back, look for the invocation's receipt (``client.receipts(key)``, newest first)
    and call again only if none is there."""

    def __init__(self, node: str, last: Rejection) -> None:
        super().__init__(
            f"no answer from {node}, and the call may have taken effect: {last}; look for its "
            "receipt (receipts(key)) once the node is back before calling again"
        )
        self.node = node
        self.last = last

    @property
    def rejection(self) -> Rejection:
        return self.last


class AddressError(RowcallError, ValueError):
    """A node address is not usable (no host:port, https without a CA, ...)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"invalid node address {address!r}: {reason}")
        self.address = address
        self.reason = reason


class NoNodes(RowcallError, ValueError):
    """No node address was given (neither as an argument nor in ``ROWCALL_NODES``)."""

    def __init__(self) -> None:
        super().__init__("no node addresses given: pass nodes=[...] or set ROWCALL_NODES")


class ArgumentError(RowcallError, ValueError):
    """A request argument cannot be sent (e.g. JSON that is not an object where one is
    needed, a row with an unknown field)."""
