"""Pure ASGI middleware: request ids and last-resort error handling, and the request body size cap."""

from __future__ import annotations

import asyncio
import logging

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .context import REQUEST_ID_HEADER, accept_request_id, request_id_var
from .errors import error_response, internal_error, payload_too_large

log = logging.getLogger(__name__)


class RequestContextMiddleware:
    """Gives each request an id (the caller's X-Request-ID when sane), echoes it in the response, and turns
    an unexpected exception into a logged 500 INTERNAL in the one error shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = accept_request_id(Headers(scope=scope).get(REQUEST_ID_HEADER))
        token = request_id_var.set(request_id)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception(
                "unhandled error in %s %s", scope.get("method"), scope.get("path"), extra={"request_id": request_id}
            )
            if started:
                raise
            await error_response(internal_error())(scope, receive, send_with_id)
        finally:
            request_id_var.reset(token)


class _BodyTooLarge(Exception):
    """Raised from `receive` once the body passes the cap (whatever catches it, the middleware answers)."""


# After refusing a body, how long the rest of it is read and thrown away before answering. Closing a
# connection with unread request bytes makes the kernel reset it, and the client would see a broken
# connection instead of the 413 (nginx's "lingering close" solves the same problem).
LINGER_SECONDS = 5.0


class BodyLimitMiddleware:
    """Refuses request bodies over `max_bytes` with 413 PAYLOAD_TOO_LARGE before they are held whole: at once
    when Content-Length says so, else (chunked or unknown length) as soon as the received bytes pass the cap.
    Nothing past the cap is kept: the rest of the body is read and discarded for at most LINGER_SECONDS."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, body_done=False)
            return

        received = 0
        exceeded = False
        body_done = False
        app_started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded, body_done
            if exceeded:
                raise _BodyTooLarge
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_bytes:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal app_started
            if exceeded and not app_started:
                return  # whatever the app made of the error, the client gets the 413 below
            if message["type"] == "http.response.start":
                app_started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded or app_started:
                raise
        if exceeded and not app_started:
            await self._refuse(scope, receive, send, body_done=body_done)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, *, body_done: bool) -> None:
        drained = body_done or await _discard_rest(receive)
        headers = {} if drained else {"Connection": "close"}
        await error_response(payload_too_large(self.max_bytes), headers=headers)(scope, receive, send)


async def _discard_rest(receive: Receive) -> bool:
    """Read the rest of the request body without keeping it; False when it did not end in time."""
    try:
        async with asyncio.timeout(LINGER_SECONDS):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return False
                if not message.get("more_body", False):
                    return True
    except TimeoutError:
        return False
