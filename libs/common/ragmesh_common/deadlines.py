"""The deadline of the call being served, so that calls made on its behalf inherit what is left of it.

The server's error interceptor records it (`record`); a call served in process (`inprocess`) sets it too;
`clients.ServiceClient.deadline` caps every downstream call by it."""

from __future__ import annotations

import contextvars
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import grpc

# The absolute (time.monotonic) deadline of the call being served, so that calls made on its behalf
# inherit what is left of it (see ragmesh_common.clients).
current_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("current_deadline", default=None)


def record(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """Set `current_deadline` from a gRPC servicer context (none when the caller gave no timeout)."""
    remaining = context.time_remaining()
    current_deadline.set(time.monotonic() + remaining if remaining is not None else None)
