"""Answers use the graph: a retrieved source that is a graph entity gets its neighbourhood (one hop, from the real
graph service over gRPC) below its text, so the model, and the extractive answer, can cite it; a graph that is
down or does not know the entity costs the answer its relations, never the answer.

The mesh is real (hash embedder, indexer, search, graph on LadybugDB), the chat model is the local fake
OpenAI-compatible server over real HTTP (tests/support/fake_chat.py). The entities come from Kubernetes manifests
through the indexer's IngestEntities: each a node in the graph and a document whose doc_id is the entity id and
whose metadata says is_graph_entity."""

from __future__ import annotations

import re
import socket

import pytest
import pytest_asyncio
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh_common.telemetry import Attr, setup_telemetry

RELEVANCE = 0.15
SHOP = "shop"
FRONTEND = "Deployment/shop/frontend"
GHOST = "ConfigMap/shop/ghost"  # in the vector store but no longer in the graph
MANIFESTS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: frontend, namespace: shop, labels: {app: frontend}}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: frontend}}
    spec:
      serviceAccountName: frontend
      containers:
        - {name: web, image: "shop/web:1.4"}
---
apiVersion: v1
kind: Service
metadata: {name: frontend, namespace: shop}
spec: {selector: {app: frontend}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: frontend, namespace: shop}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: frontend, namespace: shop}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: frontend}
  maxReplicas: 10
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ghost, namespace: shop}
data: {worker: the ghost checkout worker of the frontend deployment}
"""
# The hops the graph holds around the frontend Deployment, as the context names them.
FRONTEND_HOPS = (
    "<-[SELECTS]- Service/shop/frontend",
    "<-[SCALES]- HorizontalPodAutoscaler/shop/frontend",
    "-[USES]-> ServiceAccount/shop/frontend",
    "-[HAS]-> Container/shop/frontend/web",
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graph_lookups(outcome: str) -> float:
    """ragmesh_answer_graph_lookups_total{outcome} as the answer service's /metrics shows it."""
    return sum(
        sample.value
        for metric in setup_telemetry("answer").registry.collect()
        if metric.name == "ragmesh_answer_graph_lookups"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("outcome") == outcome
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    """A mesh with the graph, the manifests ingested as entities (both stores), one of them then lost by the graph,
    and a document that is not an entity."""
    mesh = await mesh_factory(graph=True)
    indexer = mesh.stub("indexer")
    stored = await indexer.IngestEntities(
        indexer_pb.IngestEntitiesRequest(
            collection=SHOP, files=[indexer_pb.FileInput(data=MANIFESTS.encode(), filename="shop.yaml")]
        )
    )
    assert {FRONTEND, GHOST} <= set(stored.entity_ids) and not stored.dangling_relations
    # The graph alone forgets one (as a graph restored from an older backup would): search still finds it.
    await mesh.stub("graph").DeleteEntities(graph_pb.DeleteEntitiesRequest(collection=SHOP, ids=[GHOST]))
    runbook = indexer_pb.DocumentInput(
        collection=SHOP,
        doc_id="runbook",
        title="Runbook",
        text="Scale the frontend deployment of the shop before a sale.",
    )
    await indexer.IngestDocument(indexer_pb.IngestDocumentRequest(document=runbook))
    return mesh


@pytest.fixture
def with_graph(mesh, fake_chat, answer_service):
    """An answer service with the graph on (and the fake model unless model=None), its settings overridable."""
    fake_chat.reset()

    def start(*, model: bool = True, **overrides):
        settings = {"min_relevance": RELEVANCE, "graph_enabled": True, "graph_addr": mesh.addrs["graph"]}
        if model:
            settings |= {"base_url": fake_chat.url, "model": "fake-chat"}
        return answer_service(mesh, **(settings | overrides))

    return start


async def ask(answer, query: str, top_k: int = 5) -> pb.Answer:
    return (await answer.Ask(pb.AskRequest(query=query, collections=[SHOP], top_k=top_k))).answer


def prompt_of(fake_chat) -> str:
    (request,) = fake_chat.calls("answer")
    return request["messages"][-1]["content"]


def block_of(prompt: str, doc_id: str) -> str:
    """The numbered source of `doc_id` in a prompt: its header line to the next source's."""
    sources = re.split(r"\n\n(?=\[\d+\] )", prompt.rpartition("\n\nQuestion:")[0])
    return next(block for block in sources if block.split("\n", 1)[0].endswith(f" ({SHOP}/{doc_id})"))


async def test_the_model_is_given_the_relations_of_the_retrieved_entities(with_graph, fake_chat):
    async with with_graph() as answer:
        reply = await ask(answer, "How many replicas does the frontend deployment of the web shop run?")
    assert reply.generator == pb.GENERATOR_MODEL
    prompt = prompt_of(fake_chat)
    # The entity's source: its text, then one line naming every relation it has in the graph, both directions.
    deployment = block_of(prompt, FRONTEND)
    assert "Deployment shop/frontend" in deployment
    (line,) = [line for line in deployment.splitlines() if line.startswith("Relations of ")]
    assert line.startswith(f"Relations of {FRONTEND}: ") and line.endswith(".")
    assert sorted(line.removeprefix(f"Relations of {FRONTEND}: ").rstrip(".").split("; ")) == sorted(FRONTEND_HOPS)
    # What only the graph knows: the document lists its own (outgoing) relations, not who points at it.
    assert "Service/shop/frontend" not in deployment.partition("Relations of")[0]
    # Every entity source gets its own line (the Container: its parent, incoming); the plain document none.
    assert "Relations of Container/shop/frontend/web: <-[HAS]- Deployment/shop/frontend." in block_of(
        prompt, "Container/shop/frontend/web"
    )
    assert "Relations of" not in block_of(prompt, "runbook")


async def test_an_extractive_answer_quotes_the_relations_citing_the_entitys_source(with_graph):
    async with with_graph(model=False) as answer:
        reply = await ask(
            answer, "Which HorizontalPodAutoscaler scales Deployment shop frontend and which Service selects it?"
        )
    assert reply.generator == pb.GENERATOR_EXTRACTIVE
    number = next(s.number for s in reply.sources if s.doc_id == FRONTEND)
    # The relations line, quoted whole and citing the Deployment's source.
    quoted = re.search(rf"Relations of {re.escape(FRONTEND)}: (.*?) \[(\d+)\]\.", reply.text)
    assert quoted, reply.text
    assert sorted(quoted.group(1).split("; ")) == sorted(FRONTEND_HOPS) and int(quoted.group(2)) == number
    assert next(s for s in reply.sources if s.doc_id == FRONTEND).cited


async def test_a_graph_that_is_down_leaves_the_answer_without_relations(with_graph, fake_chat):
    failed = graph_lookups("failed")
    async with with_graph(graph_addr=f"127.0.0.1:{closed_port()}") as answer:
        reply = await ask(answer, "How many replicas does the frontend deployment run?")
    assert reply.generator == pb.GENERATOR_MODEL and reply.text
    prompt = prompt_of(fake_chat)
    assert "Deployment shop/frontend" in prompt and "Relations of" not in prompt
    assert graph_lookups("failed") > failed


async def test_an_entity_the_graph_does_not_know_costs_only_its_own_relations(with_graph, fake_chat, caplog):
    failed, added = graph_lookups("failed"), graph_lookups("added")
    async with with_graph(graph_entities=10) as answer:  # every entity source
        reply = await ask(answer, "What does ConfigMap shop ghost say about Deployment shop frontend?")
    assert reply.text
    prompt = prompt_of(fake_chat)
    assert "Relations of" not in block_of(prompt, GHOST)
    assert f"Relations of {FRONTEND}: " in block_of(prompt, FRONTEND)
    assert graph_lookups("failed") == failed + 1 and graph_lookups("added") > added
    # The log says which entity went without and why.
    assert any(
        f"no graph neighbourhood for {GHOST}" in r.getMessage() and "ENTITY_NOT_FOUND" in r.getMessage()
        for r in caplog.records
    )


async def test_with_the_graph_off_no_relations_are_looked_up(with_graph, fake_chat):
    added, failed = graph_lookups("added"), graph_lookups("failed")
    async with with_graph(graph_enabled=False) as answer:
        await ask(answer, "How many replicas does the frontend deployment run?")
    prompt = prompt_of(fake_chat)
    assert "Deployment shop/frontend" in prompt and "Relations of" not in prompt
    assert (graph_lookups("added"), graph_lookups("failed")) == (added, failed)


async def test_at_most_graph_entities_sources_get_relations(with_graph, fake_chat):
    async with with_graph(graph_entities=1) as answer:
        await ask(answer, "frontend deployment service of the web shop")
    prompt = prompt_of(fake_chat)
    entities = re.findall(r"^\[\d+\] (\w+/shop/\S+) \(shop/", prompt, re.MULTILINE)
    # Several entities were retrieved; only the best one got its relations.
    assert len(entities) > 1 and prompt.count("Relations of ") == 1
    assert f"Relations of {entities[0]}: " in prompt


async def test_the_graph_hop_is_a_span_in_the_answers_trace(with_graph, monkeypatch):
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from ragmesh_common import telemetry

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # nothing listens there: do not wait at shutdown
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    exporter = InMemorySpanExporter()
    traced = telemetry.Telemetry("answer")
    traced.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setitem(telemetry._services, "answer", traced)
    try:
        async with with_graph() as answer:
            await ask(answer, "How many replicas does the frontend deployment of the web shop run?")
    finally:
        traced.tracer_provider.shutdown()
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (asked,) = [s for s in spans if s.name == "/ragmesh.answer.v1.AnswerService/Ask"]
    (hop,) = [s for s in spans if s.name == "answer.graph_neighbourhoods"]
    explored = [s for s in spans if s.name == "/ragmesh.graph.v1.GraphService/ExploreEntity"]
    # One trace: the answer's server span, the graph hop under it, each ExploreEntity call under the hop.
    assert {s.context.trace_id for s in spans} == {asked.context.trace_id}
    parent = hop.parent
    while parent is not None and parent.span_id != asked.context.span_id:
        parent = by_id[parent.span_id].parent
    assert parent is not None
    assert explored and all(s.parent.span_id == hop.context.span_id for s in explored)
    # The hop says how many entities it asked about and how many the graph answered (the ghost it does not know).
    answered = [s for s in explored if s.status.status_code.name != "ERROR"]
    assert (hop.attributes[Attr.QUERY_COUNT], hop.attributes[Attr.RESULT_COUNT]) == (len(explored), len(answered))
    assert hop.attributes[Attr.STATUS] == ("ok" if answered == explored else "degraded")


@pytest.mark.parametrize(
    ("field", "value"), [("graph_entities", 11), ("graph_neighbours", 0), ("graph_timeout_seconds", 0)]
)
def test_graph_settings_out_of_range_are_refused_at_start_up(field, value):
    from pydantic import ValidationError
    from ragmesh_answer.config import AnswerSettings

    with pytest.raises(ValidationError, match=field):
        AnswerSettings(**{field: value})
