"""`LadybugGraphStore`: the graphs of a data directory in embedded LadybugDB (a Kùzu fork: Cypher over typed node
and relation tables).

Each collection has two databases under <data_dir>/graph/<collection>/: `data`, with one node table per entity
type (columns `id` (the primary key), `_labels`, `_alternative_keys`, `_parent_id`, then one per property, added
with ALTER TABLE when first seen, typed by its first value) and one relation table per relation type (property
`index`, a FROM/TO pair added per pair of types); and `ontology`, with (:EntityType {name, count, properties,
primary_key})-[:RELATION {type, count}]->(:EntityType), rebuilt after each write, so that a raw ontology query
reads that database alone.

This process alone opens the databases for writing (one writer per collection, under a lock); reads open
connections of their own, and raw queries run on a read-only copy reopened after each write (`readonly`).
Where it stops: one pod owns a data directory; the graphs are as durable as the engine's WAL.
"""

from __future__ import annotations

import datetime as dt
import decimal
import shutil
import threading
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import ladybug
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason

from . import readonly
from .base import (
    ALTERNATIVE_KEYS,
    ID,
    INDEX,
    INTERNAL_COLUMNS,
    LABELS,
    PARENT_ID,
    Direction,
    Entity,
    EntityType,
    GraphInfo,
    Hop,
    Relation,
    Rows,
    Target,
    TypeRelation,
    UpsertResult,
    Value,
    text,
)

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# The ontology's schema (its own database).
_ONTOLOGY_SCHEMA = (
    "CREATE NODE TABLE IF NOT EXISTS EntityType("
    "name STRING PRIMARY KEY, count INT64, properties STRING[], primary_key STRING[])",
    "CREATE REL TABLE IF NOT EXISTS RELATION(FROM EntityType TO EntityType, type STRING, count INT64)",
)


def quoted(name: str) -> str:
    """A table or property name as a Cypher identifier (backquoted: dots allowed)."""
    return "`" + name.replace("`", "``") + "`"


def column_type(value: Value) -> str:
    """The column type a property's first value gives its column."""
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        return "INT64"
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, list):
        return "STRING[]"
    return "STRING"


def fit(value: Value, kind: str) -> Value | None:
    """`value` as a column of type `kind` holds it, when that loses nothing (int -> DOUBLE, a whole float ->
    INT64, any scalar -> STRING); None when it does not fit."""
    if kind == "STRING[]":
        return [text(v) for v in value] if isinstance(value, list) else None
    if isinstance(value, list):
        return None
    if kind == "STRING":
        return text(value)
    if kind == "BOOLEAN":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool) or isinstance(value, str):
        return None
    if kind == "DOUBLE":
        return float(value)
    if kind == "INT64":
        if isinstance(value, float):
            if not value.is_integer():
                return None
            value = int(value)
        return value if INT64_MIN <= value <= INT64_MAX else None
    return None


def plain(value: Any) -> Any:
    """A value of a query's row as JSON: nodes and relations as objects of their label and properties (the
    engine's internal offsets dropped), dates and other scalars as strings."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in ("_ID", "_SRC", "_DST") or (isinstance(item, dict) and set(item) == {"offset", "table"}):
                continue
            if key == "_LABEL":
                out["_label"] = item
            elif key in ("_NODES", "_RELS"):
                out[key.lower()] = plain(item)
            elif item is not None:
                out[key] = plain(item)
        return out
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | dt.timedelta):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@dataclass
class _Schema:
    """The data database's tables as this process knows them (read at open, changed by upserts after commit)."""

    # entity type -> property name (lower-cased: the engine's names are case-insensitive) -> (name, type)
    columns: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    # relation type -> the (from type, to type) pairs its table connects
    pairs: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    # entity type -> its primary key properties, in order
    primary_keys: dict[str, list[str]] = field(default_factory=dict)

    def type_named(self, name: str) -> str | None:
        """The existing entity type spelled `name` in any case."""
        return next((t for t in self.columns if t.lower() == name.lower()), None)

    def properties(self, entity_type: str) -> list[str]:
        return sorted(n for n, _ in self.columns.get(entity_type, {}).values() if n not in INTERNAL_COLUMNS)


class _Graph:
    """One collection's databases, its writer connection and lock, and the read-only copies for raw queries."""

    def __init__(self, root: Path, options: Mapping[str, Any]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.options = dict(options)
        self.data = ladybug.Database(str(root / "data"), **self.options)
        self.ontology = ladybug.Database(str(root / "ontology"), **self.options)
        self.writer = ladybug.Connection(self.data)
        self.ontology_writer = ladybug.Connection(self.ontology)
        self.lock = threading.Lock()
        # Reads in flight, so that closing (DeleteGraph, shutdown) waits for them instead of pulling the database
        # from under them.
        self.readers = 0
        self.closed = False
        self.idle = threading.Condition()
        self.generation = 0
        self.readonly: dict[Target, tuple[int, ladybug.Database]] = {}
        for statement in _ONTOLOGY_SCHEMA:
            self.ontology_writer.execute(statement)
        self.schema = self._read_schema()
        self.info = GraphInfo("", [], [])

    def _read_schema(self) -> _Schema:
        schema = _Schema()
        for name, kind in _rows(self.writer, "CALL show_tables() RETURN name, type"):
            if kind == "NODE":
                info = _rows(self.writer, f"CALL table_info({_literal(name)}) RETURN name, type")
                schema.columns[name] = {n.lower(): (n, t) for n, t in info}
            elif kind == "REL":
                pairs = _rows(self.writer, f"CALL show_connection({_literal(name)}) RETURN *")
                schema.pairs[name] = {(row[0], row[1]) for row in pairs}
        for name, primary_key in _rows(self.ontology_writer, "MATCH (t:EntityType) RETURN t.name, t.primary_key"):
            schema.primary_keys[name] = list(primary_key or [])
        return schema

    def readonly_database(self, target: Target) -> ladybug.Database:
        """A read-only copy of the data or ontology database as of the latest write (reopened after each)."""
        with self.lock:
            if self.closed:
                raise _no_graph(self.root.name)
            opened = self.readonly.get(target)
            if opened is None or opened[0] != self.generation:
                path = self.root / ("data" if target is Target.DATA else "ontology")
                # The copy being replaced closes when the last query using it lets go of it.
                opened = (self.generation, ladybug.Database(str(path), read_only=True, **self.options))
                self.readonly[target] = opened
            return opened[1]

    @contextmanager
    def reading(self, database: ladybug.Database | None = None) -> Iterator[ladybug.Connection]:
        """A connection of its own to the data database (or `database`) for one read."""
        with self.idle:
            if self.closed:
                raise _no_graph(self.root.name)
            self.readers += 1
        conn = ladybug.Connection(database or self.data)
        try:
            yield conn
        finally:
            conn.close()
            with self.idle:
                self.readers -= 1
                self.idle.notify_all()

    def close(self) -> None:
        with self.idle:
            self.closed = True
            self.idle.wait_for(lambda: self.readers == 0)
        self.readonly.clear()
        for closable in (self.writer, self.ontology_writer, self.data, self.ontology):
            closable.close()


def _counted(
    graph: _Graph, added: Mapping[str, int], relations_delta: Mapping[tuple[str, str, str], int]
) -> tuple[list[EntityType], list[TypeRelation]]:
    """The ontology's types and relation triples after a write: the counts it had, changed by the write's deltas
    (entities added per type; relations per (from type, relation, to type), replaced ones negative)."""
    schema = graph.schema
    counts = Counter({t.name: t.count for t in graph.info.entity_types})
    counts.update(added)
    types = [
        EntityType(name, counts[name], schema.properties(name), schema.primary_keys.get(name, []))
        for name in sorted(schema.columns)
        if counts[name] > 0
    ]
    triples: Counter[tuple[str, str, str]] = Counter()
    for r in graph.info.relations:
        triples[(r.from_type, r.type, r.to_type)] = r.count
    triples.update(relations_delta)
    relations = [
        TypeRelation(source, relation_type, target, count)
        for (source, relation_type, target), count in sorted(triples.items(), key=lambda i: (i[0][1], i[0][0], i[0][2]))
        if count > 0
    ]
    return types, relations


def _by(items: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """`items` grouped by `key`, in the order keys are first seen."""
    groups: dict[K, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _rows(conn: ladybug.Connection, statement: str, parameters: Mapping[str, Any] | None = None) -> list[list[Any]]:
    result = conn.execute(statement, dict(parameters or {}))
    if isinstance(result, list):  # never: the store's statements are single ones
        raise AssertionError("one statement expected")
    try:
        return [list(row) for row in result.get_all()]
    finally:
        result.close()


@contextmanager
def _transaction(conn: ladybug.Connection) -> Iterator[None]:
    conn.execute("BEGIN TRANSACTION")
    try:
        yield
    except BaseException as exc:
        # A failed statement has already rolled the transaction back in the engine.
        try:
            conn.execute("ROLLBACK")
        except RuntimeError:
            pass
        if isinstance(exc, RuntimeError) and BUFFER_POOL_FULL in str(exc):
            raise RagmeshError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.GRAPH_BUFFER_POOL_FULL,
                "the graph's page cache cannot hold this batch (each relation table and each pair of entity types "
                "it joins takes room while the batch is written); nothing was written: send fewer entities at once "
                "or raise RAGMESH_GRAPH_BUFFER_POOL_MB",
            ) from None
        raise
    conn.execute("COMMIT")


@dataclass
class _Plan:
    """An upsert worked out before its transaction: the tables and columns to add, each entity's row."""

    new_types: list[str] = field(default_factory=list)
    new_columns: list[tuple[str, str, str]] = field(default_factory=list)  # (type, name, column type)
    new_relation_types: list[tuple[str, str, str]] = field(default_factory=list)  # (type, from, to)
    new_pairs: list[tuple[str, str, str]] = field(default_factory=list)
    columns: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    rows: list[tuple[Entity, dict[str, Any]]] = field(default_factory=list)
    relations: list[tuple[Entity, Relation]] = field(default_factory=list)
    dangling: list[str] = field(default_factory=list)


class LadybugGraphStore:
    """The `GraphStore` of a data directory's graphs (<graphs_dir>/<collection>/data and .../ontology)."""

    def __init__(self, graphs_dir: Path, *, buffer_pool_mb: int = 512, max_db_size_gb: int = 64) -> None:
        self.graphs_dir = graphs_dir
        self.options = {"buffer_pool_size": buffer_pool_mb << 20, "max_db_size": max_db_size_gb << 30}
        self._graphs: dict[str, _Graph] = {}
        self._lock = threading.Lock()

    # --- opening ------------------------------------------------------------------------------------------
    def _graph(self, collection: str, *, create: bool = False) -> _Graph:
        with self._lock:
            graph = self._graphs.get(collection)
            if graph is None:
                root = self.graphs_dir / collection
                if not create and not (root / "data").exists():
                    raise _no_graph(collection)
                graph = _Graph(root, self.options)
                # Counted again rather than read: a process stopped between a write and its ontology's rewrite
                # left the ontology behind the data.
                graph.info = self._refresh_ontology(collection, graph)
                self._graphs[collection] = graph
            return graph

    def collections(self) -> list[str]:
        if not self.graphs_dir.is_dir():
            return []
        return sorted(p.name for p in self.graphs_dir.iterdir() if (p / "data").exists())

    def close(self) -> None:
        with self._lock:
            for graph in self._graphs.values():
                with graph.lock:
                    graph.close()
            self._graphs.clear()

    # --- writing ------------------------------------------------------------------------------------------
    def upsert(self, collection: str, entities: Sequence[Entity]) -> UpsertResult:
        graph = self._graph(collection, create=True)
        with graph.lock:
            if graph.closed:  # dropped meanwhile: write into a new graph
                return self.upsert(collection, entities)
            plan = self._plan(graph, entities)
            conn = graph.writer
            with self._reopened_when_full(collection, graph), _transaction(conn):
                for entity_type in plan.new_types:
                    conn.execute(
                        f"CREATE NODE TABLE {quoted(entity_type)}({ID} STRING PRIMARY KEY, {LABELS} STRING[], "
                        f"{ALTERNATIVE_KEYS} STRING[], {PARENT_ID} STRING)"
                    )
                for entity_type, name, kind in plan.new_columns:
                    conn.execute(f"ALTER TABLE {quoted(entity_type)} ADD {quoted(name)} {kind}")
                for relation_type, source, target in plan.new_relation_types:
                    conn.execute(
                        f"CREATE REL TABLE {quoted(relation_type)}(FROM {quoted(source)} TO {quoted(target)}, "
                        f"{quoted(INDEX)} INT64)"
                    )
                for relation_type, source, target in plan.new_pairs:
                    conn.execute(f"ALTER TABLE {quoted(relation_type)} ADD FROM {quoted(source)} TO {quoted(target)}")
                # One statement per entity type and per (relation, from type, to type), over all their rows. Each
                # value is CAST to its column's type: the engine types a parameter by its values, and a column
                # that is NULL in every row would otherwise be taken for a STRING.
                # The ontology's counts change by what the batch adds and replaces, counted here on the batch's
                # own ids (index lookups), so a batch costs the same in a graph of any size.
                added: Counter[str] = Counter()
                relations_delta: Counter[tuple[str, str, str]] = Counter()
                for entity_type, rows_of_type in _by(plan.rows, lambda r: r[0].type).items():
                    table = quoted(entity_type)
                    ids = [entity.id for entity, _ in rows_of_type]
                    added[entity_type] += len(ids)
                    if entity_type not in plan.new_types:
                        found = f"UNWIND $ids AS i MATCH (n:{table} {{{ID}: i}}) RETURN count(n)"
                        added[entity_type] -= _rows(conn, found, {"ids": ids})[0][0]
                    if self._has_relations(graph, plan):
                        outgoing = f"UNWIND $ids AS i MATCH (a:{table} {{{ID}: i}})-[r]->(b)"
                        replaced = _rows(conn, f"{outgoing} RETURN label(r), label(b), count(r)", {"ids": ids})
                        for relation_type, target, count in replaced:
                            relations_delta[(entity_type, relation_type, target)] -= count
                        conn.execute(f"UNWIND $ids AS i MATCH (a:{table} {{{ID}: i}})-[r]->() DELETE r", {"ids": ids})
                    kinds = {name: kind for name, kind in plan.columns[entity_type].values() if name != ID}
                    names = list(kinds)
                    sets = ", ".join(f"n.{quoted(n)} = CAST(row.p{i} AS {kinds[n]})" for i, n in enumerate(names))
                    rows = [{ID: e.id, **{f"p{i}": row.get(n) for i, n in enumerate(names)}} for e, row in rows_of_type]
                    conn.execute(f"UNWIND $rows AS row MERGE (n:{table} {{{ID}: row.{ID}}}) SET {sets}", {"rows": rows})
                for (relation_type, source, target), relations in _by(
                    plan.relations, lambda r: (r[1].type, r[0].type, r[1].target_type)
                ).items():
                    a, b = quoted(source), quoted(target)
                    relations_delta[(source, relation_type, target)] += len(relations)
                    conn.execute(
                        f"UNWIND $rels AS r MATCH (a:{a} {{{ID}: r.a}}), (b:{b} {{{ID}: r.b}}) "
                        f"CREATE (a)-[:{quoted(relation_type)} {{{quoted(INDEX)}: CAST(r.i AS INT64)}}]->(b)",
                        {"rels": [{"a": e.id, "b": r.target_id, "i": r.index} for e, r in relations]},
                    )
            self._commit_schema(graph, plan, entities)
            graph.generation += 1
            graph.info = self._write_ontology(collection, graph, *_counted(graph, added, relations_delta))
        return UpsertResult(len(plan.rows), len(plan.relations), plan.dangling)

    @contextmanager
    def _reopened_when_full(self, collection: str, graph: _Graph) -> Iterator[None]:
        """After a transaction ran out of page cache the engine refuses every later write on that database (its
        rollback leaves pages it cannot free): close it, so that the next call opens it again, as it was before
        the transaction. The caller holds `graph.lock`."""
        try:
            yield
        except RagmeshError as exc:
            if exc.reason == Reason.GRAPH_BUFFER_POOL_FULL:
                with self._lock:
                    if self._graphs.get(collection) is graph:
                        del self._graphs[collection]
                graph.close()
            raise

    @staticmethod
    def _has_relations(graph: _Graph, plan: _Plan) -> bool:
        return bool(graph.schema.pairs or plan.new_relation_types)

    def _plan(self, graph: _Graph, entities: Sequence[Entity]) -> _Plan:
        """Check every value against its column (or the column its first value makes), and find each relation's
        target, before anything is written. ENTITY_INVALID names the field."""
        schema = graph.schema
        plan = _Plan()
        latest = {e.id: e for e in entities}  # a batch naming an id twice keeps the last
        batch = {e.id: e.type for e in latest.values()}
        for index, entity in enumerate(entities):
            if latest[entity.id] is not entity:
                continue
            known = schema.type_named(entity.type)
            other = known or next((t for t in plan.new_types if t.lower() == entity.type.lower()), None)
            if other is not None and other != entity.type:
                raise invalid_argument(
                    Reason.ENTITY_INVALID,
                    f"entity type {entity.type!r} differs from the graph's {other!r} only in case",
                    field=f"entities[{index}].type",
                )
            if entity.type.lower() in {r.lower() for r in schema.pairs}:
                raise invalid_argument(
                    Reason.ENTITY_INVALID,
                    f"{entity.type!r} is a relation type of the graph; an entity type needs another name",
                    field=f"entities[{index}].type",
                )
            columns = plan.columns.get(entity.type)
            if columns is None:
                if known is None and entity.type not in plan.new_types:
                    plan.new_types.append(entity.type)
                columns = plan.columns[entity.type] = dict(schema.columns.get(entity.type, {}))
                for name, kind in (
                    (ID, "STRING"),
                    (LABELS, "STRING[]"),
                    (ALTERNATIVE_KEYS, "STRING[]"),
                    (PARENT_ID, "STRING"),
                ):
                    columns.setdefault(name, (name, kind))
            given: dict[str, Value] = {**dict(entity.primary_key), **entity.properties}
            row: dict[str, Any] = {}
            for name, value in given.items():
                where = f"entities[{index}].properties[{name}]"
                column = columns.get(name.lower())
                if column is None:
                    column = columns[name.lower()] = (name, column_type(value))
                    plan.new_columns.append((entity.type, name, column[1]))
                elif column[0] != name:
                    raise invalid_argument(
                        Reason.ENTITY_INVALID,
                        f"property {name!r} differs from the type's {column[0]!r} only in case",
                        field=where,
                    )
                fitted = fit(value, column[1])
                if fitted is None:
                    raise invalid_argument(
                        Reason.ENTITY_INVALID,
                        f"property {name!r} of {entity.id!r} is {value!r}, which a {column[1]} column cannot hold",
                        field=where,
                    )
                row[name] = fitted
            # Every column is set: the ones not given to NULL, so that the entity is replaced, not merged.
            full: dict[str, Any] = {n: None for n, _ in columns.values() if n != ID}
            full.update(row)
            full[LABELS] = list(entity.labels)
            full[ALTERNATIVE_KEYS] = list(entity.alternative_keys)
            full[PARENT_ID] = entity.parent_id or None
            plan.rows.append((entity, full))
        # Each relation's target: in the batch, or already in the graph.
        outside = {r.target_id for e, _ in plan.rows for r in e.relations if r.target_id not in batch}
        existing = self._existing(graph, outside)
        pairs = {t: set(p) for t, p in schema.pairs.items()}
        entity_types = {t.lower() for t in (*schema.columns, *plan.columns)}
        for entity, _ in plan.rows:
            for r, relation in enumerate(entity.relations):
                if relation.type.lower() in entity_types:
                    raise invalid_argument(
                        Reason.ENTITY_INVALID,
                        f"{relation.type!r} is an entity type of the graph; a relation type needs another name",
                        field=f"entities[{list(entities).index(entity)}].relations[{r}].type",
                    )
                target_type = batch.get(relation.target_id) or existing.get(relation.target_id)
                if target_type is None:
                    plan.dangling.append(f"{entity.id} -[{relation.type}]-> {relation.target_id}")
                    continue
                pair = (entity.type, target_type)
                if relation.type not in pairs:
                    pairs[relation.type] = {pair}
                    plan.new_relation_types.append((relation.type, *pair))
                elif pair not in pairs[relation.type]:
                    pairs[relation.type].add(pair)
                    plan.new_pairs.append((relation.type, *pair))
                resolved = Relation(relation.type, relation.target_id, target_type, index=relation.index)
                plan.relations.append((entity, resolved))
        return plan

    @staticmethod
    def _existing(graph: _Graph, ids: set[str]) -> dict[str, str]:
        """The type of each of `ids` the graph holds."""
        found: dict[str, str] = {}
        for entity_type, of_type in _by(sorted(ids), lambda i: i.split("/", 1)[0]).items():
            if entity_type in graph.schema.columns:
                statement = f"MATCH (n:{quoted(entity_type)}) WHERE n.{ID} IN $ids RETURN n.{ID}"
                found.update((row[0], entity_type) for row in _rows(graph.writer, statement, {"ids": of_type}))
        return found

    @staticmethod
    def _commit_schema(graph: _Graph, plan: _Plan, entities: Sequence[Entity]) -> None:
        schema = graph.schema
        for entity_type, columns in plan.columns.items():
            schema.columns[entity_type] = columns
        for relation_type, source, target in (*plan.new_relation_types, *plan.new_pairs):
            schema.pairs.setdefault(relation_type, set()).add((source, target))
        for entity in entities:
            if entity.primary_key:
                schema.primary_keys[entity.type] = [name for name, _ in entity.primary_key]

    def delete(self, collection: str, ids: Sequence[str]) -> list[str]:
        graph = self._graph(collection)
        with graph.lock:
            if graph.closed or not graph.schema.columns or not ids:
                return []
            conn = graph.writer
            found = [r[0] for r in _rows(conn, f"MATCH (n) WHERE n.{ID} IN $ids RETURN n.{ID}", {"ids": list(ids)})]
            deleted = list(dict.fromkeys(found))
            frontier = deleted
            while frontier:
                children = _rows(conn, f"MATCH (n) WHERE n.{PARENT_ID} IN $ids RETURN n.{ID}", {"ids": frontier})
                frontier = [c[0] for c in children if c[0] not in deleted]
                deleted.extend(dict.fromkeys(frontier))
            if not deleted:
                return []
            with _transaction(conn):
                conn.execute(f"MATCH (n) WHERE n.{ID} IN $ids DETACH DELETE n", {"ids": deleted})
            graph.generation += 1
            graph.info = self._refresh_ontology(collection, graph)
        return deleted

    def drop(self, collection: str) -> bool:
        with self._lock:
            graph = self._graphs.pop(collection, None)
            if graph is not None:
                with graph.lock:
                    graph.close()
            root = self.graphs_dir / collection
            existed = (root / "data").exists()
            if root.exists():
                shutil.rmtree(root)
            return existed

    # --- the ontology ---------------------------------------------------------------------------------------
    def _refresh_ontology(self, collection: str, graph: _Graph) -> GraphInfo:
        """Count each type's entities and each (type, relation, type)'s relations, and rewrite the ontology."""
        conn = graph.writer
        schema = graph.schema
        types = []
        for name in sorted(schema.columns):
            count = _rows(conn, f"MATCH (n:{quoted(name)}) RETURN count(n)")[0][0]
            if count:
                types.append(EntityType(name, count, schema.properties(name), schema.primary_keys.get(name, [])))
        relations = []
        for relation_type in sorted(schema.pairs):
            for source, target in sorted(schema.pairs[relation_type]):
                count = _rows(
                    conn,
                    f"MATCH (:{quoted(source)})-[r:{quoted(relation_type)}]->(:{quoted(target)}) RETURN count(r)",
                )[0][0]
                if count:
                    relations.append(TypeRelation(source, relation_type, target, count))
        return self._write_ontology(collection, graph, types, relations)

    @staticmethod
    def _write_ontology(
        collection: str, graph: _Graph, types: list[EntityType], relations: list[TypeRelation]
    ) -> GraphInfo:
        """Rewrite the ontology database with these counts (a few rows: one per type and per type triple)."""
        onto = graph.ontology_writer
        with _transaction(onto):
            onto.execute("MATCH (t:EntityType) DETACH DELETE t")
            for t in types:
                onto.execute(
                    "CREATE (:EntityType {name: $name, count: $count, properties: $properties, primary_key: $key})",
                    {"name": t.name, "count": t.count, "properties": t.properties, "key": t.primary_key},
                )
            for r in relations:
                onto.execute(
                    "MATCH (a:EntityType {name: $a}), (b:EntityType {name: $b}) "
                    "CREATE (a)-[:RELATION {type: $type, count: $count}]->(b)",
                    {"a": r.from_type, "b": r.to_type, "type": r.type, "count": r.count},
                )
        return GraphInfo(collection, types, relations)

    def info(self, collection: str) -> GraphInfo:
        return self._graph(collection).info

    # --- reading ------------------------------------------------------------------------------------------
    def get(self, collection: str, entity_id: str) -> Entity | None:
        graph = self._graph(collection)
        entity_type = entity_id.split("/", 1)[0]
        if entity_type not in graph.schema.columns:
            return None
        with graph.reading() as conn:
            found = _rows(conn, f"MATCH (n:{quoted(entity_type)} {{{ID}: $id}}) RETURN n", {"id": entity_id})
            if not found:
                return None
            relations = self._relations(graph, conn, entity_type, entity_id)
        node = found[0][0]
        values = {k: v for k, v in node.items() if not k.startswith("_") and k != ID and v is not None}
        key_names = graph.schema.primary_keys.get(entity_type, [])
        primary_key = [(name, values.pop(name)) for name in key_names if name in values]
        return Entity(
            id=entity_id,
            type=entity_type,
            primary_key=primary_key,
            properties=values,
            labels=list(node.get(LABELS) or []),
            alternative_keys=list(node.get(ALTERNATIVE_KEYS) or []),
            relations=relations,
            parent_id=node.get(PARENT_ID) or "",
        )

    @staticmethod
    def _relations(graph: _Graph, conn: ladybug.Connection, entity_type: str, entity_id: str) -> list[Relation]:
        """The entity's relations, outgoing then incoming, each by type and the other entity's id."""
        relations: list[Relation] = []
        if graph.schema.pairs:
            for direction, arrow in ((Direction.OUTGOING, "-[r]->"), (Direction.INCOMING, "<-[r]-")):
                for relation_type, other, other_type, index in _rows(
                    conn,
                    f"MATCH (n:{quoted(entity_type)} {{{ID}: $id}}){arrow}(m) "
                    f"RETURN label(r), m.{ID}, label(m), r.{quoted(INDEX)} ORDER BY label(r), m.{ID}",
                    {"id": entity_id},
                ):
                    relations.append(Relation(relation_type, other, other_type, direction, index))
        return relations

    def hops(self, collection: str, ids: Sequence[str]) -> list[Hop]:
        graph = self._graph(collection)
        if not graph.schema.pairs or not ids:
            return []
        hops = []
        with graph.reading() as conn:
            for direction, arrow in ((Direction.OUTGOING, "-[r]->"), (Direction.INCOMING, "<-[r]-")):
                for from_id, relation_type, to_id, to_type in _rows(
                    conn,
                    f"MATCH (a){arrow}(b) WHERE a.{ID} IN $ids RETURN a.{ID}, label(r), b.{ID}, label(b)",
                    {"ids": list(ids)},
                ):
                    hops.append(Hop(from_id, relation_type, direction, to_id, to_type))
        return hops

    # --- raw queries --------------------------------------------------------------------------------------
    def query(
        self,
        collection: str,
        statement: str,
        *,
        target: Target,
        parameters: Mapping[str, Any],
        row_limit: int,
        timeout_seconds: float,
    ) -> Rows:
        graph = self._graph(collection)
        keyword = readonly.first_keyword(statement)
        if keyword in readonly.DENIED_FIRST_KEYWORDS:
            raise _not_read_only(f"{keyword} statements touch the server's files")
        with graph.reading(graph.readonly_database(target)) as conn:
            conn.set_query_timeout(max(1, int(timeout_seconds * 1000)))
            params = dict(parameters)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # prepare() alone parses and binds
                prepared = conn.prepare(statement, params)
            if not prepared.is_success():
                raise _engine_error(prepared.get_error_message())
            plan = _text_of(conn, "EXPLAIN " + statement, params)
            why = readonly.refusal(plan)
            if why:
                raise _not_read_only(why)
            try:
                result = conn.execute(statement, params)
            except RuntimeError as exc:
                raise _engine_error(str(exc)) from None
            if isinstance(result, list):  # prepare() refused these already
                raise _not_read_only("one statement at a time")
            try:
                columns = list(result.get_column_names())
                rows: list[list[Any]] = []
                while len(rows) <= row_limit and result.has_next():
                    rows.append([plain(v) for v in result.get_next()])
            except RuntimeError as exc:
                raise _engine_error(str(exc)) from None
            finally:
                result.close()
        return Rows(columns, rows[:row_limit], len(rows) > row_limit)


def _text_of(conn: ladybug.Connection, statement: str, parameters: Mapping[str, Any]) -> str:
    try:
        result = conn.execute(statement, dict(parameters))
    except RuntimeError as exc:
        raise _engine_error(str(exc)) from None
    if isinstance(result, list):
        raise _not_read_only("one statement at a time")
    try:
        return "\n".join(str(v) for row in result.get_all() for v in row)
    finally:
        result.close()


# The engine's words when a transaction needs more pages than its buffer pool has.
BUFFER_POOL_FULL = "buffer pool is full"


def _no_graph(collection: str) -> RagmeshError:
    return not_found(Reason.GRAPH_NOT_FOUND, f"collection {collection!r} has no graph", collection=collection)


def _not_read_only(why: str) -> RagmeshError:
    return RagmeshError(
        grpc.StatusCode.PERMISSION_DENIED,
        Reason.QUERY_NOT_READ_ONLY,
        f"raw graph queries are read-only: {why}",
    )


def _engine_error(message: str) -> RagmeshError:
    """The engine's refusal of a statement as the reason it means."""
    if readonly.READ_ONLY_REFUSAL in message:
        return _not_read_only(message)
    if readonly.MULTIPLE_STATEMENTS in message:
        return _not_read_only("one statement at a time")
    if message.strip() == "Interrupted.":
        return RagmeshError(
            grpc.StatusCode.DEADLINE_EXCEEDED, Reason.QUERY_TIMEOUT, "the query ran past the graph's query timeout"
        )
    return invalid_argument(Reason.QUERY_INVALID, message.strip(), field="query")
