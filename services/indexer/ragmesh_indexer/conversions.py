"""Proto <-> domain conversions at the indexer's gRPC boundary: requests as the domain's types (`DocumentIn`,
`JobSource`, `ReindexOptions`, `SearchDefaults`) and the domain's results and records (`IngestOutcome`,
`JobRecord`, `DatasourceRecord`) as messages. The servicer calls these and nothing else maps a message;
`tests/test_indexer_conversions.py` checks that every field of every message built or read here is mapped
(or listed there as not mapped, with the reason)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf import json_format
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_common.walk import SkippedFile
from ragmesh_store import SearchDefaults

from .entity_files import EntityFile
from .entity_ingest import IngestReport
from .jobs import JobSource, ManifestSource, rates
from .manifests import ManifestEntry, ManifestIn, Plan
from .model import DatasourceRecord, DocumentIn, FileIn, IngestOutcome, JobRecord
from .reindex import ReindexOptions

log = logging.getLogger(__name__)
DOMAIN = "indexer.ragmesh"
STATUS = {"indexed": pb.INGEST_STATUS_INDEXED, "unchanged": pb.INGEST_STATUS_UNCHANGED}
JOB_STATES = {
    "queued": pb.JOB_STATE_QUEUED,
    "running": pb.JOB_STATE_RUNNING,
    "done": pb.JOB_STATE_DONE,
    "failed": pb.JOB_STATE_FAILED,
    "cancelled": pb.JOB_STATE_CANCELLED,
    "rejected": pb.JOB_STATE_REJECTED,
}


# --- requests -> domain ---------------------------------------------------------------------------------------
def document(message: pb.DocumentInput) -> DocumentIn:
    content = message.WhichOneof("content")
    file = message.file
    return DocumentIn(
        collection=message.collection,
        doc_id=message.doc_id,
        title=message.title,
        metadata=validation.flat_metadata(message.metadata, field="document.metadata"),
        text=message.text if content == "text" else None,
        file=FileIn(file.data, file.filename, file.mime_type, file.path) if content == "file" else None,
        url=message.url if content == "url" else None,
        datasource=message.datasource_id,
        fresh_until=message.fresh_until,
    )


def entity_input(message: pb.EntityInput) -> dict[str, Any]:
    """An EntityInput as the plain dict `entities.build` takes (what a JSON Lines file holds)."""
    return {
        "type": message.type,
        "primary_key": list(message.primary_key),
        "properties": json_format.MessageToDict(message.properties),
        "labels": list(message.labels),
        "alternative_keys": list(message.alternative_keys),
        "relations": [{"type": r.type, "target_id": r.target_id} for r in message.relations],
    }


def entity_file(message: pb.FileInput) -> EntityFile:
    """A file of entities."""
    return EntityFile(message.data, message.filename, message.mime_type, message.path)


def job_source(request: pb.CreateJobRequest) -> JobSource:
    """What a new job ingests: the request's `source` case (none: an empty JobSource, which `create` refuses)."""
    which = request.WhichOneof("source")
    if which == "urls":
        return JobSource(urls=list(request.urls.urls))
    if which == "documents":
        return JobSource(documents=[document(d) for d in request.documents.documents])
    if which == "archive":
        return JobSource(archive=request.archive.data, archive_name=request.archive.filename)
    if which == "folder":
        return JobSource(folder=request.folder)
    if which == "manifest_upload":
        upload = request.manifest_upload
        return JobSource(
            manifest=ManifestSource(
                manifest=manifest(upload.manifest),
                archive=upload.archive.data,
                archive_name=upload.archive.filename,
                skipped=[SkippedFile(s.path, s.reason) for s in upload.skipped_files],
                partial=upload.partial,
            )
        )
    return JobSource()


def manifest(message: pb.Manifest) -> ManifestIn:
    """A manifest as sent (Jobs validates it)."""
    return ManifestIn(
        host=message.host,
        folder=message.folder,
        entries=[ManifestEntry(e.path, e.sha256, e.size) for e in message.entries],
    )


def planned_upload(datasource_id: str, plan: Plan) -> pb.PlanUploadResponse:
    return pb.PlanUploadResponse(
        datasource_id=datasource_id,
        upload_paths=plan.upload,
        delete_paths=plan.delete,
        unchanged=len(plan.unchanged),
    )


def reindex_options(request: pb.ReindexCollectionRequest) -> ReindexOptions:
    """Settings left unset keep the current version's (None)."""
    return ReindexOptions(
        chunk_tokens=request.chunk_tokens if request.HasField("chunk_tokens") else None,
        chunk_overlap_tokens=(request.chunk_overlap_tokens if request.HasField("chunk_overlap_tokens") else None),
        model=request.model,
        tolerance=request.tolerance if request.HasField("tolerance") else None,
        force=request.force,
        retention_seconds=request.retention_seconds if request.HasField("retention_seconds") else None,
    )


def search_defaults(request: pb.CreateCollectionRequest) -> SearchDefaults:
    fusion = search_pb.Fusion.Name(request.default_fusion).removeprefix("FUSION_").lower()
    return SearchDefaults(
        fusion=fusion if request.default_fusion else None,  # type: ignore[arg-type]
        rrf_k=request.default_rrf_k if request.HasField("default_rrf_k") else None,
    )


# --- domain -> responses ----------------------------------------------------------------------------------------
def created_collection(name: str, created: bool, current: SearchDefaults) -> pb.CreateCollectionResponse:
    return pb.CreateCollectionResponse(
        name=name,
        created=created,
        default_fusion=f"FUSION_{current.fusion.upper()}" if current.fusion else search_pb.FUSION_UNSPECIFIED,
        default_rrf_k=current.rrf_k or 0,
    )


def result(outcome: IngestOutcome) -> pb.IngestResult:
    return pb.IngestResult(
        status=STATUS[outcome.status],
        doc_id=outcome.doc_id,
        chunks=outcome.chunks,
        collection=outcome.collection,
        title=outcome.title,
        mime_type=outcome.mime_type,
        url=outcome.url,
        content_hash=outcome.content_hash,
    )


def error(exc: Exception) -> pb.IngestError:
    """A document's failure; anything but a RagmeshError is logged and sent as INTERNAL_ERROR."""
    if not isinstance(exc, RagmeshError):
        log.error("ingest failed unexpectedly", exc_info=exc)
        exc = RagmeshError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
    exc.with_domain(DOMAIN)
    return pb.IngestError(
        code=exc.code.name, reason=exc.reason, domain=exc.domain, message=exc.message, metadata=dict(exc.metadata)
    )


def job_message(job: JobRecord, *, details: bool = True) -> pb.Job:
    """A job record (jobs.Jobs) as the Job message; without `details`, no errors or skipped files."""
    per_second, bytes_per_second = rates(job)
    message = pb.Job(
        job_id=job["job_id"],
        collection=job["collection"],
        state=JOB_STATES.get(job["state"], pb.JOB_STATE_UNSPECIFIED),
        kind=job.get("kind", ""),
        source=job.get("source", ""),
        total=job.get("total", 0),
        indexed=job.get("indexed", 0),
        unchanged=job.get("unchanged", 0),
        failed=job.get("failed", 0),
        skipped=job.get("skipped", 0),
        deleted=job.get("deleted", 0),
        bytes=job.get("bytes", 0),
        created_at=job.get("created_at", ""),
        started_at=job.get("started_at", ""),
        finished_at=job.get("finished_at", ""),
        documents_per_second=per_second,
        bytes_per_second=bytes_per_second,
        datasource_id=job.get("datasource_id", ""),
        error=job.get("error", ""),
        prune=job.get("prune", False),
    )
    if job.get("reindex"):
        json_format.ParseDict(dict(job["reindex"]), message.reindex, ignore_unknown_fields=True)
    if details:
        message.errors.extend(
            pb.JobDocumentError(document=e["document"], error=pb.IngestError(**e["error"]))
            for e in job.get("errors", [])
        )
        message.skipped_files.extend(pb.SkippedFile(path=p, reason=r) for p, r in job.get("skipped_files", []))
    return message


def datasource(ds: DatasourceRecord) -> pb.Datasource:
    return pb.Datasource(
        datasource_id=ds["datasource_id"],
        collection=ds["collection"],
        kind=ds["kind"],
        folder=ds.get("folder", ""),
        host=ds.get("host", ""),
        urls=ds.get("urls", []),
        prune=ds.get("prune", False),
        fresh_for_seconds=ds.get("fresh_for_seconds", 0),
        fresh_until=ds.get("fresh_until", ""),
        last_job_id=ds.get("last_job_id", ""),
        last_synced_at=ds.get("last_synced_at", ""),
        due=ds.get("due", False),
    )


def expired_document(row: Mapping[str, Any]) -> pb.ExpiredDocument:
    """A store row (doc_id, fresh_until, datasource) of a document past its fresh_until."""
    return pb.ExpiredDocument(
        doc_id=row["doc_id"], fresh_until=row["fresh_until"], datasource_id=row["datasource"] or ""
    )


def ingested_entities(report: IngestReport) -> pb.IngestEntitiesResponse:
    return pb.IngestEntitiesResponse(
        entities=len(report.entity_ids),
        relations=sum(report.relation_types.values()),
        entity_types=dict(report.entity_types),
        relation_types=dict(report.relation_types),
        entity_ids=report.entity_ids,
        dangling_relations=report.dangling,
        omitted_properties=report.omitted,
    )
