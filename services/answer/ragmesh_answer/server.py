"""Builds the answer service's gRPC server (not started: the caller awaits `service.start()` / `stop()`)."""

from __future__ import annotations

from opentelemetry.trace import Tracer
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh.answer.v1 import answer_service_pb2_grpc as pb_grpc
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry

from .chat_model import ChatModel
from .config import AnswerSettings
from .errors import DOMAIN
from .metrics import AnswerMetrics
from .service import Answerer
from .servicer import AnswerServicer
from .sessions import open_sessions


def chat_model(settings: AnswerSettings, tracer: Tracer | None = None) -> ChatModel | None:
    """The configured chat model, or None (extractive answers)."""
    if not settings.model_configured:
        return None
    key = settings.api_key.get_secret_value() if settings.api_key else None
    return ChatModel(
        model=settings.model,
        base_url=settings.base_url,
        api_key=key,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
        temperature=settings.temperature,
        max_output_tokens=settings.max_output_tokens,
        tracer=tracer,
    )


def create_server(settings: AnswerSettings) -> Service:
    """The answer server. Nothing is contacted at start-up: search, the embedder and the chat model are
    called per question, so the answer service starts (and reports SERVING) while they come up, and a chat
    model that is down fails only the questions that need it."""
    telemetry = setup_telemetry("answer")
    clients = {
        "search": ServiceClient(
            "search",
            settings.search_addr,
            search_grpc.SearchServiceStub,
            timeout=settings.search_timeout_seconds,
            max_message_bytes=settings.max_message_bytes,
            caller="answer",
        ),
        "embedder": ServiceClient(
            "embedder",
            settings.embedder_addr,
            embedder_grpc.EmbedderServiceStub,
            timeout=settings.search_timeout_seconds,
            max_message_bytes=settings.max_message_bytes,
            caller="answer",
        ),
    }
    sessions = open_sessions(
        redis_url=settings.redis_url,
        redis_prefix=settings.redis_prefix,
        path=settings.sessions_path,
        max_turns=settings.session_turns,
        ttl_seconds=settings.session_ttl_seconds,
    )
    model = chat_model(settings, telemetry.tracer("ragmesh.answer"))
    answerer = Answerer(
        search=clients["search"],
        embedder=clients["embedder"],
        sessions=sessions,
        metrics=telemetry.metrics(AnswerMetrics),
        model=model,
        require_model=settings.require_model,
        default_top_k=settings.top_k,
        search_mode=settings.search_mode,
        min_relevance=settings.min_relevance,
        context_tokens=settings.context_tokens,
        max_query_chars=settings.max_query_chars,
        extractive_sentences=settings.extractive_sentences,
        session_turns=settings.session_turns,
    )
    service = new_server(
        "answer",
        settings,
        lambda server: pb_grpc.add_AnswerServiceServicer_to_server(AnswerServicer(answerer), server),
        [pb.DESCRIPTOR.services_by_name["AnswerService"].full_name],
        domain=DOMAIN,
    )
    service.closers.extend([clients["search"].close, clients["embedder"].close, sessions.close])
    if model is not None:
        service.closers.append(model.close)
    return service
