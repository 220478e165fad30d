"""The graph service's domain: checks what callers send, runs the store's blocking calls in worker threads, and
walks the graphs (entity neighbourhoods hop by hop, the ontology's types and shortest type paths, in Python over
what the store reads). No gRPC code here.

One graph pod holds the graphs of one data directory (the store's databases are opened by this process alone);
it stops at the graph: entities' searchable text is the indexer's, kept in the vector store.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr, annotate
from ragmesh_common.threads import named_pool

from .metrics import GraphMetrics
from .store import Entity, EntityType, GraphInfo, GraphStore, Rows, Target, TypeRelation, UpsertResult
from .store.base import INTERNAL_COLUMNS, Direction, text

T = TypeVar("T")

TYPE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
RELATION_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
ID_MAX_CHARS = 1024
PROPERTY_MAX_CHARS = 256
MAX_ENTITIES = 10_000
MAX_EXPLORE_DEPTH = 3
MAX_PATH_DEPTH = 6
DEFAULT_PATH_DEPTH = 4
DEFAULT_NEIGHBOURS = 100
MAX_NEIGHBOURS = 1000
MAX_QUERY_CHARS = 10_000
MAX_PATHS = 100


@dataclass(frozen=True)
class Neighbour:
    id: str
    type: str
    relation: str
    direction: Direction
    depth: int
    via_id: str


@dataclass(frozen=True)
class Neighbourhood:
    entity: Entity
    neighbours: list[Neighbour]
    truncated: bool


@dataclass(frozen=True)
class OntologyNeighbourhood:
    entity_type: EntityType
    relations: list[TypeRelation]


@dataclass(frozen=True)
class TypePath:
    hops: list[tuple[TypeRelation, bool]]  # each hop and whether it is walked forwards (from_type -> to_type)
    start: str

    @property
    def cypher(self) -> str:
        """(:Service)-[:SELECTS]->(:Deployment)<-[:HAS]-(:Namespace)"""
        out = f"(:{self.start})"
        for hop, forwards in self.hops:
            if forwards:
                out += f"-[:{hop.type}]->(:{hop.to_type})"
            else:
                out += f"<-[:{hop.type}]-(:{hop.from_type})"
        return out


def entity_type_of(entity_id: str) -> str:
    return entity_id.split("/", 1)[0]


def check_entity_id(entity_id: str, field: str) -> str:
    """An id "<type>/<key>" with a valid type and a non-empty key, or ENTITY_INVALID."""
    entity_type, _, key = entity_id.partition("/")
    if not key or not TYPE_RE.fullmatch(entity_type) or len(entity_id) > ID_MAX_CHARS:
        raise invalid_argument(
            Reason.ENTITY_INVALID,
            f"entity id {entity_id[:80]!r} is not '<type>/<primary key values joined by \"/\">' "
            f"(at most {ID_MAX_CHARS} characters)",
            field=field,
        )
    return entity_id


def check_entity(entity: Entity, index: int) -> None:
    """ENTITY_INVALID, with the field, for an entity the graph cannot hold."""
    at = f"entities[{index}]"
    if not TYPE_RE.fullmatch(entity.type):
        raise invalid_argument(
            Reason.ENTITY_INVALID,
            f"entity type {entity.type[:80]!r} must be 1-64 letters, digits or '_', starting with a letter",
            field=f"{at}.type",
        )
    check_entity_id(entity.id, f"{at}.id")
    if entity_type_of(entity.id) != entity.type:
        raise invalid_argument(
            Reason.ENTITY_INVALID, f"entity id {entity.id!r} must start with '{entity.type}/'", field=f"{at}.id"
        )
    if entity.primary_key:
        keys = [v for _, v in entity.primary_key]
        if any(isinstance(v, list) for v in keys):
            raise invalid_argument(
                Reason.ENTITY_INVALID, "primary key values must be scalars", field=f"{at}.primary_key"
            )
        expected = entity.type + "/" + "/".join(text(v) for v in keys if not isinstance(v, list))
        if entity.id != expected:
            raise invalid_argument(
                Reason.ENTITY_INVALID,
                f"entity id {entity.id!r} is not its type and primary key values: {expected!r}",
                field=f"{at}.id",
            )
    names: set[str] = set()
    for name, value in (*entity.primary_key, *entity.properties.items()):
        where = f"{at}.properties[{name}]"
        if (
            not name
            or len(name) > PROPERTY_MAX_CHARS
            or name.startswith("_")
            or name.lower() in INTERNAL_COLUMNS
            or "`" in name
            or any(ord(c) < 32 for c in name)
        ):
            raise invalid_argument(
                Reason.ENTITY_INVALID,
                f"property name {name[:80]!r} must be 1-{PROPERTY_MAX_CHARS} characters, not start with '_', "
                "not be 'id', and hold no backquote or control character",
                field=where,
            )
        if name.lower() in names:
            raise invalid_argument(Reason.ENTITY_INVALID, f"property {name!r} is given twice", field=where)
        names.add(name.lower())
        if isinstance(value, dict) or (
            isinstance(value, list) and any(isinstance(v, list | dict) or v is None for v in value)
        ):
            raise invalid_argument(
                Reason.ENTITY_INVALID,
                f"property {name!r} must be a scalar or a list of scalars (flatten objects: spec.replicas)",
                field=where,
            )
    if entity.parent_id:
        check_entity_id(entity.parent_id, f"{at}.parent_id")
    for r, relation in enumerate(entity.relations):
        if not RELATION_RE.fullmatch(relation.type):
            raise invalid_argument(
                Reason.ENTITY_INVALID,
                f"relation type {relation.type[:80]!r} must be 1-64 of A-Z, 0-9 or '_', starting with a letter",
                field=f"{at}.relations[{r}].type",
            )
        check_entity_id(relation.target_id, f"{at}.relations[{r}].target_id")


def _in_range(value: int, *, default: int, maximum: int, field: str, reason: Reason) -> int:
    """`value` (0: `default`) when it is 1..maximum, else `reason` (DEPTH_ or LIMIT_OUT_OF_RANGE) naming `field`."""
    chosen = value or default
    if not 1 <= chosen <= maximum:
        raise invalid_argument(reason, f"{field} must be 1..{maximum}, not {value}", field=field, maximum=maximum)
    return chosen


def _depth(value: int, *, default: int, maximum: int, field: str) -> int:
    return _in_range(value, default=default, maximum=maximum, field=field, reason=Reason.DEPTH_OUT_OF_RANGE)


def _limit(value: int, *, default: int, maximum: int, field: str) -> int:
    return _in_range(value, default=default, maximum=maximum, field=field, reason=Reason.LIMIT_OUT_OF_RANGE)


def explore_ontology(info: GraphInfo, entity_type: str, depth: int) -> OntologyNeighbourhood:
    """The type's relation types within `depth` hops (either direction), nearest first."""
    found = _type(info, entity_type, "entity_type")
    distance = _distances(info, entity_type, depth)
    relations = []
    for r in info.relations:
        near = min(distance.get(r.from_type, depth), distance.get(r.to_type, depth))
        if near < depth:
            relations.append(TypeRelation(r.from_type, r.type, r.to_type, r.count, near + 1))
    relations.sort(key=lambda r: (r.depth, r.from_type, r.type, r.to_type))
    return OntologyNeighbourhood(found, relations)


def _type(info: GraphInfo, name: str, field: str) -> EntityType:
    for t in info.entity_types:
        if t.name == name:
            return t
    raise not_found(
        Reason.ENTITY_TYPE_NOT_FOUND,
        f"collection {info.collection!r} has no entities of type {name!r}",
        entity_type=name,
        field=field,
    )


def _distances(info: GraphInfo, start: str, limit: int) -> dict[str, int]:
    """Hops from `start` to each type within `limit`, relations followed either way."""
    distance = {start: 0}
    frontier = [start]
    for hop in range(1, limit + 1):
        nxt = []
        for t in frontier:
            for r in info.relations:
                for a, b in ((r.from_type, r.to_type), (r.to_type, r.from_type)):
                    if a == t and b not in distance:
                        distance[b] = hop
                        nxt.append(b)
        frontier = nxt
    return distance


def shortest_paths(info: GraphInfo, from_type: str, to_type: str, max_depth: int) -> list[TypePath]:
    """Every path of relation types of the shortest length (relations followed either way) from one type to
    another within `max_depth` hops, at most MAX_PATHS, sorted by their Cypher text. A type to itself is the
    path of no hops."""
    _type(info, from_type, "from_type")
    _type(info, to_type, "to_type")
    if from_type == to_type:
        return [TypePath([], from_type)]
    distance = _distances(info, from_type, max_depth)
    if to_type not in distance:
        return []
    # Walk back from the target along hops that each come one step nearer the start.
    paths: list[TypePath] = []

    def back(node: str, tail: list[tuple[TypeRelation, bool]]) -> None:
        if len(paths) >= MAX_PATHS:
            return
        if node == from_type:
            paths.append(TypePath(list(reversed(tail)), from_type))
            return
        for r in info.relations:
            for prev, forwards in ((r.from_type, True), (r.to_type, False)):
                cur = r.to_type if forwards else r.from_type
                if cur == node and distance.get(prev) == distance[node] - 1:
                    back(prev, [*tail, (r, forwards)])

    back(to_type, [])
    return sorted(paths, key=lambda p: p.cypher)


class Graphs:
    """What the servicer calls: checked requests in, plain records out."""

    def __init__(
        self,
        store: GraphStore,
        metrics: GraphMetrics,
        *,
        query_timeout_seconds: float,
        row_limit: int,
        max_row_limit: int,
        threads: int = 4,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.query_timeout_seconds = query_timeout_seconds
        self.row_limit = row_limit
        self.max_row_limit = max_row_limit
        self._pool = named_pool(threads, "graph")

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking store call on a worker thread, in the caller's context (its span)."""
        call = functools.partial(contextvars.copy_context().run, functools.partial(fn, *args, **kwargs))
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.store.close()

    # --- writes -------------------------------------------------------------------------------------------
    async def upsert(self, collection: str, entities: Sequence[Entity]) -> UpsertResult:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection, Attr.BATCH_SIZE: len(entities)})
        if len(entities) > MAX_ENTITIES:
            raise invalid_argument(
                Reason.ENTITY_INVALID, f"at most {MAX_ENTITIES} entities per batch", field="entities"
            )
        for index, entity in enumerate(entities):
            check_entity(entity, index)
        if not entities:
            return UpsertResult(0, 0, [])
        result = await self._run(self.store.upsert, collection, entities)
        self.metrics.entities_written.inc(result.entities)
        self.metrics.relations_written.inc(result.relations)
        self.metrics.dangling_relations.inc(len(result.dangling))
        annotate({Attr.RESULT_COUNT: result.entities})
        return result

    async def delete(self, collection: str, ids: Sequence[str]) -> list[str]:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection, Attr.BATCH_SIZE: len(ids)})
        for index, entity_id in enumerate(ids):
            check_entity_id(entity_id, f"ids[{index}]")
        if collection not in await self._run(self.store.collections):
            return []
        deleted = await self._run(self.store.delete, collection, ids)
        self.metrics.entities_deleted.inc(len(deleted))
        return deleted

    async def drop(self, collection: str) -> bool:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection})
        return await self._run(self.store.drop, collection)

    # --- reads --------------------------------------------------------------------------------------------
    async def list_graphs(self, collection: str) -> list[GraphInfo]:
        if collection:
            collection = validation.collection_name(collection)
            annotate({Attr.COLLECTION: collection})
            return [await self._run(self.store.info, collection)]
        graphs = []
        for name in await self._run(self.store.collections):
            try:
                graphs.append(await self._run(self.store.info, name))
            except RagmeshError as exc:  # deleted since it was listed
                if exc.reason != Reason.GRAPH_NOT_FOUND:
                    raise
        return graphs

    async def explore_ontology(self, collection: str, entity_type: str, depth: int) -> OntologyNeighbourhood:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection})
        depth = _depth(depth, default=1, maximum=MAX_EXPLORE_DEPTH, field="depth")
        with self._timed("ontology"):
            info = await self._run(self.store.info, collection)
            return explore_ontology(info, entity_type, depth)

    async def get(self, collection: str, entity_id: str) -> Entity:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection})
        check_entity_id(entity_id, "entity_id")
        with self._timed("get"):
            entity = await self._run(self.store.get, collection, entity_id)
        if entity is None:
            raise not_found(
                Reason.ENTITY_NOT_FOUND,
                f"collection {collection!r} has no entity {entity_id!r}",
                entity_id=entity_id,
                collection=collection,
            )
        return entity

    async def explore(self, collection: str, entity_id: str, depth: int, limit: int) -> Neighbourhood:
        """The entity and the entities within `depth` hops, breadth first (nearest first; within a depth by
        relation type and id), each reached once, by the first hop that reached it."""
        depth = _depth(depth, default=1, maximum=MAX_EXPLORE_DEPTH, field="depth")
        limit = _limit(limit, default=DEFAULT_NEIGHBOURS, maximum=MAX_NEIGHBOURS, field="limit")
        entity = await self.get(collection, entity_id)
        collection = validation.collection_name(collection)
        with self._timed("entity"):
            seen = {entity.id}
            neighbours: list[Neighbour] = []
            frontier = [entity.id]
            for level in range(1, depth + 1):
                hops = await self._run(self.store.hops, collection, frontier)
                hops.sort(key=lambda h: (h.relation, h.direction, h.to_id, h.from_id))
                frontier = []
                for hop in hops:
                    if hop.to_id in seen:
                        continue
                    seen.add(hop.to_id)
                    frontier.append(hop.to_id)
                    neighbours.append(
                        Neighbour(hop.to_id, hop.to_type, hop.relation, hop.direction, level, hop.from_id)
                    )
                if not frontier or len(neighbours) > limit:
                    break
        annotate({Attr.RESULT_COUNT: min(len(neighbours), limit)})
        return Neighbourhood(entity, neighbours[:limit], len(neighbours) > limit)

    async def shortest_paths(self, collection: str, from_type: str, to_type: str, max_depth: int) -> list[TypePath]:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection})
        max_depth = _depth(max_depth, default=DEFAULT_PATH_DEPTH, maximum=MAX_PATH_DEPTH, field="max_depth")
        with self._timed("paths"):
            info = await self._run(self.store.info, collection)
            return shortest_paths(info, from_type, to_type, max_depth)

    async def query(
        self, collection: str, statement: str, target: Target, parameters: Mapping[str, Any], row_limit: int
    ) -> Rows:
        collection = validation.collection_name(collection)
        annotate({Attr.COLLECTION: collection})
        if not statement.strip():
            raise invalid_argument(Reason.QUERY_EMPTY, "the query is empty", field="query")
        if len(statement) > MAX_QUERY_CHARS:
            raise invalid_argument(
                Reason.QUERY_TOO_LONG, f"the query is longer than {MAX_QUERY_CHARS} characters", field="query"
            )
        limit = _limit(row_limit, default=self.row_limit, maximum=self.max_row_limit, field="row_limit")
        started = time.perf_counter()
        try:
            rows = await self._run(
                self.store.query,
                collection,
                statement,
                target=target,
                parameters={k: _parameter(v) for k, v in parameters.items()},
                row_limit=limit,
                timeout_seconds=self.query_timeout_seconds,
            )
        except Exception as exc:
            reason = getattr(exc, "reason", None)
            if reason in (Reason.QUERY_NOT_READ_ONLY, Reason.QUERY_INVALID, Reason.QUERY_TIMEOUT):
                self.metrics.queries_refused.labels(str(reason)).inc()
            raise
        self.metrics.query_seconds.labels(str(target)).observe(time.perf_counter() - started)
        annotate({Attr.RESULT_COUNT: len(rows.rows)})
        return rows

    def _timed(self, operation: str) -> Any:
        """A context that observes its time in ragmesh_graph_explore_seconds{operation}."""
        return self.metrics.explore_seconds.labels(operation).time()


def _parameter(value: Any) -> Any:
    """A query parameter from JSON: whole numbers as integers (a Struct carries every number as a double)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_parameter(v) for v in value]
    if isinstance(value, dict):
        return {k: _parameter(v) for k, v in value.items()}
    return value
