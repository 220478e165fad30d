"""Versioned-collection test helpers: write documents straight into one physical version of a collection (as a
re-index leaves them), embedded by the test mesh's real embedder."""

from __future__ import annotations

import uuid

from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh_common.vectors import dense_rows
from ragmesh_store import ChunkPoint, Sparse
from ragmesh_store.versions import IndexSettings, Version, Versions


async def put_documents(mesh, physical: str, docs: dict[str, str], title: str, model: str = "") -> None:
    """One chunk per document (doc_id -> text, each titled `title`) in the store collection `physical` (created
    if missing: `name` for version 1, `name.v<n>` above), embedded by the mesh's embedder model `model`."""
    mesh.store.ensure_collection(physical)
    response = await mesh.stub("embedder").Embed(
        embedder_pb.EmbedRequest(
            texts=list(docs.values()),
            input_type=embedder_pb.INPUT_TYPE_DOCUMENT,
            model=model,
            kinds=[embedder_pb.VECTOR_KIND_DENSE, embedder_pb.VECTOR_KIND_SPARSE],
        )
    )
    mesh.store.upsert(
        physical,
        [
            ChunkPoint(
                id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}:0")),
                dense=dense,
                sparse=Sparse(list(e.sparse.indices), list(e.sparse.values)),
                payload={
                    "doc_id": doc_id,
                    "chunk_index": 0,
                    "text": text,
                    "title": title,
                    "content_hash": f"{title}-{doc_id}",
                },
            )
            for (doc_id, text), dense, e in zip(docs.items(), dense_rows(response), response.embeddings, strict=True)
        ],
    )


def two_versions(name: str, active: int, settings: IndexSettings, job_id: str = "job-reindex-1") -> Versions:
    """The versions record of a collection re-indexed once into version 2 (built with `settings` by job
    `job_id`): version 2 being built while version 1 is active, or active with version 1 kept for a rollback."""
    return Versions(
        name,
        active,
        (
            Version(
                1,
                "active" if active == 1 else "previous",
                None,
                "2026-11-01T00:00:00+00:00",
                "" if active == 1 else "2026-12-01T00:00:00+00:00",
            ),
            Version(2, "building" if active == 1 else "active", settings, "2026-11-20T00:00:00+00:00", job_id=job_id),
        ),
        next_version=3,
        recorded=True,
    )
