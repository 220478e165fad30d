"""Bulk ingestion jobs: a job is a list of documents (URLs, inline texts or files, an archive's members, a
folder's files), cut into batches on a durable queue (`queues.JobStore`) and ingested by workers through
`Indexer.ingest_batch`. Any indexer replica works on any job; a job resumes where it stopped after a crash
(a batch is acknowledged only after its results are recorded, and ingesting is idempotent).

A failed document never fails the job: its error is recorded and the others go on. When every document has
a result the worker that recorded the last one finishes the job: for a folder job with `prune`, documents of
its datasource whose files are gone are deleted; then the job is `done`.

A folder on a client's machine comes as a manifest (see manifests.py): `plan_upload` says which files the client
must send, and the job over them (kind "manifest") counts the others unchanged and prunes like a folder job.

A folder, a client's folder or a URL list is also a *datasource* of its collection: remembered with its options,
so `sync` re-runs it (a client's folder is re-sent by that client), and with `fresh_for_seconds` its documents
carry `fresh_until` (expired ones can be listed and pruned).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import grpc
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.paths import folder_under_roots
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr
from ragmesh_common.walk import SkippedFile, classify_bytes, walk
from ragmesh_store.aio import store_call

from .manifests import Manifest, ManifestIn, Plan, plan, validate
from .model import (
    BatchRecord,
    DatasourceRecord,
    DocumentIn,
    ErrorRecord,
    FileIn,
    FileRecord,
    IngestOutcome,
    ItemRecord,
    JobRecord,
)
from .queues import COUNTERS, ItemResult, JobStore, Message, consumer_name
from .reindex import Reindexer, ReindexOptions
from .service import Indexer

log = logging.getLogger(__name__)
DOMAIN = "indexer.ragmesh"
FINAL_STATES = ("done", "failed", "cancelled", "rejected")
RETENTION_SWEEP_SECONDS = 60.0
# A re-index's finish that fails with one of these is tried again (the service will be back); others fail the job.
_RETRIED = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
)
MAX_SKIPPED_KEPT = 1000
MAX_URLS = 10_000
ROOTS_SETTING = "RAGMESH_INDEXER_ROOTS"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _parse_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class ManifestSource:
    """A folder on the client's machine: its manifest, an archive of the files to ingest, what the client skipped,
    and whether the manifest is only a part of the folder."""

    manifest: ManifestIn
    archive: bytes
    archive_name: str = ""
    skipped: Sequence[SkippedFile] = ()
    partial: bool = False


@dataclass(frozen=True)
class JobSource:
    """What a new job ingests: exactly one of the five."""

    urls: Sequence[str] = ()
    documents: Sequence[DocumentIn] = ()
    archive: bytes | None = None
    archive_name: str = ""
    folder: str = ""
    manifest: ManifestSource | None = None


# --- documents on the queue -----------------------------------------------------------------------------------
def _item(document: DocumentIn, label: str, size: int) -> ItemRecord:
    """A document as a queue item (JSON): the fields of DocumentIn; folder files carry only their path."""
    item: ItemRecord = {"label": label, "size": size}
    for name in ("doc_id", "title", "text", "url", "datasource", "fresh_until"):
        if value := getattr(document, name):
            item[name] = value
    if document.metadata:
        item["metadata"] = dict(document.metadata)
    if document.file is not None:
        file: FileRecord = {
            "filename": document.file.filename,
            "mime_type": document.file.mime_type,
            "path": document.file.path,
        }
        if document.file.data:
            file["data"] = base64.b64encode(document.file.data).decode()
        item["file"] = file
    return item


def _folder_file(root: Path, rel: str, max_bytes: int) -> bytes:
    """A folder job's file, read when its batch runs (checked again: still inside the root, still small)."""
    path = (root / rel).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise not_found(Reason.FILE_NOT_FOUND, f"{rel} is gone from the folder", path=rel)
    data = path.read_bytes()
    if len(data) > max_bytes:
        raise invalid_argument(
            Reason.PAYLOAD_TOO_LARGE,
            f"{rel} is {len(data)} bytes; the limit is {max_bytes}",
            field="document",
            size_bytes=len(data),
            limit_bytes=max_bytes,
        )
    return data


def _document(item: ItemRecord, collection: str, root: Path | None, max_bytes: int) -> DocumentIn:
    file = None
    if (raw := item.get("file")) is not None:
        if "data" in raw:
            data = base64.b64decode(raw["data"])
        elif root is not None:
            data = _folder_file(root, raw["path"], max_bytes)
        else:
            data = b""
        file = FileIn(data, raw.get("filename", ""), raw.get("mime_type", ""), raw.get("path", ""))
    return DocumentIn(
        collection=collection,
        doc_id=item.get("doc_id", ""),
        title=item.get("title", ""),
        metadata=item.get("metadata", {}),
        text=item.get("text"),
        file=file,
        url=item.get("url"),
        datasource=item.get("datasource", ""),
        fresh_until=item.get("fresh_until", ""),
    )


def _error_object(exc: BaseException) -> ErrorRecord:
    if not isinstance(exc, RagmeshError):
        log.error("job document failed unexpectedly", exc_info=exc)
        exc = RagmeshError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
    exc.with_domain(DOMAIN)
    return {
        "code": exc.code.name,
        "reason": exc.reason,
        "domain": exc.domain,
        "message": exc.message,
        "metadata": dict(exc.metadata),
    }


# The longest freshness a datasource may ask for (a date past it would not be a date).
MAX_FRESH_FOR_SECONDS = 100 * 365 * 24 * 3600


def datasource_id(collection: str, kind: str, spec: str) -> str:
    return "ds-" + hashlib.sha256(f"{collection}\0{kind}\0{spec}".encode()).hexdigest()[:16]


def unpack_archive(
    data: bytes,
    *,
    max_unpacked_bytes: int,
    max_file_bytes: int,
) -> tuple[list[tuple[str, bytes]], list[SkippedFile]]:
    """A ZIP archive's members to ingest (path, bytes) and those skipped. The converter's guards apply:
    encrypted members are refused (DOCUMENT_ENCRYPTED), and an archive whose declared sizes add up past
    `max_unpacked_bytes` is refused before anything is unpacked (PAYLOAD_TOO_LARGE); zipfile never returns more
    than a member's declared size."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise invalid_argument(Reason.ARCHIVE_INVALID, f"not a ZIP archive: {exc}", field="archive") from None
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        if any(m.flag_bits & 0x1 for m in members):
            raise RagmeshError(
                grpc.StatusCode.INVALID_ARGUMENT, Reason.DOCUMENT_ENCRYPTED, "the archive has encrypted members", DOMAIN
            )
        unpacked = sum(m.file_size for m in members)
        if unpacked > max_unpacked_bytes:
            raise invalid_argument(
                Reason.PAYLOAD_TOO_LARGE,
                f"the archive unpacks to {unpacked} bytes; the limit is {max_unpacked_bytes}",
                field="archive",
                size_bytes=unpacked,
                limit_bytes=max_unpacked_bytes,
            )
        files, skipped = [], []
        for member in sorted(members, key=lambda m: m.filename):
            name = PurePosixPath(member.filename.replace("\\", "/"))
            if name.is_absolute() or ".." in name.parts:
                skipped.append(SkippedFile(member.filename, "PATH_INVALID"))
                continue
            rel = name.as_posix()
            if member.file_size > max_file_bytes:
                skipped.append(SkippedFile(rel, "TOO_LARGE"))
                continue
            content = archive.read(member)
            reason = classify_bytes(rel, content, max_file_bytes)
            if reason:
                skipped.append(SkippedFile(rel, reason))
            else:
                files.append((rel, content))
    return files, skipped


class Jobs:
    """Creating, reading and cancelling jobs; datasources; the workers. One per indexer process."""

    def __init__(
        self,
        indexer: Indexer,
        store: JobStore,
        *,
        roots: tuple[Path, ...],
        batch_size: int,
        workers: int,
        max_archive_bytes: int,
        claim_idle_seconds: float,
        reindexer: Reindexer,
    ) -> None:
        self.indexer = indexer
        self.reindexer = reindexer
        self.store = store
        self.roots = roots
        self.batch_size = batch_size
        self.workers = workers
        self.max_archive_bytes = max_archive_bytes
        self.claim_idle_seconds = claim_idle_seconds
        self._tasks: list[asyncio.Task] = []
        self._stopping = asyncio.Event()

    # --- creating -----------------------------------------------------------------------------------------
    async def create(
        self, collection: str, source: JobSource, *, prune: bool = False, fresh_for_seconds: int = 0
    ) -> JobRecord:
        """Plan the job (walk the folder, unpack the archive), save it and queue its batches."""
        collection = validation.collection_name(collection)
        if not 0 <= fresh_for_seconds <= MAX_FRESH_FOR_SECONDS:
            raise invalid_argument(
                Reason.FRESH_FOR_INVALID,
                f"fresh_for_seconds must be between 0 and {MAX_FRESH_FOR_SECONDS} (100 years)",
                field="fresh_for_seconds",
                limit=MAX_FRESH_FOR_SECONDS,
            )
        job_id = uuid.uuid4().hex
        created = now()
        fresh_until = (
            (datetime.now(UTC) + timedelta(seconds=fresh_for_seconds)).isoformat(timespec="seconds")
            if fresh_for_seconds
            else ""
        )
        job: JobRecord = {
            "job_id": job_id,
            "collection": collection,
            "created_at": created,
            "prune": prune,
            "datasource_id": "",
            "folder": "",
            "skipped_files": [],
            "state": "queued",
        }
        items: list[ItemRecord] = []
        datasource: DatasourceRecord | None = None
        if source.folder:
            root = folder_under_roots(source.folder, self.roots, domain=DOMAIN, setting=ROOTS_SETTING)
            ds = datasource_id(collection, "folder", str(root))
            walked = await asyncio.to_thread(walk, root, max_bytes=self.indexer.max_document_bytes)
            for f in walked.files:
                document = DocumentIn(
                    collection=collection,
                    file=FileIn(b"", PurePosixPath(f.rel).name, "", f.rel),
                    datasource=ds,
                    fresh_until=fresh_until,
                )
                items.append(_item(document, f.rel, f.size))
            job.update(
                {
                    "kind": "folder",
                    "source": str(root),
                    "folder": str(root),
                    "datasource_id": ds,
                    "skipped_files": [[s.rel, s.reason] for s in walked.skipped],
                }
            )
            datasource = {
                "datasource_id": ds,
                "collection": collection,
                "kind": "folder",
                "folder": str(root),
                "urls": [],
                "prune": prune,
                "fresh_for_seconds": fresh_for_seconds,
            }
        elif source.urls:
            urls = list(dict.fromkeys(u.strip() for u in source.urls if u.strip()))
            if len(urls) > MAX_URLS:
                raise invalid_argument(Reason.TOO_MANY_URLS, f"at most {MAX_URLS} URLs per job", field="urls")
            ds = datasource_id(collection, "urls", "\n".join(sorted(urls)))
            items = [
                _item(DocumentIn(collection=collection, url=u, datasource=ds, fresh_until=fresh_until), u, 0)
                for u in urls
            ]
            job.update({"kind": "urls", "source": f"{len(urls)} URLs", "datasource_id": ds})
            datasource = {
                "datasource_id": ds,
                "collection": collection,
                "kind": "urls",
                "folder": "",
                "urls": urls,
                "prune": prune,
                "fresh_for_seconds": fresh_for_seconds,
            }
        elif source.manifest is not None:
            items, datasource = await self._manifest_job(job, source.manifest, fresh_for_seconds, fresh_until)
        elif source.archive is not None:
            files, skipped = await self._unpack(source.archive)
            for rel, data in files:
                document = DocumentIn(
                    collection=collection, file=FileIn(data, PurePosixPath(rel).name, "", rel), fresh_until=fresh_until
                )
                items.append(_item(document, rel, len(data)))
            job.update(
                {
                    "kind": "archive",
                    "source": source.archive_name or "archive",
                    "skipped_files": [[s.rel, s.reason] for s in skipped],
                }
            )
        elif source.documents:
            for i, d in enumerate(source.documents):
                label = d.doc_id or (d.file.path or d.file.filename if d.file else "") or d.url or f"documents[{i}]"
                size = len(d.text.encode()) if d.text is not None else len(d.file.data) if d.file else 0
                items.append(
                    _item(
                        dataclasses.replace(d, collection=collection, fresh_until=d.fresh_until or fresh_until),
                        label,
                        size,
                    )
                )
            job.update({"kind": "documents", "source": f"{len(items)} documents"})
        else:
            raise invalid_argument(
                Reason.JOB_SOURCE_MISSING, "give urls, documents, an archive or a folder", field="source"
            )
        job["total"] = len(items)
        # What this run saw, so a pruning job knows which of its datasource's documents are gone.
        job["doc_ids"] = [_item_doc_id(i) for i in items] if job["prune"] and job["datasource_id"] else []
        job["skipped_files"] = job["skipped_files"][:MAX_SKIPPED_KEPT]
        job["skipped"] = len(job["skipped_files"])
        batches = [
            json.dumps({"job_id": job_id, "start": i, "items": items[i : i + self.batch_size]}).encode()
            for i in range(0, len(items), self.batch_size)
        ]
        await self.store.create(job, batches)
        if datasource is not None:
            datasource.update({"last_job_id": job_id, "last_synced_at": created, "fresh_until": fresh_until})
            await self.store.save_datasource(datasource)
        log.info(
            "job %s: %s %s -> %s, %d documents, %d skipped",
            job_id,
            job["kind"],
            job["source"],
            collection,
            len(items),
            job["skipped"],
        )
        if not items:
            await self._finish(job_id)
        return await self.get(job_id)

    # --- folders on a client's machine (manifests.py) ------------------------------------------------------------
    async def _manifest_state(self, collection: str, manifest: Manifest) -> tuple[str, dict[str, str], set[str], Any]:
        """The datasource's id, the hashes it stores, the doc ids it has in the store, and its record (or None)."""
        ds = datasource_id(collection, "manifest", manifest.spec)
        record = next((d for d in await self.store.list_datasources() if d["datasource_id"] == ds), None)
        try:
            rows = await store_call(self.indexer.store.list_documents, collection, {"datasource": ds}, [])
        except RagmeshError as exc:
            if exc.reason != Reason.COLLECTION_NOT_FOUND:
                raise
            rows = []
        stored = dict(record.get("files", {})) if record else {}
        return ds, stored, {row["doc_id"] for row in rows}, record

    async def plan_upload(self, collection: str, given: ManifestIn, *, prune: bool) -> tuple[str, Plan]:
        """Which files of the client's folder to upload, which are unchanged, and which stored ones are gone."""
        collection = validation.collection_name(collection)
        manifest = validate(given)
        ds, stored, present, _ = await self._manifest_state(collection, manifest)
        return ds, plan(manifest, stored, present, prune=prune)

    async def _unpack(self, data: bytes) -> tuple[list[tuple[str, bytes]], list[SkippedFile]]:
        return await asyncio.to_thread(
            unpack_archive,
            data,
            max_unpacked_bytes=self.max_archive_bytes,
            max_file_bytes=self.indexer.max_document_bytes,
        )

    async def _manifest_job(
        self, job: JobRecord, source: ManifestSource, fresh_for_seconds: int, fresh_until: str
    ) -> tuple[list[ItemRecord], DatasourceRecord]:
        """A manifest job's items: the uploaded files (each checked against the manifest), then the manifest's
        other files, kept as unchanged when the datasource stores them with their hash, else failing."""
        collection, manifest = job["collection"], validate(source.manifest, field="manifest_upload.manifest")
        files, skipped = await self._unpack(source.archive)
        for rel, data in files:
            entry = manifest.files.get(rel)
            if entry is None or hashlib.sha256(data).hexdigest() != entry.sha256:
                raise invalid_argument(
                    Reason.MANIFEST_MISMATCH,
                    f"{rel} is not in the manifest" if entry is None else f"{rel} does not match its manifest sha256",
                    field="manifest_upload.archive",
                    path=rel,
                )
        ds, stored, present, record = await self._manifest_state(collection, manifest)
        unchanged = set(plan(manifest, stored, present, prune=False).unchanged)
        uploaded = {rel for rel, _ in files}
        refused = {s.rel for s in skipped}
        items: list[ItemRecord] = []
        for rel, data in files:
            document = DocumentIn(
                collection=collection,
                file=FileIn(data, PurePosixPath(rel).name, "", rel),
                datasource=ds,
                fresh_until=fresh_until,
            )
            items.append(_item(document, rel, len(data)))
        if not source.partial:
            for rel, entry in manifest.files.items():
                if rel in uploaded or rel in refused:
                    continue
                document = DocumentIn(collection=collection, file=FileIn(b"", PurePosixPath(rel).name, "", rel))
                item = _item(document, rel, entry.size)
                item["kept"] = "unchanged" if rel in unchanged else "missing"
                items.append(item)
        job.update(
            {
                "kind": "manifest",
                "source": manifest.source,
                "datasource_id": ds,
                "prune": job.get("prune", False) and not source.partial,
                "skipped_files": [[s.rel, s.reason] for s in [*source.skipped, *skipped]],
                "manifest": {rel: e.sha256 for rel, e in manifest.files.items() if rel not in refused},
                "partial": source.partial,
            }
        )
        datasource: DatasourceRecord = {
            "datasource_id": ds,
            "collection": collection,
            "kind": "manifest",
            "folder": manifest.folder,
            "host": manifest.host,
            "urls": [],
            "prune": job["prune"] if not source.partial else bool(record and record.get("prune")),
            "fresh_for_seconds": fresh_for_seconds,
            "files": stored,
        }
        return items, datasource

    async def _remember_files(self, job: JobRecord) -> None:
        """A finished manifest job: its datasource stores the hashes of the files it stands for, but not of those
        that failed (uploaded again next time)."""
        ds_id = job.get("datasource_id", "")
        record = next((d for d in await self.store.list_datasources() if d["datasource_id"] == ds_id), None)
        if record is None:
            return
        details = await self.store.get(job["job_id"], details=True)
        failed = {e["document"] for e in details.get("errors", [])} if details else set()
        ok = {rel: sha for rel, sha in job.get("manifest", {}).items() if rel not in failed}
        files = {} if not job.get("partial") and job.get("prune") else dict(record.get("files", {}))
        for rel in failed:
            files.pop(rel, None)
        files.update(ok)
        record["files"] = files
        record.pop("due", None)
        await self.store.save_datasource(record)

    async def reindex(self, collection: str, options: ReindexOptions) -> JobRecord:
        """Queue a re-index of the collection (see reindex.py): its documents are copied into the new version by
        the workers, like any job's."""
        job_id = uuid.uuid4().hex
        info, doc_ids = await self.reindexer.plan(collection, options, job_id)
        job: JobRecord = {
            "job_id": job_id,
            "collection": collection,
            "created_at": now(),
            "prune": False,
            "datasource_id": "",
            "folder": "",
            "skipped_files": [],
            "skipped": 0,
            "doc_ids": [],
            "state": "queued",
            "kind": "reindex",
            "source": f"version {info['from_version']} -> {info['to_version']}",
            "total": len(doc_ids),
            "reindex": info,
        }
        items: list[ItemRecord] = [{"label": d, "doc_id": d, "size": 0} for d in doc_ids]
        batches = [
            json.dumps({"job_id": job_id, "start": i, "items": items[i : i + self.batch_size]}).encode()
            for i in range(0, len(items), self.batch_size)
        ]
        await self.store.create(job, batches)
        if not items:
            await self._finish(job_id)
        return await self.get(job_id)

    # --- reading ------------------------------------------------------------------------------------------
    async def get(self, job_id: str, *, details: bool = True) -> JobRecord:
        if not job_id:
            raise invalid_argument(Reason.JOB_ID_INVALID, "job_id is required", field="job_id")
        job = await self.store.get(job_id, details=details)
        if job is None:
            raise not_found(Reason.JOB_NOT_FOUND, f"no job {job_id!r}", job_id=job_id)
        return job

    async def list(self, limit: int) -> list[JobRecord]:
        if not 0 <= limit <= 1000:
            raise invalid_argument(Reason.LIMIT_OUT_OF_RANGE, "limit must be between 1 and 1000", field="limit")
        return await self.store.list(limit or 50)

    async def cancel(self, job_id: str) -> JobRecord:
        job = await self.get(job_id, details=False)
        if job["state"] not in FINAL_STATES:
            await self.store.update(job_id, state="cancelled", finished_at=now())
            if job.get("kind") == "reindex":
                await self.reindexer.abandon(job)
                self.indexer.metrics.reindexes.labels("cancelled").inc()
            log.info("job %s cancelled", job_id)
        return await self.get(job_id)

    # --- datasources ----------------------------------------------------------------------------------------
    async def datasources(self, collection: str = "") -> builtins.list[DatasourceRecord]:
        out = []
        for ds in await self.store.list_datasources():
            if collection and ds["collection"] != collection:
                continue
            until = _parse_time(ds.get("fresh_until", ""))
            ds["due"] = until is None or until <= datetime.now(UTC)
            out.append(ds)
        return out

    async def sync(self, collection: str = "", *, everything: bool = False) -> builtins.list[JobRecord]:
        """Queue a job for each datasource that is due (all of them with `everything`)."""
        jobs = []
        for ds in await self.datasources(collection):
            if not (everything or ds["due"]):
                continue
            if ds["kind"] == "manifest":
                log.info("datasource %s not synced here: its folder is on %s", ds["datasource_id"], ds.get("host"))
                continue
            source = JobSource(folder=ds["folder"]) if ds["kind"] == "folder" else JobSource(urls=ds["urls"])
            try:
                jobs.append(
                    await self.create(
                        ds["collection"],
                        source,
                        prune=ds.get("prune", False),
                        fresh_for_seconds=ds.get("fresh_for_seconds", 0),
                    )
                )
            except RagmeshError as exc:
                log.warning("datasource %s not synced: %s %s", ds["datasource_id"], exc.reason, exc.message)
        return jobs

    async def expired(self, collection: str) -> builtins.list[dict[str, Any]]:
        collection = validation.collection_name(collection)
        rows = await store_call(self.indexer.store.list_documents, collection, {}, ["fresh_until", "datasource"])
        current = datetime.now(UTC)
        return [r for r in rows if (until := _parse_time(str(r.get("fresh_until") or ""))) and until <= current]

    async def prune_expired(self, collection: str) -> builtins.list[str]:
        deleted = []
        for row in await self.expired(collection):
            with contextlib.suppress(RagmeshError):
                await self.indexer.delete_document(collection, row["doc_id"])
                deleted.append(row["doc_id"])
        return deleted

    # --- workers --------------------------------------------------------------------------------------------
    def start(self) -> None:
        for n in range(self.workers):
            self._tasks.append(asyncio.create_task(self._work(consumer_name()), name=f"ragmesh-job-worker-{n}"))
        self._tasks.append(asyncio.create_task(self._sweep(), name="ragmesh-version-retention"))

    async def stop(self) -> None:
        """Stop taking batches; a batch in progress is abandoned unacknowledged (another worker, or this one
        after a restart, takes it again)."""
        self._stopping.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _work(self, consumer: str) -> None:
        while not self._stopping.is_set():
            try:
                message = await self.store.claim(consumer, block_seconds=1.0)
                if message is not None:
                    await self._process(message, consumer)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a worker never dies; the batch stays unacknowledged
                log.exception("job worker %s: a batch failed; retrying shortly", consumer)
                await asyncio.sleep(1.0)

    async def _sweep(self) -> None:
        """Drop the versions kept for a rollback once their retention has passed (at start, then every minute)."""
        while not self._stopping.is_set():
            try:
                for dropped in await self.reindexer.drop_expired():
                    log.info("dropped %s: its retention has passed", dropped)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - tried again at the next sweep
                log.exception("dropping expired versions failed")
            await asyncio.sleep(RETENTION_SWEEP_SECONDS)

    async def _process(self, message: Message, consumer: str) -> None:
        batch: BatchRecord = json.loads(message.payload)
        job = await self.store.get(message.job_id, details=False)
        if job is None or job["state"] in FINAL_STATES:
            await self.store.ack(message)  # cancelled (or unknown, or finished) jobs drop their batches
            return
        await self.store.start(message.job_id, now())
        keep_alive = asyncio.create_task(self._keep_alive(message, consumer))
        try:
            results = await self._ingest(job, batch)
        finally:
            keep_alive.cancel()
        counts = await self.store.record(message.job_id, results)
        if sum(counts[name] for name in COUNTERS) >= job["total"]:
            await self._finish(message.job_id)
        await self.store.ack(message)

    async def _ingest(self, job: JobRecord, batch: BatchRecord) -> builtins.list[ItemResult]:
        if job.get("kind") == "reindex":
            return await self._copy(job, batch)
        root = Path(job["folder"]) if job.get("folder") else None
        items = batch["items"]
        documents: list[DocumentIn | None] = []
        failures: dict[int, BaseException] = {}
        kept: dict[int, str] = {}
        for i, item in enumerate(items):
            if item.get("kept") == "unchanged":
                documents.append(None)
                kept[i] = "unchanged"
                continue
            if item.get("kept") == "missing":
                documents.append(None)
                failures[i] = not_found(
                    Reason.FILE_NOT_FOUND, f"{item['label']} was not uploaded (and is not stored)", path=item["label"]
                )
                continue
            try:
                documents.append(
                    await asyncio.to_thread(_document, item, job["collection"], root, self.indexer.max_document_bytes)
                )
            except (RagmeshError, OSError) as exc:
                documents.append(None)
                failures[i] = (
                    exc
                    if isinstance(exc, RagmeshError)
                    else not_found(Reason.FILE_UNREADABLE, f"{item['label']}: {exc}", path=item["label"])
                )
        ready = [d for d in documents if d is not None]
        outcomes = iter(await self.indexer.ingest_batch(ready) if ready else [])
        results = []
        for i, (item, document) in enumerate(zip(items, documents, strict=True)):
            index = batch["start"] + i
            size = int(item.get("size") or (len(document.file.data) if document and document.file else 0))
            if i in kept:
                results.append(ItemResult(index, kept[i], size))
                continue
            outcome: IngestOutcome | BaseException = failures[i] if document is None else next(outcomes)
            if isinstance(outcome, IngestOutcome):
                results.append(ItemResult(index, outcome.status, size))
            else:
                results.append(
                    ItemResult(index, "failed", size, {"document": item["label"], "error": _error_object(outcome)})
                )
        return results

    async def _copy(self, job: JobRecord, batch: BatchRecord) -> builtins.list[ItemResult]:
        items = batch["items"]
        with self.indexer.tracer.start_as_current_span(
            "indexer.reindex.copy",
            attributes={
                Attr.COLLECTION: job["collection"],
                "ragmesh.job_id": job["job_id"],
                "ragmesh.version": job["reindex"]["to_version"],
                "ragmesh.documents": len(items),
            },
        ):
            outcomes = await self.reindexer.copy(
                job["collection"], job["reindex"]["to_version"], [i["doc_id"] for i in items]
            )
        counted = self.indexer.metrics.reindexed
        for outcome in outcomes:
            counted.labels("failed" if isinstance(outcome, BaseException) else outcome).inc()
        results = []
        for i, (item, outcome) in enumerate(zip(items, outcomes, strict=True)):
            if isinstance(outcome, BaseException):
                results.append(
                    ItemResult(
                        batch["start"] + i, "failed", 0, {"document": item["label"], "error": _error_object(outcome)}
                    )
                )
            else:
                results.append(ItemResult(batch["start"] + i, outcome, 0))
        return results

    async def _keep_alive(self, message: Message, consumer: str) -> None:
        while True:
            await asyncio.sleep(max(0.5, self.claim_idle_seconds / 3))
            with contextlib.suppress(Exception):
                await self.store.keep_alive(message, consumer)

    async def _finish(self, job_id: str) -> None:
        """Every document has a result: prune (folder jobs that ask for it), then `done`. Safe to repeat."""
        job = await self.store.get(job_id, details=False)
        if job is None or job["state"] in FINAL_STATES:
            return
        if job.get("kind") == "reindex":
            try:
                with self.indexer.tracer.start_as_current_span(
                    "indexer.reindex.finish", attributes={Attr.COLLECTION: job["collection"], "ragmesh.job_id": job_id}
                ) as span:
                    state, info = await self.reindexer.finish(job)
                    span.set_attribute("ragmesh.decision", info["decision"])
            except RagmeshError as exc:
                if exc.code in _RETRIED:
                    raise  # a service down or busy: the batch stays unacknowledged and the finish is tried again
                # Anything else would fail again: the job fails with its reason and the new version goes.
                state, info = "failed", {**job["reindex"], "decision": ""}
                await self.store.update(job_id, error=f"{exc.reason}: {exc.message}")
                await self.reindexer.abandon(job)
            await self.store.update(job_id, state=state, finished_at=now(), outcome=json.dumps({"reindex": info}))
            self.indexer.metrics.reindexes.labels(info["decision"] or state).inc()  # "failed" has no decision
            log.info("job %s %s (re-index of %s: %s)", job_id, state, job["collection"], info["decision"])
            return
        deleted = 0
        if job.get("prune") and job.get("datasource_id"):
            seen = set(job["doc_ids"])
            try:
                rows = await store_call(
                    self.indexer.store.list_documents, job["collection"], {"datasource": job["datasource_id"]}, []
                )
            except RagmeshError as exc:
                if exc.reason != Reason.COLLECTION_NOT_FOUND:
                    raise
                rows = []
            for row in rows:
                if row["doc_id"] not in seen:
                    with contextlib.suppress(RagmeshError):  # deleted meanwhile
                        await self.indexer.delete_document(job["collection"], row["doc_id"])
                        deleted += 1
        if job.get("kind") == "manifest":
            await self._remember_files(job)
        await self.store.update(job_id, state="done", finished_at=now(), deleted=deleted)
        log.info("job %s done (%d deleted)", job_id, deleted)


def _item_doc_id(item: ItemRecord) -> str:
    """The doc_id a queue item will get when it has none of its own (the indexer's default for paths/URLs)."""
    if item.get("doc_id"):
        return item["doc_id"]
    if item.get("url"):
        return item["url"]
    file = item.get("file")
    return file.get("path", "") if file else ""


def rates(job: JobRecord) -> tuple[float, float]:
    """(documents/s, bytes/s) since the job started, until it finished (or now)."""
    started = _parse_time(job.get("started_at", ""))
    if started is None:
        return 0.0, 0.0
    finished = _parse_time(job.get("finished_at", "")) or datetime.now(UTC)
    seconds = max((finished - started).total_seconds(), 1.0)
    counts: Mapping[str, Any] = job
    handled = sum(int(counts.get(name, 0)) for name in COUNTERS)
    return handled / seconds, int(job.get("bytes", 0)) / seconds
