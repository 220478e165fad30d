"""Builds the answer service's gRPC server (not started: the caller awaits `service.start()` / `stop()`)."""

from __future__ import annotations

from opentelemetry.trace import Tracer
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh.answer.v1 import answer_service_pb2_grpc as pb_grpc
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.graph.v1 import graph_service_pb2_grpc as graph_grpc
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry

from .chat_model import ChatModel
from .config import AnswerSettings
from .errors import DOMAIN
from .graph import Neighbourhoods
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
    model that is down fails only the questions that need it. With RAGMESH_GRAPH_ENABLED the graph service is
    called too, for sources that are graph entities; when it is down, answers go on without their relations."""
    telemetry = setup_telemetry("answer")

    def client(service: str, addr: str, stub_cls: type, timeout: float) -> ServiceClient:
        return ServiceClient(
            service, addr, stub_cls, timeout=timeout, max_message_bytes=settings.max_message_bytes, caller="answer"
        )

    clients = {
        "search": client(
            "search", settings.search_addr, search_grpc.SearchServiceStub, settings.search_timeout_seconds
        ),
        "embedder": client(
            "embedder", settings.embedder_addr, embedder_grpc.EmbedderServiceStub, settings.search_timeout_seconds
        ),
    }
    sessions = open_sessions(
        redis_url=settings.redis_url,
        redis_prefix=settings.redis_prefix,
        path=settings.sessions_path,
        max_turns=settings.session_turns,
        ttl_seconds=settings.session_ttl_seconds,
    )
    tracer = telemetry.tracer("ragmesh.answer")
    metrics = telemetry.metrics(AnswerMetrics)
    neighbourhoods: Neighbourhoods | None = None
    if settings.graph_enabled and settings.graph_entities:
        clients["graph"] = client(
            "graph", settings.graph_addr, graph_grpc.GraphServiceStub, settings.graph_timeout_seconds
        )
        neighbourhoods = Neighbourhoods(
            clients["graph"],
            metrics,
            entities=settings.graph_entities,
            neighbours=settings.graph_neighbours,
            tracer=tracer,
        )
    model = chat_model(settings, tracer)
    answerer = Answerer(
        search=clients["search"],
        embedder=clients["embedder"],
        sessions=sessions,
        metrics=metrics,
        model=model,
        require_model=settings.require_model,
        default_top_k=settings.top_k,
        search_mode=settings.search_mode,
        min_relevance=settings.min_relevance,
        context_tokens=settings.context_tokens,
        max_query_chars=settings.max_query_chars,
        extractive_sentences=settings.extractive_sentences,
        session_turns=settings.session_turns,
        neighbourhoods=neighbourhoods,
    )
    service = new_server(
        "answer",
        settings,
        lambda server: pb_grpc.add_AnswerServiceServicer_to_server(AnswerServicer(answerer), server),
        [pb.DESCRIPTOR.services_by_name["AnswerService"].full_name],
        domain=DOMAIN,
    )
    service.closers.extend([*(client.close for client in clients.values()), sessions.close])
    if model is not None:
        service.closers.append(model.close)
    return service
