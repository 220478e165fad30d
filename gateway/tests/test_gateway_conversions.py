"""Every field of every message the gateway reads reaches its REST/MCP model (`ragmesh_gateway.conversions`), or
is listed in NOT_EXPOSED with the reason. A field added to a proto is set by `filled` and, unless a conversion
carries it or it is listed, fails here."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import Message
from ragmesh.answer.v1 import answer_service_pb2 as answer_pb
from ragmesh.converter.v1 import converter_service_pb2 as conv_pb
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.errors import RagmeshError
from ragmesh_gateway import conversions
from ragmesh_gateway.models import EntityInput, EntityRelationInput, GoldenQuery

from tests.support.messages import filled, oneof_cases, unread, unset

# Values the models accept (a Literal, a status code name); the rest get the walker's own.
OVERRIDES = {
    "Datasource.kind": "urls",
    "CollectionVersion.state": "building",  # not "previous", the fallback
    "ReindexInfo.decision": "forced",
    "IngestError.code": "NOT_FOUND",
    "IngestResult.status": idx_pb.INGEST_STATUS_UNCHANGED,  # FAILED results reach the caller as errors instead
}

# Fields the gateway reads from no message, and why.
NOT_EXPOSED: dict[str, str] = {}


def _timeless(model: Any) -> Any:
    """took_ms is the gateway's own measure, not a field it converts."""
    return model.model_copy(update={"took_ms": 0.0})


def _error(error: RagmeshError) -> tuple[Any, ...]:
    return error.code, error.reason, error.message, error.domain, dict(error.metadata)


READS: dict[type[Message], Callable[[Any], Any]] = {
    conv_pb.ConvertedDocument: conversions.converted,
    idx_pb.IngestResult: conversions.ingest_result,
    idx_pb.IngestError: lambda e: _error(conversions.ingest_error(e)),
    idx_pb.Job: conversions.job_model,
    idx_pb.Datasource: conversions.datasource,
    idx_pb.ExpiredDocument: conversions.expired_document,
    idx_pb.RollbackCollectionResponse: lambda r: conversions.rollback(r, "asked"),
    idx_pb.ReindexInfo: conversions.reindex_info,
    search_pb.IndexSettings: conversions.index_settings,
    search_pb.CollectionVersion: conversions.collection_version,
    search_pb.CollectionInfo: conversions.collection_info,
    search_pb.SearchResult: conversions.search_hit,
    search_pb.SearchResponse: lambda r: _timeless(
        conversions.search_response(r, query="asked", mode="dense", started=0.0)
    ),
    search_pb.GetDocumentResponse: conversions.document,
    search_pb.GoldenQuery: conversions.golden_query,
    search_pb.SetGoldenSetResponse: conversions.golden_set_summary,
    search_pb.GetGoldenSetResponse: conversions.golden_set,
    search_pb.Evaluation: conversions.evaluation,
    answer_pb.Source: conversions.source,
    answer_pb.MatchedChunk: conversions.matched_chunk,
    answer_pb.Answer: lambda a: _timeless(conversions.asked(a, 0.0)),
    answer_pb.Turn: conversions.session_turn,
    answer_pb.GetSessionResponse: conversions.session,
    graph_pb.Relation: conversions.graph_relation,
    graph_pb.Entity: conversions.graph_entity,
    graph_pb.EntityType: conversions.entity_type,
    graph_pb.TypeRelation: conversions.type_relation,
    graph_pb.GraphInfo: conversions.graph_info,
    graph_pb.ExploreOntologyResponse: conversions.ontology,
    graph_pb.Neighbour: conversions.neighbour,
    graph_pb.ExploreEntityResponse: conversions.explored,
    graph_pb.ShortestPathsResponse: conversions.type_paths,
    graph_pb.QueryResponse: conversions.query_rows,
    idx_pb.IngestEntitiesResponse: conversions.entities_ingested,
}
CASES = [(cls, case) for cls in READS for case in oneof_cases(cls)]


@pytest.mark.parametrize(("cls", "oneofs"), CASES, ids=[f"{c.__name__}{''.join(o.values())}" for c, o in CASES])
def test_every_field_of_a_message_reaches_its_model(cls: type[Message], oneofs: dict[str, str]) -> None:
    dropped = unread(filled(cls, OVERRIDES, oneofs), READS[cls])
    assert dropped <= NOT_EXPOSED.keys(), (
        f"{cls.__name__}: not carried to the model: {sorted(dropped - NOT_EXPOSED.keys())}"
    )


def test_not_exposed_lists_only_fields_that_are_dropped() -> None:
    dropped = set().union(*(unread(filled(cls, OVERRIDES, case), READS[cls]) for cls, case in CASES))
    assert NOT_EXPOSED.keys() <= dropped, f"carried after all: {sorted(NOT_EXPOSED.keys() - dropped)}"


def _messages(fn: Callable[..., Any]) -> tuple[list[type[Message]], type[Message] | None]:
    """The ragmesh messages a conversion takes, and the one it returns."""
    hints = typing.get_type_hints(fn)
    returned = hints.pop("return", None)

    def ours(t: Any) -> bool:
        return inspect.isclass(t) and issubclass(t, Message) and t.__module__.startswith("ragmesh.")

    return [t for t in hints.values() if ours(t)], returned if ours(returned) else None


def test_every_conversion_is_checked_here() -> None:
    functions = [
        f for name, f in vars(conversions).items() if inspect.isfunction(f) and f.__module__ == conversions.__name__
    ]
    taken = {t for f in functions for t in _messages(f)[0]}
    built = {r for f in functions if (r := _messages(f)[1]) is not None}
    assert taken <= READS.keys(), f"conversions with no completeness check: {taken - READS.keys()}"
    assert built == {search_pb.GoldenQuery, idx_pb.EntityInput}, (
        "a new model -> message conversion: check it as test_golden_query_message"
    )


def test_golden_query_message_carries_every_field_both_ways() -> None:
    query = GoldenQuery(query_id="q-1", text="a judged query", relevant={"doc-1": 2, "doc-2": 0})
    message = conversions.golden_query_message(query)
    assert unset(message) == set()
    assert conversions.golden_query(message) == query
    assert unread(message, conversions.golden_query) == set()


def test_entity_input_message_carries_every_field():
    entity = EntityInput(
        type="Deployment",
        primary_key=["metadata.namespace", "metadata.name"],
        properties={"metadata": {"namespace": "ragmesh", "name": "search"}, "spec": {"replicas": 2}},
        labels=["workload"],
        alternative_keys=["search.ragmesh"],
        relations=[EntityRelationInput(type="USES", target_id="ServiceAccount/ragmesh/search")],
    )
    message = conversions.entity_input_message(entity)
    assert unset(message) == set()
    assert message.properties["spec"]["replicas"] == 2
    assert [(r.type, r.target_id) for r in message.relations] == [("USES", "ServiceAccount/ragmesh/search")]
