"""Per-request context the error bodies carry: the request id and the current trace id."""

from __future__ import annotations

import contextvars
import random
import re
import uuid

from opentelemetry import trace

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("ragmesh_request_id", default="")


def accept_request_id(incoming: str | None) -> str:
    """The caller's X-Request-ID when it is sane (1-128 of A-Z a-z 0-9 . _ : -), else a new one."""
    if incoming and _SANE_REQUEST_ID.fullmatch(incoming):
        return incoming
    # A random version-4 UUID from Python's generator, not uuid4's os.urandom: an id is no secret, and the system
    # call gives up the GIL on every request, which under load the embedder's threads take (py-spy at 32
    # clients: 10 % of the event loop's time went to getting it back in uuid4).
    return uuid.UUID(int=random.getrandbits(128), version=4).hex


def current_trace_id() -> str:
    """The current OpenTelemetry trace id (32 hex digits) when a span is recording, else ""."""
    span = trace.get_current_span()
    context = span.get_span_context()
    if span.is_recording() and context.is_valid:
        return trace.format_trace_id(context.trace_id)
    return ""
