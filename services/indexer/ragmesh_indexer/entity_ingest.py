"""Dual storage of graph entities: each entity is a node of the collection's graph (the graph service) and a
searchable document of the collection (this indexer's own pipeline: doc_id = the entity id, title = the id,
metadata is_graph_entity=true and graph_entity_type=<type>, so searches can filter on them).

An ingest goes in batches (`graph_batch_entities`; an entity and its children are never split): one
UpsertEntities call to the graph, then the batch's documents through the pipeline. When the second write fails,
the first is undone (DeleteEntities on the graph, and the batch's documents deleted) and the call fails: no
entity is left in one store only. A relation to an entity of a later batch is held back and written once every
batch is in (a second UpsertEntities of the entities that have such relations, graph only: they are in both
stores by then), so the graph never calls it dangling. Re-ingesting an entity replaces it in both stores, and
the children it had and has no more (a container renamed or removed) are deleted from both first: a child's
document names its parent (metadata graph_parent_id).

The undo cannot reach a graph service that died mid-call, and such a call may have committed its batch before it
died. So before each graph write the batch's ids are recorded in a small journal (`Journal`, a JSON file under
the indexer's data directory): "delete these from both stores unless the batch completes". A completed batch
clears them; a failed one whose undo could not be done leaves them, and the indexer retries the undo in the
background (and before every entity call) until the graph answers: then they are deleted from both stores. A
delete uses the same journal, so an entity deleted from the graph is deleted from the store even if the indexer
fails in between. One indexer process owns a journal (replicas each keep their own, in their own data directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
from google.protobuf import struct_pb2
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, failed_precondition, invalid_argument
from ragmesh_common.reasons import Reason
from ragmesh_store import METADATA_PREFIX as METADATA
from ragmesh_store import CollectionNotFound
from ragmesh_store.aio import store_call

from .entities import GraphEntity, Value, check_unique, entity_invalid
from .model import DocumentIn
from .service import Indexer

log = logging.getLogger(__name__)

# Codes with which the graph service refused a write it did not do; any other failure (UNAVAILABLE, a deadline,
# a reset connection) may have come after its commit.
_REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
# The metadata key of a child entity's document that names its parent (how a re-ingest finds stale children).
PARENT = "graph_parent_id"
_DANGLING_TYPE = re.compile(r" -\[([A-Z][A-Z0-9_]*)\]-> ")
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 30.0


@dataclass
class IngestReport:
    """What an ingest stored (the IngestEntitiesResponse)."""

    entity_ids: list[str] = field(default_factory=list)
    entity_types: Counter[str] = field(default_factory=Counter)
    relation_types: Counter[str] = field(default_factory=Counter)
    dangling: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)


class Journal:
    """Ids to delete from both stores, by collection, in a JSON file rewritten whole (atomically) on each change."""

    def __init__(self, path: Path, on_change: Callable[[int], object] | None = None) -> None:
        """`on_change` gets the number of ids pending after each change (and now)."""
        self.path = path
        self.on_change = on_change
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raw = {}
        self.pending: dict[str, list[str]] = {c: list(ids) for c, ids in raw.items() if ids}
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(sum(map(len, self.pending.values())))

    def add(self, collection: str, ids: Iterable[str]) -> None:
        self.pending[collection] = list(dict.fromkeys([*self.pending.get(collection, []), *ids]))
        self._save()

    def remove(self, collection: str, ids: Iterable[str]) -> None:
        gone = set(ids)
        left = [i for i in self.pending.get(collection, []) if i not in gone]
        if left:
            self.pending[collection] = left
        else:
            self.pending.pop(collection, None)
        self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w") as f:
            json.dump(self.pending, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._changed()


class EntityIngest:
    """IngestEntities and DeleteEntities: both stores, one collection's entity writes at a time."""

    def __init__(
        self,
        indexer: Indexer,
        graph: ServiceClient,
        journal: Journal,
        *,
        batch_entities: int = 256,
    ) -> None:
        self.indexer = indexer
        self.graph = graph
        self.journal = journal
        self.batch_entities = batch_entities
        self._locks: dict[str, asyncio.Lock] = {}
        self._retry: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Finish the undos a previous run left (in the background: the graph may not be up yet)."""
        if self.journal.pending:
            self._retry_later()

    async def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retry

    # --- the calls ---------------------------------------------------------------------------------------------
    async def ingest(self, collection: str, entities: Sequence[GraphEntity]) -> IngestReport:
        graph = self.graph
        collection = validation.collection_name(collection)
        check_unique(entities)
        report = IngestReport(
            entity_ids=[e.id for e in entities],
            entity_types=Counter(e.type for e in entities),
            relation_types=Counter(link.type for e in entities for link in e.relations),
            omitted=[f"{e.id}#{name}" for e in entities for name in e.omitted],
        )
        async with self._lock(collection), self._retry_on_failure():
            await self._reconcile(collection, quiet=True)
            cut = list(batches(entities, self.batch_entities))
            position = {e.id: b for b, batch in enumerate(cut) for e in batch}
            held: list[GraphEntity] = []  # entities with a relation to a later batch
            dangling: dict[str, None] = {}
            for b, batch in enumerate(cut):
                sent = []
                for entity in batch:
                    now = [link for link in entity.relations if position.get(link.target_id, b) <= b]
                    if len(now) < len(entity.relations):
                        held.append(entity)
                    sent.append(replace(entity, relations=now))
                dangling.update(dict.fromkeys(await self._write(graph, collection, batch, sent)))
            for part in _chunks(held, self.batch_entities):
                reply = await graph.call("UpsertEntities", _upsert(collection, part))
                dangling.update(dict.fromkeys(reply.dangling_relations))
        report.dangling = list(dangling)
        for line in report.dangling:
            match = _DANGLING_TYPE.search(line)
            if match and report.relation_types[match.group(1)] > 0:
                report.relation_types[match.group(1)] -= 1
        report.relation_types = +report.relation_types  # drop the zeros
        return report

    async def delete(self, collection: str, ids: Sequence[str]) -> list[str]:
        """Delete the entities and their children from both stores; returns the ids deleted."""
        graph = self.graph
        collection = validation.collection_name(collection)
        for i, entity_id in enumerate(ids):
            if not validation.DOC_ID_RE.fullmatch(entity_id) or "/" not in entity_id:
                raise entity_invalid(f"{entity_id[:70]!r} is not an entity id ('<type>/<key>')", f"ids[{i}]")
        if not ids:
            return []
        async with self._lock(collection), self._retry_on_failure():
            await self._reconcile(collection, quiet=True)
            self.journal.add(collection, ids)
            try:
                reply = await graph.call(
                    "DeleteEntities", graph_pb.DeleteEntitiesRequest(collection=collection, ids=ids)
                )
            except RagmeshError as exc:
                if exc.code in _REFUSED:  # nothing was deleted
                    self.journal.remove(collection, ids)
                raise  # else it may have been: the store follows once the graph answers
            deleted = list(reply.deleted_ids)
            self.journal.add(collection, deleted)
            gone = await self._delete_documents(collection, [*ids, *deleted])
            self.journal.remove(collection, [*ids, *deleted])
        return list(dict.fromkeys([*deleted, *gone]))

    # --- one batch ---------------------------------------------------------------------------------------------
    async def _write(
        self, graph: ServiceClient, collection: str, batch: list[GraphEntity], sent: list[GraphEntity]
    ) -> list[str]:
        """Write a batch to the graph, then to the store; undo the graph write when the store's fails. Returns
        the graph's dangling relations."""
        ids = [e.id for e in batch]
        stale = await self._stale_children(collection, ids)
        if stale:  # children an entity had and has no more: gone from both stores first
            self.journal.add(collection, stale)
            await self._delete_both(collection, stale)
        self.journal.add(collection, ids)
        try:
            reply = await graph.call("UpsertEntities", _upsert(collection, sent))
        except RagmeshError as exc:
            if exc.code in _REFUSED:  # nothing was written
                self.journal.remove(collection, ids)
            else:
                await self._undo(collection, ids)
            raise  # (cancelled meanwhile: the graph may have written it; the journal's retry undoes it)
        try:
            outcomes = await self.indexer.ingest_batch([_document(collection, e) for e in batch])
        except BaseException:
            await asyncio.shield(self._undo(collection, ids))
            raise
        failed = next((o for o in outcomes if isinstance(o, RagmeshError)), None)
        if failed is not None:
            await self._undo(collection, ids)
            raise failed
        self.journal.remove(collection, ids)
        self.indexer.metrics.graph_entities.inc(len(ids))
        return list(reply.dangling_relations)

    async def _stale_children(self, collection: str, ids: list[str]) -> list[str]:
        """The stored children of these entities that are not among them (a container renamed or removed): the
        store knows them (graph_parent_id), as does the graph, the two holding the same entities."""
        try:
            active = (await self.indexer.targets(collection))[0]
            rows = await store_call(
                self.indexer.store.list_documents, active.physical, {f"{METADATA}{PARENT}": ids}, []
            )
        except CollectionNotFound:
            return []
        except RagmeshError as exc:
            if exc.reason == Reason.COLLECTION_NOT_FOUND:
                return []
            raise
        given = set(ids)
        return [str(row["doc_id"]) for row in rows if row["doc_id"] not in given]

    async def _undo(self, collection: str, ids: list[str]) -> None:
        """Delete a batch from both stores now, or (the graph out of reach) leave it to the background retry."""
        try:
            await self._delete_both(collection, ids)
            self.indexer.metrics.graph_undone.inc(len(ids))
        except Exception as exc:  # noqa: BLE001 - whatever stopped the undo, the journal keeps it (and is retried)
            log.warning("graph entities of %r left to delete later (%d ids): %s", collection, len(ids), exc)
            # what the store holds goes now; the graph's part waits for the graph
            with contextlib.suppress(Exception):
                await self._delete_documents(collection, ids)

    async def _delete_both(self, collection: str, ids: list[str]) -> None:
        graph = self.graph
        reply = await graph.call("DeleteEntities", graph_pb.DeleteEntitiesRequest(collection=collection, ids=ids))
        await self._delete_documents(collection, [*ids, *reply.deleted_ids])
        self.journal.remove(collection, ids)

    async def _delete_documents(self, collection: str, ids: Iterable[str]) -> list[str]:
        """Delete the documents of these ids (those missing are skipped); returns the ids that had one."""
        gone = []
        for doc_id in dict.fromkeys(ids):
            try:
                await self.indexer.delete_document(collection, doc_id)
            except RagmeshError as exc:
                if exc.reason not in (Reason.DOCUMENT_NOT_FOUND, Reason.COLLECTION_NOT_FOUND):
                    raise
            else:
                gone.append(doc_id)
        return gone

    # --- the journal's retries ---------------------------------------------------------------------------------
    async def _reconcile(self, collection: str, *, quiet: bool = False) -> None:
        """Finish the undos the journal holds for a collection; raises unless `quiet` (then only logs)."""
        ids = list(self.journal.pending.get(collection, []))
        if not ids:
            return
        try:
            await self._delete_both(collection, ids)
            self.indexer.metrics.graph_undone.inc(len(ids))
        except RagmeshError as exc:
            if exc.code not in _REFUSED:
                if not quiet:
                    raise
                log.warning("%d graph entities of %r still to delete: %s", len(ids), collection, exc)
                return
            # the graph will never take these ids: no use asking again
            log.error("graph entities of %r cannot be deleted from the graph: %s", collection, exc)
            await self._delete_documents(collection, ids)
            self.journal.remove(collection, ids)
        except Exception as exc:
            if not quiet:
                raise
            log.warning("%d graph entities of %r still to delete: %s", len(ids), collection, exc)

    @contextlib.asynccontextmanager
    async def _retry_on_failure(self) -> AsyncIterator[None]:
        """A call that fails (or is cancelled) with undos left in the journal has them retried in the background."""
        try:
            yield
        except BaseException:
            if self.journal.pending:
                self._retry_later()
            raise

    def _retry_later(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.get_running_loop().create_task(self._retry_loop())

    async def _retry_loop(self) -> None:
        delay = _RETRY_FIRST_S
        while self.journal.pending:
            await asyncio.sleep(delay)
            try:
                for collection in list(self.journal.pending):
                    async with self._lock(collection):
                        await self._reconcile(collection)
            except Exception:  # noqa: BLE001 - the graph is still away: wait longer
                delay = min(delay * 2, _RETRY_MAX_S)

    # --- helpers -----------------------------------------------------------------------------------------------
    def _lock(self, collection: str) -> asyncio.Lock:
        return self._locks.setdefault(collection, asyncio.Lock())


def graph_disabled() -> RagmeshError:
    return failed_precondition(
        Reason.GRAPH_DISABLED, "the graph feature is off: set RAGMESH_GRAPH_ENABLED=true (and run the graph service)"
    )


def max_property_chars(value: int) -> int:
    """A request's max_property_chars: 0 means the default (250)."""
    if value < 0:
        raise invalid_argument(
            Reason.REQUEST_INVALID, "max_property_chars is 0 (the default, 250) or more", field="max_property_chars"
        )
    return value or 250


def batches(entities: Sequence[GraphEntity], size: int) -> Iterator[list[GraphEntity]]:
    """Batches of about `size` entities that never split an entity from its children (which follow it)."""
    batch: list[GraphEntity] = []
    for group in _families(entities):
        if batch and len(batch) + len(group) > size:
            yield batch
            batch = []
        batch.extend(group)
    if batch:
        yield batch


def _families(entities: Sequence[GraphEntity]) -> Iterator[list[GraphEntity]]:
    """Each top-level entity with its descendants (which `entities.build` puts right after it)."""
    family: list[GraphEntity] = []
    members: set[str] = set()
    for entity in entities:
        if family and entity.parent_id not in members:
            yield family
            family, members = [], set()
        family.append(entity)
        members.add(entity.id)
    if family:
        yield family


def _chunks(items: list[GraphEntity], size: int) -> Iterator[list[GraphEntity]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _document(collection: str, entity: GraphEntity) -> DocumentIn:
    return DocumentIn(
        collection=collection,
        doc_id=entity.id,
        title=entity.id,
        metadata={
            "is_graph_entity": True,
            "graph_entity_type": entity.type,
            **({PARENT: entity.parent_id} if entity.parent_id else {}),
        },
        text=entity.text(),
    )


def _upsert(collection: str, entities: Sequence[GraphEntity]) -> graph_pb.UpsertEntitiesRequest:
    return graph_pb.UpsertEntitiesRequest(collection=collection, entities=[_entity(e) for e in entities])


def _entity(entity: GraphEntity) -> graph_pb.Entity:
    return graph_pb.Entity(
        id=entity.id,
        type=entity.type,
        primary_key=[_property(name, value) for name, value in entity.primary_key],
        properties=[
            _property(name, value)
            for name, value in entity.properties.items()
            if name not in {k for k, _ in entity.primary_key}
        ],
        labels=entity.labels,
        alternative_keys=entity.alternative_keys,
        relations=[
            graph_pb.Relation(type=link.type, target_id=link.target_id, index=link.index)
            if link.index is not None
            else graph_pb.Relation(type=link.type, target_id=link.target_id)
            for link in entity.relations
        ],
        parent_id=entity.parent_id,
    )


def _property(name: str, value: Value) -> graph_pb.Property:
    proto = struct_pb2.Value()
    if isinstance(value, list):
        proto.list_value.extend(value)
    elif isinstance(value, bool):
        proto.bool_value = value
    elif isinstance(value, (int, float)):
        proto.number_value = value
    else:
        proto.string_value = value
    return graph_pb.Property(name=name, value=proto)
