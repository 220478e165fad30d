"""The indexer's conversions (`ragmesh_indexer.conversions`) carry every field: each field of a request reaches the
domain type, each field of a response message is set from the domain, and each key of a stored record (jobs,
datasources) reaches its message, unless listed below with the reason. A field added to a proto or a record fails
here until it is mapped or listed."""

from __future__ import annotations

import typing
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.errors import RagmeshError
from ragmesh_indexer import conversions
from ragmesh_indexer.entity_ingest import IngestReport
from ragmesh_indexer.manifests import Plan
from ragmesh_indexer.model import DatasourceRecord, IngestOutcome, JobRecord, ReindexRecord
from ragmesh_store import SearchDefaults

from tests.support.messages import filled, oneof_cases, unread, unread_keys, unset

# Request fields the conversions leave to the servicer, and why.
NOT_READ = {
    "CreateJobRequest.collection": "the servicer passes it to Jobs.create beside the source",
    "CreateJobRequest.prune": "the servicer passes it to Jobs.create beside the source",
    "CreateJobRequest.fresh_for_seconds": "the servicer passes it to Jobs.create beside the source",
    "ReindexCollectionRequest.collection": "the servicer passes it to Jobs.reindex beside the options",
    "CreateCollectionRequest.name": "the servicer passes it to Indexer.create_collection beside the defaults",
}
# Record keys no message carries, and why.
RECORD_ONLY = {
    "folder": "where a folder job's workers read its files (the job's `source` shows it)",
    "doc_ids": "what a pruning run saw, read when the job ends",
    "manifest": "a manifest job's file hashes, saved on its datasource when the job ends",
    "partial": "whether a manifest job adds its hashes to its datasource's or replaces them",
}
DATASOURCE_ONLY = {"files": "a manifest datasource's file hashes, compared by PlanUpload, never sent"}

REQUESTS: dict[type[Message], Callable[[Any], Any]] = {
    pb.DocumentInput: conversions.document,
    pb.CreateJobRequest: conversions.job_source,
    pb.Manifest: conversions.manifest,
    pb.ReindexCollectionRequest: conversions.reindex_options,
    pb.CreateCollectionRequest: conversions.search_defaults,
    pb.EntityInput: conversions.entity_input,
    pb.FileInput: conversions.entity_file,
}
CASES = [(cls, case) for cls in REQUESTS for case in oneof_cases(cls)]


@pytest.mark.parametrize(("cls", "oneofs"), CASES, ids=[f"{c.__name__}{''.join(o.values())}" for c, o in CASES])
def test_every_field_of_a_request_reaches_the_domain(cls: type[Message], oneofs: dict[str, str]) -> None:
    dropped = unread(filled(cls, oneofs=oneofs), REQUESTS[cls])
    assert dropped <= NOT_READ.keys(), f"{cls.__name__}: not read: {sorted(dropped - NOT_READ.keys())}"


def test_not_read_lists_only_fields_that_are_dropped() -> None:
    dropped = set().union(*(unread(filled(cls, oneofs=case), REQUESTS[cls]) for cls, case in CASES))
    assert NOT_READ.keys() <= dropped, f"read after all: {sorted(NOT_READ.keys() - dropped)}"


def _json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


EVALUATION = _json(filled(search_pb.Evaluation))
REINDEX: ReindexRecord = {
    "from_version": 1,
    "to_version": 2,
    "settings": _json(filled(search_pb.IndexSettings)),
    "tolerance": 0.05,
    "force": True,
    "retention_seconds": 60,
    "decision": "forced",
    "current": EVALUATION,
    "candidate": EVALUATION,
}
JOB: JobRecord = {
    "job_id": "job-1",
    "collection": "kb",
    "state": "rejected",
    "created_at": "2026-11-28T10:00:00.000+00:00",
    "kind": "reindex",
    "source": "version 1 -> 2",
    "folder": "/data/docs",
    "prune": True,
    "datasource_id": "ds-1",
    "doc_ids": ["a"],
    "manifest": {"a.md": "0" * 64},
    "partial": False,
    "skipped_files": [["secrets.env", "SECRET"]],
    "skipped": 1,
    "total": 10,
    "reindex": REINDEX,
    "started_at": "2026-11-28T10:00:01.000+00:00",
    "finished_at": "2026-11-28T10:00:11.000+00:00",
    "error": "REINDEX_ABANDONED: gone",
    "deleted": 1,
    "indexed": 2,
    "unchanged": 3,
    "failed": 4,
    "bytes": 1000,
    "errors": [
        {
            "document": "a.md",
            "error": {
                "code": "NOT_FOUND",
                "reason": "FILE_NOT_FOUND",
                "domain": "d",
                "message": "m",
                "metadata": {"k": "v"},
            },
        }
    ],
}
DATASOURCE: DatasourceRecord = {
    "datasource_id": "ds-1",
    "collection": "kb",
    "kind": "folder",
    "folder": "/data/docs",
    "host": "laptop",
    "files": {"a.md": "0" * 64},
    "urls": ["https://example.com/"],
    "prune": True,
    "fresh_for_seconds": 60,
    "fresh_until": "2026-11-28T10:01:00+00:00",
    "last_job_id": "job-1",
    "last_synced_at": "2026-11-28T10:00:00.000+00:00",
    "due": True,
}


@pytest.mark.parametrize(
    ("record", "kind"), [(JOB, JobRecord), (REINDEX, ReindexRecord), (DATASOURCE, DatasourceRecord)]
)
def test_the_records_here_have_every_key(record: dict[str, Any], kind: type) -> None:
    assert record.keys() == typing.get_type_hints(kind).keys()


def test_a_job_record_reaches_its_message() -> None:
    message = conversions.job_message(JOB)
    assert unset(message) == set()
    assert unread_keys(JOB, conversions.job_message) == RECORD_ONLY.keys()
    # The re-index fields are parsed by name: every one must be a ReindexInfo field.
    assert REINDEX.keys() <= set(pb.ReindexInfo.DESCRIPTOR.fields_by_name)
    assert unset(conversions.job_message(JOB, details=False)) == {"Job.errors", "Job.skipped_files"}


def test_a_datasource_record_reaches_its_message() -> None:
    assert unset(conversions.datasource(DATASOURCE)) == set()
    assert unread_keys(DATASOURCE, conversions.datasource) == DATASOURCE_ONLY.keys()


def test_results_set_every_field_of_their_messages() -> None:
    outcome = IngestOutcome("unchanged", "doc-1", 3, "kb", "Title", "text/markdown", "https://example.com/", "hash")
    assert unset(conversions.result(outcome)) == set()
    error = RagmeshError(grpc.StatusCode.NOT_FOUND, "FILE_NOT_FOUND", "gone", "files.ragmesh", {"path": "a.md"})
    assert unset(conversions.error(error)) == set()
    row = {"doc_id": "doc-1", "fresh_until": "2026-11-28T10:01:00+00:00", "datasource": "ds-1"}
    assert unset(conversions.expired_document(row)) == set()
    created = conversions.created_collection("kb", True, SearchDefaults(fusion="rrf", rrf_k=60))
    assert unset(created) == set()
    report = IngestReport(
        entity_ids=["Order/1"],
        entity_types=Counter({"Order": 1}),
        relation_types=Counter({"PLACED_BY": 1}),
        dangling=["Order/1 -[PLACED_BY]-> Customer/7"],
        omitted=["Order/1#note"],
    )
    assert unset(conversions.ingested_entities(report)) == set()
    assert (
        unset(conversions.planned_upload("ds-1", Plan(upload=["a.md"], delete=["b.md"], unchanged=["c.md"]))) == set()
    )


def test_a_record_with_only_the_required_keys_still_converts() -> None:
    """What an older indexer stored (keys it did not write are NotRequired) reads as the defaults."""
    job = conversions.job_message({"job_id": "job-0", "collection": "kb", "state": "done"})
    assert unset(job) == {f"Job.{f.name}" for f in pb.Job.DESCRIPTOR.fields} - {
        "Job.job_id",
        "Job.collection",
        "Job.state",
    }
    datasource = conversions.datasource({"datasource_id": "ds-0", "collection": "kb", "kind": "urls"})
    assert unset(datasource) == {f"Datasource.{f.name}" for f in pb.Datasource.DESCRIPTOR.fields} - {
        "Datasource.datasource_id",
        "Datasource.collection",
        "Datasource.kind",
    }
