"""A collection's entity graph: what it holds, its ontology, entities and their neighbourhoods, paths between
entity types, read-only Cypher, and entity ingestion (dual storage: graph nodes and searchable documents).

The routes exist only when the gateway runs with RAGMESH_GRAPH_ENABLED=true; without it every path here is an
unknown route (404 ROUTE_NOT_FOUND), as the graph MCP tools are not registered then. An entity id is
`<type>/<primary key values joined by '/'>` (`Deployment/ragmesh/search`), taken as the rest of the path.

Scopes: reading needs `read`, ingesting and deleting entities `write`; a key limited to some collections may name
only those (403 COLLECTION_FORBIDDEN). The graph service's errors reach the caller with their reasons: 404
GRAPH_NOT_FOUND, ENTITY_NOT_FOUND, ENTITY_TYPE_NOT_FOUND; 400 ENTITY_INVALID, DEPTH_OUT_OF_RANGE, QUERY_INVALID;
403 QUERY_NOT_READ_ONLY (a statement that writes); 504 QUERY_TIMEOUT."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Path, Query, UploadFile

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES, UPLOAD_ERROR_RESPONSES, ErrorResponse
from ..models import (
    GRAPH_MAX_NEIGHBOURS,
    MAX_PROPERTY_CHARS,
    CollectionName,
    DeleteEntitiesResponse,
    Depth,
    EntityId,
    EntityTypeName,
    ExploreResponse,
    GraphEntity,
    GraphIngestRequest,
    GraphIngestResponse,
    GraphQueryRequest,
    GraphQueryResponse,
    GraphTypesResponse,
    OntologyResponse,
    PathDepth,
    PathsResponse,
    blank_is_omitted,
)

router = APIRouter(prefix="/api/v1/collections/{name}/graph", tags=["graph"], responses=ERROR_RESPONSES)

EntityIdPath = Annotated[EntityId, Path()]
_QUERY_REFUSED: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorResponse,
        "description": "The statement writes, or reads or writes files (QUERY_NOT_READ_ONLY), or the API key may "
        "not do this (SCOPE_INSUFFICIENT, COLLECTION_FORBIDDEN).",
    }
}


@router.get("/types", response_model=GraphTypesResponse, dependencies=[require_scope("read")])
async def graph_types(name: CollectionName, clients: Clients) -> GraphTypesResponse:
    """What a collection holds: its datasources (synced folders and URL lists) and its graph's entity types
    (with their counts, properties and primary keys) and the relation types between them. A collection without
    a graph has no entity types."""
    return await clients.graph_types(name)


@router.get("/ontology/{entity_type}", response_model=OntologyResponse, dependencies=[require_scope("read")])
async def explore_ontology(
    name: CollectionName,
    entity_type: Annotated[EntityTypeName, Path()],
    clients: Clients,
    depth: Annotated[Depth, Query()] = 1,
) -> OntologyResponse:
    """An entity type and the relation types within `depth` hops of it, nearest first: which types point at it
    and which it points at (`(from_type)-[type]->(to_type)`)."""
    return await clients.explore_ontology(name, entity_type, depth=depth)


@router.get("/explore/{entity_id:path}", response_model=ExploreResponse, dependencies=[require_scope("read")])
async def explore_entity(
    name: CollectionName,
    entity_id: EntityIdPath,
    clients: Clients,
    depth: Annotated[Depth, Query()] = 1,
    limit: Annotated[
        int, Query(ge=1, le=GRAPH_MAX_NEIGHBOURS, description="At most this many neighbours (default 100).")
    ] = 100,
) -> ExploreResponse:
    """An entity with its properties and its neighbours within `depth` hops, nearest first. Each neighbour says
    the relation that reached it and its direction seen from `via_id` (`incoming` SELECTS on a Deployment: a
    Service selects it)."""
    return await clients.explore_entity(name, entity_id, depth=depth, limit=limit)


@router.get("/entities/{entity_id:path}", response_model=GraphEntity, dependencies=[require_scope("read")])
async def get_entity(name: CollectionName, entity_id: EntityIdPath, clients: Clients) -> GraphEntity:
    """An entity with every property and every relation, in both directions."""
    return await clients.get_entity(name, entity_id)


@router.get("/paths", response_model=PathsResponse, dependencies=[require_scope("read")])
async def shortest_paths(
    name: CollectionName,
    clients: Clients,
    from_type: Annotated[EntityTypeName, Query(description="The entity type paths start from.")],
    to_type: Annotated[EntityTypeName, Query(description="The entity type paths end at.")],
    max_depth: Annotated[PathDepth, Query()] = 4,
) -> PathsResponse:
    """How two entity types are related: every shortest path of relation types between them in the ontology
    (relations followed in either direction), in Cypher notation. Empty when they are not connected."""
    return await clients.shortest_paths(name, from_type, to_type, max_depth=max_depth)


@router.post(
    "/query", response_model=GraphQueryResponse, dependencies=[require_scope("read")], responses=_QUERY_REFUSED
)
async def graph_query(name: CollectionName, body: GraphQueryRequest, clients: Clients) -> GraphQueryResponse:
    """Run one read-only Cypher statement on the collection's data graph (node tables per entity type, relation
    tables per relation type; every node has `id`) or on its ontology. A statement that writes, or that reads or
    writes files, is refused with 403 QUERY_NOT_READ_ONLY and changes nothing; a timeout and a row limit bound
    it."""
    return await clients.graph_query(
        name, body.query, target=body.target, parameters=body.parameters, row_limit=body.row_limit
    )


@router.post("/ingest", response_model=GraphIngestResponse, dependencies=[require_scope("write")])
async def ingest_entities(name: CollectionName, body: GraphIngestRequest, clients: Clients) -> GraphIngestResponse:
    """Store entities in the collection's graph and as searchable documents (metadata `is_graph_entity`,
    `graph_entity_type`). An entity's id is its type and its primary key values; ingesting it again replaces
    it in both stores."""
    return await clients.ingest_entities(name, entities=body.entities, max_property_chars=body.max_property_chars)


_FILES = "Kubernetes YAML or JSON (one or many documents, List kinds included), or JSON Lines of entities."
# The multipart body as it is read: one or more `files` parts, and `max_property_chars` (blank: the default).
_FILES_FORM = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["files"],
                "properties": {
                    "files": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "minItems": 1,
                        "description": _FILES,
                    },
                    "max_property_chars": blank_is_omitted(
                        GraphIngestRequest.model_json_schema()["properties"]["max_property_chars"]["anyOf"][0],
                        "Longer properties stay out of the graph, in the text only (default 250).",
                    ),
                },
            }
        }
    },
}


@router.post(
    "/ingest/files",
    response_model=GraphIngestResponse,
    dependencies=[require_scope("write")],
    responses=UPLOAD_ERROR_RESPONSES,
    openapi_extra={"requestBody": _FILES_FORM},
)
async def ingest_entity_files(
    name: CollectionName,
    files: Annotated[list[UploadFile], File(description=_FILES)],
    clients: Clients,
    max_property_chars: Annotated[int | None, Form(ge=1, le=MAX_PROPERTY_CHARS)] = None,
) -> GraphIngestResponse:
    """Read entities from uploaded files and store them as `/ingest` does. Kubernetes objects become entities
    of their kind keyed by namespace and name, related by SELECTS, USES, HAS, REFERENCES, READS, SCALES,
    APPLIES_TO and PROTECTS."""
    read = [(file.filename or f"file-{i}", await file.read(), file.content_type or "") for i, file in enumerate(files)]
    return await clients.ingest_entities(name, files=read, max_property_chars=max_property_chars)


@router.delete(
    "/entities/{entity_id:path}", response_model=DeleteEntitiesResponse, dependencies=[require_scope("write")]
)
async def delete_entity(name: CollectionName, entity_id: EntityIdPath, clients: Clients) -> DeleteEntitiesResponse:
    """Delete an entity, its child entities and every relation to or from them, from the graph and the search
    index. Deleting an unknown id deletes nothing."""
    return DeleteEntitiesResponse(deleted_ids=await clients.delete_entities(name, [entity_id]))
