"""Answers with cited sources, whole or streamed as Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from ragmesh_common.errors import RagmeshError
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES, error_object
from ..models import AskRequest, AskResponse

router = APIRouter(prefix="/api/v1", tags=["ask"], responses=ERROR_RESPONSES)

# Comments sent while the model thinks, so proxies keep the connection open.
SSE_PING_SECONDS = 15
_STREAM_DOC = {
    "description": "The answer, as JSON, or with `stream` (or `Accept: text/event-stream`) as Server-Sent Events: "
    '`token` events `{"text": ...}`, then one `done` event carrying the same JSON as the '
    "unstreamed response; a failure after the stream started is an `error` event with the error "
    'body (`{"error": {...}}`).',
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def _event(event: str, data: object) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(data, ensure_ascii=False), event=event)


@router.post("/ask", response_model=AskResponse, responses={200: _STREAM_DOC}, dependencies=[require_scope("read")])
async def ask(body: AskRequest, request: Request, clients: Clients) -> AskResponse | EventSourceResponse:
    """Answer a question from the documents of one or more collections, citing them by number ([1]).

    The question is searched (a follow-up in a `session_id` is first rewritten into a standalone question with
    the conversation's earlier turns), the best chunks become numbered sources within a token budget, and a
    chat model answers from them; with no model configured the answer is extractive: the retrieved sentences
    closest to the question, each cited (`"generator": "extractive"`). Nothing relevant is 404 `NO_RESULTS`
    (the model is not called); a chat model that is down is 503 naming it, while search keeps working."""
    question: dict[str, Any] = {
        "collections": body.collection_names(),
        "top_k": body.top_k,
        "filters": body.filters,
        "session_id": body.session_id,
    }
    if not (body.stream or "text/event-stream" in request.headers.get("accept", "")):
        return await clients.ask(body.query, **question)
    events = clients.ask_stream(body.query, **question)
    # The first event (or failure) before answering: a question that fails before its first token gets a
    # plain error response with its status code, not a stream.
    first = await anext(events)
    return EventSourceResponse(
        _sse(first, events), ping=SSE_PING_SECONDS, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _sse(
    first: str | AskResponse, events: AsyncGenerator[str | AskResponse, None]
) -> AsyncIterator[ServerSentEvent]:
    async def all_events() -> AsyncIterator[str | AskResponse]:
        yield first
        async for event in events:
            yield event

    try:
        async for event in all_events():
            if isinstance(event, AskResponse):
                yield _event("done", event.model_dump(mode="json"))
            else:
                yield _event("token", {"text": event})
    except RagmeshError as exc:
        yield _event("error", {"error": error_object(exc)})
    finally:
        await events.aclose()
