"""The graph store's contract: what the graph service needs of a graph database, in plain Python records.

`LadybugGraphStore` (ladybugdb.py) implements it over embedded LadybugDB databases, one per collection, that
this process alone opens: one writer, one process owns the database files, so a graph pod holds the graphs of
its data directory and scales by being one (the same rule as the embedded vector store). A Neo4j adapter would
implement the same Protocol over Bolt, with the same Cypher subset (MERGE/SET/DETACH DELETE, labels per entity
type, one relation type per relation) and a read-only session for raw queries.

Every method blocks; the service calls them from worker threads. Errors are `RagmeshError`s with a `Reason`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

Scalar = str | int | float | bool
# A property's value: a scalar, or a list of scalars (kept as a list of strings).
Value = Scalar | list[Scalar]

# Columns every entity table has besides its properties; properties may not start with "_" nor be "id".
ID = "id"
LABELS = "_labels"
ALTERNATIVE_KEYS = "_alternative_keys"
PARENT_ID = "_parent_id"
INTERNAL_COLUMNS = (ID, LABELS, ALTERNATIVE_KEYS, PARENT_ID)
# Each relation table's one property: a child's index in its parent's list (HAS), else NULL.
INDEX = "index"


def text(value: Scalar) -> str:
    """A scalar as text, as ids and string columns keep it: true/false, 3 (not 3.0), or the string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Direction(StrEnum):
    OUTGOING = "outgoing"
    INCOMING = "incoming"


class Target(StrEnum):
    """Which graph of a collection a raw query reads."""

    DATA = "data"
    ONTOLOGY = "ontology"


@dataclass(frozen=True)
class Relation:
    """One relation of an entity: written ones are outgoing; read ones point either way."""

    type: str
    target_id: str
    target_type: str = ""
    direction: Direction = Direction.OUTGOING
    index: int | None = None


@dataclass(frozen=True)
class Entity:
    """One entity: its id is "<type>/<primary key values joined by '/'>"."""

    id: str
    type: str
    # The primary key properties in order (name, value); they are properties of the entity too.
    primary_key: Sequence[tuple[str, Value]] = ()
    properties: Mapping[str, Value] = field(default_factory=dict)
    labels: Sequence[str] = ()
    alternative_keys: Sequence[str] = ()
    relations: Sequence[Relation] = ()
    parent_id: str = ""


@dataclass(frozen=True)
class UpsertResult:
    entities: int
    relations: int
    # "<from> -[TYPE]-> <to>" for each relation whose target is in neither the batch nor the graph.
    dangling: list[str]


@dataclass(frozen=True)
class EntityType:
    name: str
    count: int
    properties: list[str]
    primary_key: list[str]


@dataclass(frozen=True)
class TypeRelation:
    """Relations of one type from entities of one type to entities of another, and how many there are."""

    from_type: str
    type: str
    to_type: str
    count: int
    depth: int = 0  # hops from an explored type (ExploreOntology)


@dataclass(frozen=True)
class GraphInfo:
    collection: str
    entity_types: list[EntityType]
    relations: list[TypeRelation]

    @property
    def entities(self) -> int:
        return sum(t.count for t in self.entity_types)


@dataclass(frozen=True)
class Hop:
    """One relation between two entities, seen from `from_id`."""

    from_id: str
    relation: str
    direction: Direction
    to_id: str
    to_type: str


@dataclass(frozen=True)
class Rows:
    """A raw query's answer: column names, rows of JSON-able values, and whether rows were left out."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool


class GraphStore(Protocol):
    """The graphs of a data directory, one per collection (see the module docstring)."""

    def upsert(self, collection: str, entities: Sequence[Entity]) -> UpsertResult:
        """Write the entities, each replacing the one with its id, and their outgoing relations, in one
        transaction; create the graph on first use. Raises ENTITY_INVALID (with the field) for a property
        value that does not fit its column."""
        ...

    def delete(self, collection: str, ids: Sequence[str]) -> list[str]:
        """Delete the entities that exist, their children (recursively) and every relation touching them; the
        ids deleted."""
        ...

    def drop(self, collection: str) -> bool:
        """Delete the collection's graph and ontology; False when there was none."""
        ...

    def collections(self) -> list[str]:
        """The collections that have a graph, sorted."""
        ...

    def info(self, collection: str) -> GraphInfo:
        """The collection's ontology: entity types with counts, relation types between them. GRAPH_NOT_FOUND."""
        ...

    def get(self, collection: str, entity_id: str) -> Entity | None:
        """The entity with every property and every relation (both directions); None when there is none.
        GRAPH_NOT_FOUND."""
        ...

    def hops(self, collection: str, ids: Sequence[str]) -> list[Hop]:
        """Every relation from or to one of `ids`, seen from it. GRAPH_NOT_FOUND."""
        ...

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
        """Run one read-only Cypher statement. QUERY_NOT_READ_ONLY, QUERY_INVALID, QUERY_TIMEOUT, GRAPH_NOT_FOUND."""
        ...

    def close(self) -> None: ...
