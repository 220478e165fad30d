"""Messages as the CLI writes them: the enum names it prints and the JSON it puts on stdout for scripts (shaped as
the REST API writes the same things). `cli/tests/test_cli_conversions.py` checks that every field of the messages
read here is written, or listed there as left out, with the reason."""

from __future__ import annotations

from typing import Any

from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb

METRICS = (("ndcg_at_10", "nDCG@10"), ("recall_at_10", "recall@10"), ("mrr_at_10", "MRR@10"))
MODES = {name.removeprefix("SEARCH_MODE_").lower(): value for name, value in search_pb.SearchMode.items() if value}
MODE_NAMES = {value: name for name, value in MODES.items()}
STATE_NAMES = {
    indexer_pb.JOB_STATE_QUEUED: "queued",
    indexer_pb.JOB_STATE_RUNNING: "running",
    indexer_pb.JOB_STATE_DONE: "done",
    indexer_pb.JOB_STATE_FAILED: "failed",
    indexer_pb.JOB_STATE_CANCELLED: "cancelled",
    indexer_pb.JOB_STATE_REJECTED: "rejected",
}


def evaluation_json(e: search_pb.Evaluation) -> dict[str, Any]:
    return {
        "mode": MODE_NAMES.get(e.mode, "?"),
        "evaluated_at": e.evaluated_at,
        "queries": e.queries,
        **{name: round(getattr(e, name), 6) for name, _ in METRICS},
        "documents": e.documents,
        "chunks": e.chunks,
        "model": e.model,
        "golden_set_id": e.golden_set_id,
        "took_ms": e.took_ms,
    }


def settings_json(s: search_pb.IndexSettings) -> dict[str, Any]:
    return {
        "model": s.model,
        "model_id": s.model_id,
        "dimension": s.dimension,
        "sparse_model_id": s.sparse_model_id,
        "chunk_tokens": s.chunk_tokens,
        "chunk_overlap_tokens": s.chunk_overlap_tokens,
        "chunker_fingerprint": s.chunker_fingerprint,
    }


def reindex_json(job: indexer_pb.Job) -> dict[str, Any]:
    """The job's state and its re-index fields, as the REST API writes them."""
    r = job.reindex
    return {
        "job_id": job.job_id,
        "collection": job.collection,
        "state": STATE_NAMES.get(job.state, "?"),
        "total": job.total,
        "indexed": job.indexed,
        "failed": job.failed,
        "error": job.error,
        "from_version": r.from_version,
        "to_version": r.to_version,
        "settings": settings_json(r.settings),
        "tolerance": r.tolerance,
        "force": r.force,
        "retention_seconds": r.retention_seconds,
        "decision": r.decision or None,
        "current": {**evaluation_json(r.current), "version": r.current.version} if r.HasField("current") else None,
        "candidate": (
            {**evaluation_json(r.candidate), "version": r.candidate.version} if r.HasField("candidate") else None
        ),
    }


def rollback_json(reply: indexer_pb.RollbackCollectionResponse) -> dict[str, Any]:
    return {"collection": reply.collection, "version": reply.version, "replaced_version": reply.replaced_version}
