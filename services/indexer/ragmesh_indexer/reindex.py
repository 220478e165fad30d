"""Re-indexing a collection into a new version, gated on its golden set (see ragmesh_store.versions).

1. `plan`: the new version is recorded as `building` (from then on every write to the collection goes to it as
   well, see `Indexer.mirror`) and its store collection is created; the job's items are the documents of the
   active version.
2. `copy`: each document is rebuilt from the active version's chunks and written into the new version with its
   settings, under the document's lock, unless a write got it there first (that one is newer). A restart
   redelivers the batches not acknowledged; documents already copied are skipped.
3. `finish`, once every document has a result: a last pass makes the new version hold exactly the active one's
   documents; then both are scored on the collection's golden set through the search service, in its default
   mode. The collection switches (one record write) when the new nDCG@10 is at least the current one minus the
   tolerance, or with `force`; otherwise the new version is dropped and the job ends `rejected` with both
   scores. Without a golden set it switches ungated ("no_golden_set"). The version replaced is kept as
   `previous` (still written to, so a rollback loses nothing) until its retention passes.

Several indexer replicas share the jobs, but the document locks are per process: with more than one replica
writing while a re-index runs, the last pass of step 3 is what brings the versions together.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from google.protobuf import json_format
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_store.aio import store_call
from ragmesh_store.documents import reassemble
from ragmesh_store.versions import Version, Versions, write_versions

from .model import DocumentIn, JobRecord, ReindexRecord, StoredContent, Target
from .service import Indexer, unless_gone

log = logging.getLogger(__name__)

MAX_RETENTION_SECONDS = 365 * 86_400
_CARRIED = ("source", "filename", "url", "mime_type", "path", "language")


@dataclasses.dataclass(frozen=True)
class ReindexOptions:
    """What a re-index changes (None: keep the current version's) and how it is gated."""

    chunk_tokens: int | None = None
    chunk_overlap_tokens: int | None = None
    model: str = ""
    tolerance: float | None = None
    force: bool = False
    retention_seconds: int | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


class Reindexer:
    """Plans, copies, gates and switches re-indexes; rollbacks; drops versions whose retention passed."""

    def __init__(
        self,
        indexer: Indexer,
        *,
        search_addr: str,
        tolerance: float,
        retention_seconds: int,
        search_timeout: float = 600.0,
    ) -> None:
        """`search_addr`: the search service, which scores versions on golden sets for the gate."""
        self.indexer = indexer
        self.store = indexer.store
        self.tolerance = tolerance
        self.retention_seconds = retention_seconds
        self._search_addr = search_addr
        self._search_timeout = search_timeout
        self._search: ServiceClient | None = None
        self._switching = asyncio.Lock()  # one record change at a time in this process

    async def close(self) -> None:
        if self._search is not None:
            await self._search.close()

    # --- 1. plan -------------------------------------------------------------------------------------------
    async def plan(self, collection: str, options: ReindexOptions, job_id: str) -> tuple[ReindexRecord, list[str]]:
        """Record the new version as building and create it; return the job's `reindex` fields and the doc ids
        to copy."""
        collection = validation.collection_name(collection)
        tolerance = self.tolerance if options.tolerance is None else options.tolerance
        retention = self.retention_seconds if options.retention_seconds is None else options.retention_seconds
        if not 0 <= tolerance <= 1:
            raise invalid_argument(
                Reason.TOLERANCE_OUT_OF_RANGE, "tolerance must be between 0 and 1", field="tolerance"
            )
        if not 0 <= retention <= MAX_RETENTION_SECONDS:
            raise invalid_argument(
                Reason.RETENTION_OUT_OF_RANGE,
                f"retention_seconds must be between 0 and {MAX_RETENTION_SECONDS} (a year)",
                field="retention_seconds",
            )
        if not await store_call(self.store.collection_exists, collection):
            raise not_found(
                Reason.COLLECTION_NOT_FOUND, f"collection {collection!r} does not exist", collection=collection
            )
        async with self._switching:
            versions = await self.indexer.versions(collection)
            building = versions.in_state("building")
            if building is not None:
                raise RagmeshError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    Reason.REINDEX_IN_PROGRESS,
                    f"collection {collection!r} is being re-indexed into version {building.version} by job "
                    f"{building.job_id}; wait for it or cancel it",
                    domain="indexer.ragmesh",
                    metadata={"collection": collection, "job_id": building.job_id},
                )
            current = self.indexer.target(versions, versions.current)
            tokens = current.chunker.chunk_tokens if options.chunk_tokens is None else options.chunk_tokens
            overlap = (
                current.chunker.overlap_tokens if options.chunk_overlap_tokens is None else options.chunk_overlap_tokens
            )
            if not 16 <= tokens <= 8192:
                raise invalid_argument(
                    Reason.CHUNK_TOKENS_OUT_OF_RANGE, "chunk_tokens must be between 16 and 8192", field="chunk_tokens"
                )
            if not 0 <= overlap < tokens // 2:
                raise invalid_argument(
                    Reason.CHUNK_OVERLAP_OUT_OF_RANGE,
                    f"chunk_overlap_tokens must be at least 0 and less than half of chunk_tokens ({tokens})",
                    field="chunk_overlap_tokens",
                )
            model = options.model or current.model
            await self.indexer.model_info(model)  # an unknown model or another dimension is refused now
            number = versions.next_version
            target = Target(
                collection, number, versions.physical(number), self.indexer.chunker_for(tokens, overlap), model
            )
            settings = await self.indexer.settings_of(target)
            current_version = versions.current
            if current_version.settings is None:  # a version 1 that followed the configuration: pin it now
                current_version = dataclasses.replace(current_version, settings=await self.indexer.settings_of(current))
            new = Version(number, "building", settings, _iso(_now()), job_id=job_id)
            await store_call(self.store.ensure_collection, target.physical)
            updated = dataclasses.replace(versions.replaced(current_version, new), next_version=number + 1)
            await store_call(write_versions, self.store, updated)  # from here on, writes go to both
        rows = await store_call(self.store.list_documents, current.physical, {}, [])
        info: ReindexRecord = {
            "from_version": versions.active,
            "to_version": number,
            "settings": dataclasses.asdict(settings),
            "tolerance": tolerance,
            "force": options.force,
            "retention_seconds": retention,
            "decision": "",
        }
        log.info(
            "re-index of %s: version %d -> %d (%s), %d documents",
            collection,
            versions.active,
            number,
            settings,
            len(rows),
        )
        return info, [row["doc_id"] for row in rows]

    # --- 2. copy -------------------------------------------------------------------------------------------
    async def copy(self, collection: str, version: int, doc_ids: Sequence[str]) -> list[str | BaseException]:
        """Copy documents from the active version into `version`: "indexed", "unchanged" (already there, or
        gone meanwhile) or the error, per document."""
        versions = await self.indexer.versions(collection)
        building = versions.get(version)
        if building is None or building.state != "building":
            return ["unchanged"] * len(doc_ids)  # the re-index ended (cancelled): nothing to do
        target = self.indexer.target(versions, building)

        async def one(doc_id: str) -> str | BaseException:
            try:
                return await self._copy_one(versions, target, doc_id)
            except Exception as exc:  # noqa: BLE001 - one document fails alone
                return exc

        return list(await asyncio.gather(*(one(d) for d in doc_ids)))

    async def _copy_one(self, versions: Versions, target: Target, doc_id: str) -> str:
        async with self.indexer.locks.hold((versions.name, doc_id)):
            if await store_call(self.store.document_hash, target.physical, doc_id) is not None:
                return "unchanged"  # written there since the re-index began: newer than the active copy
            source = (await self.indexer.versions(versions.name)).physical()
            chunks = await store_call(self.store.document_chunks, source, doc_id)
            if not chunks:
                return "unchanged"  # deleted meanwhile
            first = chunks[0].payload
            document = DocumentIn(
                collection=versions.name,
                doc_id=doc_id,
                title=str(first.get("title") or ""),
                metadata=dict(first.get("metadata") or {}),
                datasource=str(first.get("datasource") or ""),
                fresh_until=str(first.get("fresh_until") or ""),
                stored=StoredContent(reassemble(chunks), **{k: str(first.get(k) or "") for k in _CARRIED}),
            )
            outcome = await self.indexer.write_to(document, target)
            return outcome.status

    # --- 3. finish -----------------------------------------------------------------------------------------
    async def finish(self, job: JobRecord) -> tuple[str, ReindexRecord]:
        """Bring the new version level with the active one, gate, and switch or drop it. Returns the job's final
        state ("done" or "rejected") and its `reindex` fields with the decision and scores. Safe to repeat."""
        collection, info = job["collection"], job["reindex"].copy()
        if info.get("decision"):
            return ("rejected" if info["decision"] == "rejected" else "done"), info
        versions = await self.indexer.versions(collection)
        new = versions.get(info["to_version"])
        if versions.active == info["to_version"]:  # switched already (a repeat after a crash)
            return "done", {**info, "decision": info.get("decision") or "switched"}
        if new is None or new.state != "building":
            raise RagmeshError(
                grpc.StatusCode.ABORTED,
                Reason.REINDEX_ABANDONED,
                f"version {info['to_version']} of {collection!r} is no longer being built",
                domain="indexer.ragmesh",
            )
        await self._level(versions, self.indexer.target(versions, new))
        current, candidate = await self._scores(collection, versions.active, new.version)
        info["current"], info["candidate"] = current, candidate
        if current is None or candidate is None:
            decision = "no_golden_set"
        elif candidate["ndcg_at_10"] >= current["ndcg_at_10"] - info["tolerance"]:
            decision = "switched"
        else:
            decision = "forced" if info["force"] else "rejected"
        info["decision"] = decision
        if decision == "rejected":
            assert current is not None and candidate is not None  # both scored: else "no_golden_set"
            await self._drop(collection, new.version)
            log.warning(
                "re-index of %s rejected: nDCG@10 %.4f (version %d) vs %.4f (version %d), tolerance %.4f",
                collection,
                candidate["ndcg_at_10"],
                new.version,
                current["ndcg_at_10"],
                versions.active,
                info["tolerance"],
            )
            return "rejected", info
        await self._switch(collection, new.version, info["retention_seconds"])
        log.info("re-index of %s: switched to version %d (%s)", collection, new.version, decision)
        return "done", info

    async def _level(self, versions: Versions, target: Target) -> None:
        """Make the new version hold the active version's documents, no more, no fewer."""
        active = set(r["doc_id"] for r in await store_call(self.store.list_documents, versions.physical(), {}, []))
        built = set(r["doc_id"] for r in await store_call(self.store.list_documents, target.physical, {}, []))
        for doc_id in sorted(built - active):
            async with self.indexer.locks.hold((versions.name, doc_id)):
                if not await store_call(self.store.document_chunk_ids, versions.physical(), doc_id):
                    await store_call(self.store.delete_document, target.physical, doc_id)
        missing = sorted(active - built)
        if missing:
            for result in await self.copy(versions.name, target.version, missing):
                if isinstance(result, BaseException):
                    raise result

    async def _scores(
        self,
        collection: str,
        current: int,
        candidate: int,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """Both versions scored on the golden set (None, None without one)."""
        search = self._search_client()
        scored = []
        for version in (current, candidate):
            try:
                response = await search.call(
                    "EvaluateCollection", search_pb.EvaluateCollectionRequest(collection=collection, version=version)
                )
            except RagmeshError as exc:
                if exc.reason == Reason.GOLDEN_SET_NOT_FOUND:
                    return None, None
                raise
            evaluation = response.evaluations[0]
            scored.append(
                json_format.MessageToDict(
                    evaluation, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
                )
            )
        return scored[0], scored[1]

    def _search_client(self) -> ServiceClient:
        if self._search is None:
            self._search = ServiceClient(
                "search",
                self._search_addr,
                search_grpc.SearchServiceStub,
                timeout=self._search_timeout,
                # The gate scores versions that are not active, which records nothing: safe to retry.
                idempotent_here=("EvaluateCollection",),
                caller="indexer",
            )
        return self._search

    async def _switch(self, collection: str, version: int, retention_seconds: int) -> None:
        """Make `version` the active one; the one it replaces is kept for a rollback (an older kept one goes)."""
        async with self._switching:
            versions = await self.indexer.versions(collection)
            dropped = [v.version for v in versions.versions if v.state == "previous"]
            if retention_seconds == 0:  # nothing to keep for a rollback
                dropped.append(versions.active)
            replaced = dataclasses.replace(
                versions.current, state="previous", retained_until=_iso(_now() + timedelta(seconds=retention_seconds))
            )
            built = versions.get(version)
            if built is None:
                raise RagmeshError(
                    grpc.StatusCode.ABORTED,
                    Reason.REINDEX_ABANDONED,
                    f"version {version} of {collection!r} is gone",
                    domain="indexer.ragmesh",
                )
            switched = dataclasses.replace(built, state="active", retained_until="")
            updated = versions.replaced(replaced, switched)
            for number in dropped:
                updated = updated.without(number)
            await store_call(write_versions, self.store, dataclasses.replace(updated, active=version))
        for number in dropped:
            await self._remove(versions, number)

    async def _drop(self, collection: str, version: int) -> None:
        """Forget a version (writes stop going to it), then delete its data."""
        async with self._switching:
            versions = await self.indexer.versions(collection)
            if versions.get(version) is None or versions.active == version:
                return
            await store_call(write_versions, self.store, versions.without(version))
        await self._remove(versions, version)

    async def _remove(self, versions: Versions, version: int) -> None:
        physical = versions.physical(version)
        with unless_gone():
            if physical == versions.name:  # version 1 is the collection's own name, which keeps its records
                await store_call(self.store.clear_points, physical)
            else:
                await store_call(self.store.delete_collection, physical)

    async def abandon(self, job: JobRecord) -> None:
        """A cancelled re-index: drop the version it was building."""
        info = job.get("reindex")
        versions = await self.indexer.versions(job["collection"])
        building = versions.get(info.get("to_version", 0) if info else 0)
        if building is not None and building.state == "building":
            await self._drop(job["collection"], building.version)

    # --- rollback and retention ----------------------------------------------------------------------------
    async def rollback(self, collection: str) -> tuple[int, int]:
        """Switch back to the previous version. Returns (version now active, version replaced)."""
        collection = validation.collection_name(collection)
        if not await store_call(self.store.collection_exists, collection):
            raise not_found(
                Reason.COLLECTION_NOT_FOUND, f"collection {collection!r} does not exist", collection=collection
            )
        async with self._switching:
            versions = await self.indexer.versions(collection)
            previous = versions.in_state("previous")
            if versions.in_state("building") is not None:
                raise RagmeshError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    Reason.REINDEX_IN_PROGRESS,
                    f"collection {collection!r} is being re-indexed; wait for the job or cancel it",
                    domain="indexer.ragmesh",
                    metadata={"collection": collection},
                )
            if previous is None:
                raise RagmeshError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    Reason.NO_PREVIOUS_VERSION,
                    f"collection {collection!r} keeps no previous version to roll back to",
                    domain="indexer.ragmesh",
                    metadata={"collection": collection},
                )
            replaced = dataclasses.replace(
                versions.current,
                state="previous",
                retained_until=_iso(_now() + timedelta(seconds=self.retention_seconds)),
            )
            restored = dataclasses.replace(previous, state="active", retained_until="")
            updated = dataclasses.replace(versions.replaced(replaced, restored), active=previous.version)
            await store_call(write_versions, self.store, updated)
        log.info("rollback of %s: version %d -> %d", collection, versions.active, previous.version)
        return previous.version, versions.active

    async def drop_expired(self) -> list[str]:
        """Drop the previous versions whose retention has passed; returns "<collection>.v<n>" of each."""
        dropped = []
        for name in await store_call(self.store.list_collections):
            with contextlib.suppress(RagmeshError):
                versions = await self.indexer.versions(name)
                for version in versions.versions:
                    if version.state == "previous" and _expired(version):
                        await self._drop(name, version.version)
                        dropped.append(f"{name}.v{version.version}")
        return dropped


def _expired(version: Version) -> bool:
    try:
        return datetime.fromisoformat(version.retained_until) <= _now()
    except ValueError:
        return False
