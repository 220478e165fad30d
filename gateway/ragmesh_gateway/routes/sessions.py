"""Conversations: read and forget a session's turns. A session id is the conversation's capability (a random
id the answer service made): any key that may ask (`read`) may read and forget the session it holds."""

from __future__ import annotations

from fastapi import APIRouter

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES
from ..models import DeleteSessionResponse, SessionId, SessionResponse

router = APIRouter(prefix="/api/v1", tags=["ask"], responses=ERROR_RESPONSES)


@router.get(
    "/sessions/{session_id}", response_model=SessionResponse, dependencies=[require_scope("read", collections=False)]
)
async def get_session(session_id: SessionId, clients: Clients) -> SessionResponse:
    """A conversation's stored turns, oldest first (the last RAGMESH_ANSWER_SESSION_TURNS of them); 404
    SESSION_NOT_FOUND when there is none or it expired."""
    return await clients.get_session(session_id)


@router.delete(
    "/sessions/{session_id}",
    response_model=DeleteSessionResponse,
    dependencies=[require_scope("read", collections=False)],
)
async def delete_session(session_id: SessionId, clients: Clients) -> DeleteSessionResponse:
    """Forget a conversation (200 with `deleted_turns: 0` when there was none)."""
    return DeleteSessionResponse(session_id=session_id, deleted_turns=await clients.delete_session(session_id))
