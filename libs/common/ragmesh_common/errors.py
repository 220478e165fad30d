"""Domain errors and their one mapping to and from rich gRPC status (google.rpc.Status + ErrorInfo).

Domain code raises `RagmeshError`; the server interceptor (`ragmesh_common.server`) turns it into a
google.rpc.Status with exactly one ErrorInfo (and BadRequest field violations for validation errors).
Clients turn a failed call back into a `RagmeshError` with `from_rpc_error`, so a reason given by a
downstream service (say the converter's UNSUPPORTED_MEDIA_TYPE) reaches the gateway unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from .reasons import Reason

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# gRPC's server pushback (gRFC A6): a negative value tells the caller's channel not to retry this failure.
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"


@dataclass(frozen=True)
class FieldViolation:
    """One invalid request field (google.rpc.BadRequest.FieldViolation)."""

    field: str
    description: str


@dataclass
class RagmeshError(Exception):
    """An error with a canonical gRPC code, an UPPER_SNAKE_CASE reason and a message for people."""

    code: grpc.StatusCode
    reason: str
    message: str
    domain: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    field_violations: Sequence[FieldViolation] = ()
    # Seconds after which a retry may succeed (google.rpc.RetryInfo; HTTP Retry-After): back-pressure.
    retry_after: float | None = None
    # Set (by `ServiceClient`) on a failure of a downstream call that its channel already retried: this service's
    # callers are told not to retry it again (`trailing_metadata`), so that retries happen at one layer only.
    retried: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        super().__init__(self.message)
        self.metadata = {str(k): str(v) for k, v in self.metadata.items()}

    def __str__(self) -> str:
        return f"{self.code.name} {self.reason}: {self.message}"

    def with_domain(self, domain: str) -> RagmeshError:
        """Set the domain if it is not set yet (the service that raised it)."""
        if not self.domain:
            self.domain = domain
        return self

    # --- to the wire -------------------------------------------------------------------------------
    def to_status_proto(self) -> status_pb2.Status:
        info = error_details_pb2.ErrorInfo(
            reason=self.reason, domain=self.domain or "ragmesh", metadata=dict(self.metadata)
        )
        details = [_pack(info)]
        if self.field_violations:
            bad = error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                    for v in self.field_violations
                ]
            )
            details.append(_pack(bad))
        if self.retry_after is not None:
            retry = error_details_pb2.RetryInfo()
            retry.retry_delay.FromNanoseconds(int(max(self.retry_after, 0) * 1e9))
            details.append(_pack(retry))
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=details)

    def trailing_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The rich status; and for a failure already retried downstream, server pushback that stops the caller's
        channel from retrying it too (else each layer's retries multiply: gateway x indexer x embedder)."""
        status = ((STATUS_DETAILS_KEY, self.to_status_proto().SerializeToString()),)
        if self.retried:
            return (*status, (RETRY_PUSHBACK_KEY, "-1"))
        return status


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


_CODES_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


def invalid_argument(reason: str, message: str, *, field: str | None = None, **metadata: object) -> RagmeshError:
    """A validation error, with a BadRequest field violation when `field` is given."""
    violations = (FieldViolation(field, message),) if field else ()
    return RagmeshError(
        grpc.StatusCode.INVALID_ARGUMENT,
        reason,
        message,
        metadata={k: str(v) for k, v in metadata.items()},
        field_violations=violations,
    )


def not_found(reason: str, message: str, **metadata: object) -> RagmeshError:
    return RagmeshError(grpc.StatusCode.NOT_FOUND, reason, message, metadata={k: str(v) for k, v in metadata.items()})


def failed_precondition(reason: str, message: str, **metadata: object) -> RagmeshError:
    return RagmeshError(
        grpc.StatusCode.FAILED_PRECONDITION, reason, message, metadata={k: str(v) for k, v in metadata.items()}
    )


def unavailable(reason: str, message: str, **metadata: object) -> RagmeshError:
    return RagmeshError(grpc.StatusCode.UNAVAILABLE, reason, message, metadata={k: str(v) for k, v in metadata.items()})


# --- from the wire -----------------------------------------------------------------------------------
def from_rpc_error(error: grpc.RpcError, *, service: str = "", target: str = "") -> RagmeshError:
    """Turn a failed call into a RagmeshError, keeping the callee's reason, domain and field violations.

    A failure without rich details (the peer is down, a deadline passed, a proxy answered) gets a reason
    that names the service, so the caller's user learns *which* hop failed.
    """
    code = error.code() if callable(getattr(error, "code", None)) else grpc.StatusCode.UNKNOWN
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    trailing = error.trailing_metadata() if callable(getattr(error, "trailing_metadata", None)) else None
    # grpc's stubs type trailing metadata as objects with .key/.value; at run time (sync and aio alike) each item
    # is a (key, value) pair.
    pairs = cast("Iterable[tuple[str, str | bytes]]", trailing or ())
    for key, value in pairs:
        if key == STATUS_DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            return _from_status(status)
    return transport_error(code, details, service=service, target=target)


def transport_error(code: grpc.StatusCode, details: str | None, *, service: str = "", target: str = "") -> RagmeshError:
    """A failure that the callee's code did not describe (the peer is down, a deadline passed, a message too
    large), with a reason that names the service, so the caller's user learns *which* hop failed."""
    meta = {"service": service} if service else {}
    if target:
        meta["target"] = target
    who = service or "a backend service"
    if code == grpc.StatusCode.UNAVAILABLE:
        return RagmeshError(code, Reason.SERVICE_UNAVAILABLE, f"{who} is unavailable ({details})", "ragmesh", meta)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RagmeshError(code, Reason.DEADLINE_EXCEEDED, f"{who} did not answer in time", "ragmesh", meta)
    if code == grpc.StatusCode.CANCELLED:
        return RagmeshError(code, Reason.CANCELLED, f"the call to {who} was cancelled", "ragmesh", meta)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return RagmeshError(code, Reason.RESOURCE_EXHAUSTED, f"{who}: {details}", "ragmesh", meta)
    return RagmeshError(code, code.name, f"{who} failed: {details}", "ragmesh", meta)


def received(sent: RagmeshError) -> RagmeshError:
    """`sent` as its caller decodes it from the wire: a new error with what the rich status carries, and
    `retried` when the sender pushed back (its failure was already retried downstream)."""
    error = _from_status(sent.to_status_proto())
    error.retried = sent.retried
    return error


def _from_status(status: status_pb2.Status) -> RagmeshError:
    code = _CODES_BY_VALUE.get(status.code, grpc.StatusCode.UNKNOWN)
    reason, domain, metadata = code.name, "", {}
    violations: list[FieldViolation] = []
    retry_after: float | None = None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason, domain, metadata = info.reason, info.domain, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToNanoseconds() / 1e9
    return RagmeshError(code, reason, status.message, domain, metadata, tuple(violations), retry_after)
