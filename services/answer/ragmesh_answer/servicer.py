"""gRPC AnswerService: maps requests to the domain (`service.Answerer`) and answers back to protos."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

from google.protobuf.json_format import MessageToDict
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh.answer.v1 import answer_service_pb2_grpc as pb_grpc
from ragmesh_common.messages import message_from
from ragmesh_common.telemetry import Attr, annotate

from . import context as ctx
from .errors import DOMAIN
from .service import EXTRACTIVE, MODEL, Answer, Answerer, Question
from .sessions import StoredSource, Turn

__all__ = ["DOMAIN", "AnswerServicer"]

_GENERATORS = {MODEL: pb.GENERATOR_MODEL, EXTRACTIVE: pb.GENERATOR_EXTRACTIVE}


def _question(request: pb.AskRequest | pb.AskStreamRequest) -> Question:
    annotate({Attr.COLLECTION: ",".join(request.collections) or None, Attr.TOP_K: request.top_k or None})
    return Question(
        query=request.query,
        collections=list(request.collections),
        top_k=request.top_k,
        filters=MessageToDict(request.filters) if request.HasField("filters") else {},
        session_id=request.session_id,
    )


def _source(source: ctx.SourceDoc) -> pb.Source:
    return message_from(pb.Source, source, snippet=ctx.snippet(source.best.text) if source.best else "")


def _answer(answer: Answer) -> pb.Answer:
    annotate(
        {Attr.RESULT_COUNT: len(answer.chunks), Attr.GENERATOR: answer.generator, Attr.MODEL: answer.model or None}
    )
    return pb.Answer(
        text=answer.text,
        sources=[_source(s) for s in answer.sources],
        matched_chunks=[
            pb.MatchedChunk(
                chunk_id=c.chunk_id,
                doc_id=c.doc_id,
                collection=c.collection,
                chunk_index=c.chunk_index,
                text=c.text,
                relevance_score=c.score,
                source_number=answer.numbers.get((c.collection, c.doc_id), 0),
            )
            for c in answer.chunks
        ],
        session_id=answer.session_id,
        generator=_GENERATORS[answer.generator],
        model=answer.model,
        standalone_query=answer.standalone_query,
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
    )


def _stored_source(source: StoredSource) -> pb.Source:
    # A turn keeps no snippet or score of its sources.
    return message_from(pb.Source, source, skip=("snippet", "relevance_score"))


def _turn(turn: Turn) -> pb.Turn:
    created = dt.datetime.fromtimestamp(turn.created_at, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return pb.Turn(
        query=turn.query,
        standalone_query=turn.standalone_query,
        answer=turn.answer,
        sources=[_stored_source(s) for s in turn.sources],
        generator=_GENERATORS.get(turn.generator, pb.GENERATOR_UNSPECIFIED),
        created_at=created,
    )


class AnswerServicer(pb_grpc.AnswerServiceServicer):
    def __init__(self, answerer: Answerer) -> None:
        self.answerer = answerer

    async def Ask(self, request: pb.AskRequest, context: object) -> pb.AskResponse:
        async for item in self.answerer.ask(_question(request)):
            if isinstance(item, Answer):
                return pb.AskResponse(answer=_answer(item))
        raise AssertionError("the answer stream ended without an answer")

    async def AskStream(self, request: pb.AskStreamRequest, context: object) -> AsyncIterator[pb.AskStreamResponse]:
        async for item in self.answerer.ask(_question(request)):
            if isinstance(item, Answer):
                yield pb.AskStreamResponse(answer=_answer(item))
            else:
                yield pb.AskStreamResponse(delta=item)

    async def GetSession(self, request: pb.GetSessionRequest, context: object) -> pb.GetSessionResponse:
        turns = await self.answerer.get_session(request.session_id)
        return pb.GetSessionResponse(session_id=request.session_id, turns=[_turn(t) for t in turns])

    async def DeleteSession(self, request: pb.DeleteSessionRequest, context: object) -> pb.DeleteSessionResponse:
        return pb.DeleteSessionResponse(deleted_turns=await self.answerer.delete_session(request.session_id))
