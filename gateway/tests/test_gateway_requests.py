"""The other direction: what a REST/MCP caller gives (`MeshClients`' arguments and models) reaches the request
message the gateway sends. Each method is called with every argument set and its request is taken at the call
(nothing listens); every field of that request must be set, or listed in NOT_SENT with the reason, so a field added
to a request message fails here until the gateway sends it or says why not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from google.protobuf.message import Message
from ragmesh_gateway.clients import MeshClients
from ragmesh_gateway.config import GatewaySettings
from ragmesh_gateway.models import BatchDocument, EntityInput, EntityRelationInput, GoldenQuery

from tests.support.messages import unset

_JOBS_ONLY = "set by the indexer's jobs on the documents they queue, not by callers"
_FOLDERS_ONLY = "a folder job's file; an uploaded file has no path"
# Request fields the gateway never sets, and why.
NOT_SENT = {
    "DocumentInput.datasource_id": _JOBS_ONLY,
    "DocumentInput.fresh_until": _JOBS_ONLY,
    "FileInput.path": _FOLDERS_ONLY,
    "ConvertRequest.filename": "names inline bytes; files go by ConvertStream (its header carries the name)",
    "ConvertRequest.mime_type": "types inline bytes; files go by ConvertStream (its header carries the type)",
}
DOC = {"doc_id": "doc-1", "title": "Title", "metadata": {"team": "docs"}}
ENTITY = EntityInput(
    type="Service",
    primary_key=["metadata.namespace", "metadata.name"],
    properties={"metadata": {"namespace": "ns", "name": "web"}},
    labels=["network"],
    alternative_keys=["web.ns"],
    relations=[EntityRelationInput(type="SELECTS", target_id="Deployment/ns/web")],
)
CALLS: dict[str, Callable[[MeshClients], Awaitable[Any]]] = {
    "ingest_text": lambda m: m.ingest_text("text", collection="kb", **DOC),
    "ingest_file": lambda m: m.ingest_file(b"data", filename="a.md", mime_type="text/markdown", collection="kb", **DOC),
    "ingest_url": lambda m: m.ingest_url("https://example.com/", collection="kb", **DOC),
    "convert_url": lambda m: m.convert_url("https://example.com/"),
    "search": lambda m: m.search(
        "query",
        collections=["kb", "other"],
        top_k=7,
        mode="dense",
        filters={"team": "docs"},
        group_by_document=True,
        score_threshold=0.5,
        fusion="rrf",
        rrf_k=30,
    ),
    "get_document": lambda m: m.get_document("doc-1", collection="kb"),
    "delete_document": lambda m: m.delete_document("doc-1", collection="kb"),
    "list_collections": lambda m: m.list_collections(),
    "delete_collection": lambda m: m.delete_collection("kb", confirm=True),
    "set_golden_set": lambda m: m.set_golden_set("kb", [GoldenQuery(query_id="q-1", text="q", relevant={"doc-1": 2})]),
    "get_golden_set": lambda m: m.get_golden_set("kb"),
    "delete_golden_set": lambda m: m.delete_golden_set("kb"),
    "evaluate_collection": lambda m: m.evaluate_collection("kb", ["dense"], version=2),
    "list_evaluations": lambda m: m.list_evaluations("kb", mode="dense", limit=5),
    "create_job documents": lambda m: m.create_job(
        collection="kb", documents=[BatchDocument(text="text", **DOC)], prune=True, fresh_for_seconds=60
    ),
    "create_job urls": lambda m: m.create_job(
        collection="kb", urls=["https://example.com/"], prune=True, fresh_for_seconds=60
    ),
    "create_job folder": lambda m: m.create_job(collection="kb", folder="/data/docs", prune=True, fresh_for_seconds=60),
    "create_job archive": lambda m: m.create_job(
        collection="kb", archive=b"PK", archive_name="docs.zip", prune=True, fresh_for_seconds=60
    ),
    "get_job": lambda m: m.get_job("job-1"),
    "list_jobs": lambda m: m.list_jobs(10),
    "cancel_job": lambda m: m.cancel_job("job-1"),
    "list_datasources": lambda m: m.list_datasources("kb"),
    "sync_datasources": lambda m: m.sync_datasources("kb", everything=True),
    "expired_documents": lambda m: m.expired_documents("kb"),
    "prune_expired": lambda m: m.prune_expired("kb"),
    "reindex_collection": lambda m: m.reindex_collection(
        "kb", chunk_tokens=128, chunk_overlap_tokens=16, model="m", tolerance=0.1, force=True, retention_seconds=60
    ),
    "rollback_collection": lambda m: m.rollback_collection("kb"),
    "ask": lambda m: m.ask("question", collections=["kb"], top_k=3, filters={"team": "docs"}, session_id="s-1"),
    "get_session": lambda m: m.get_session("s-1"),
    "delete_session": lambda m: m.delete_session("s-1"),
    "explore_ontology": lambda m: m.explore_ontology("kb", "Service", depth=2),
    "explore_entity": lambda m: m.explore_entity("kb", "Service/ns/web", depth=2, limit=10),
    "get_entity": lambda m: m.get_entity("kb", "Service/ns/web"),
    "shortest_paths": lambda m: m.shortest_paths("kb", "Service", "Deployment", max_depth=3),
    "graph_query": lambda m: m.graph_query(
        "kb", "MATCH (n) RETURN n", target="ontology", parameters={"id": "Service/ns/web"}, row_limit=5
    ),
    "ingest_entities": lambda m: m.ingest_entities(
        "kb", entities=[ENTITY], files=[("k8s.yaml", b"kind: Service", "application/yaml")], max_property_chars=100
    ),
    "delete_entities": lambda m: m.delete_entities("kb", ["Service/ns/web"]),
}
# Methods that call two services at once (each request is checked on its own: list_datasources here, and
# ListEntityTypes has only the collection).
COMPOSITE = {"graph_types"}


class _Sent(Exception):
    pass


async def _request(call: Callable[[MeshClients], Awaitable[Any]]) -> Message:
    """The request `call` sends, taken where the client would put it on the wire."""
    mesh = MeshClients(GatewaySettings(graph_enabled=True))
    sent: list[Message] = []

    async def take(method: str, request: Message, **_: Any) -> Any:
        sent.append(request)
        raise _Sent

    try:
        for client in mesh.services.values():
            client.call = take  # type: ignore[method-assign]
        with pytest.raises(_Sent):
            await call(mesh)
    finally:
        await mesh.close()
    (request,) = sent
    return request


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("name", CALLS)
async def test_every_field_of_a_request_is_sent(name: str) -> None:
    request = await _request(CALLS[name])
    missing = unset(request)
    assert missing <= NOT_SENT.keys(), f"{name}: {type(request).__name__} leaves {sorted(missing - NOT_SENT.keys())}"


def test_every_request_method_is_called_here() -> None:
    methods = {name for name in vars(MeshClients) if not name.startswith("_")}
    streamed_or_local = {"ingest_batch", "convert_file", "ask_stream", "health", "close", "services"}
    assert methods - streamed_or_local - COMPOSITE == {name.split()[0] for name in CALLS}
