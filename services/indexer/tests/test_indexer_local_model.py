"""The pipeline with the real local embedding model (all-MiniLM-L6-v2): nothing is truncated, and semantic
search finds the right document. Inputs are small: the model embeds ~40 passages/s here."""

from __future__ import annotations

import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_indexer.context import embedded_text, heading_paths
from ragmesh_store import Query

pytestmark = pytest.mark.asyncio(loop_scope="session")

GARDEN = "# Growing tomatoes\n\n" + "\n\n".join(
    f"Tomato plants need {n} hours of sunshine, regular watering at the roots and a stake to climb; pinch out "
    f"side shoots every week and feed them potash once the first trusses of flowers appear in bed {n}."
    for n in range(6, 14)
)
ENGINE = "# Servicing a car engine\n\n" + "\n\n".join(
    f"Drain the old engine oil while it is warm, replace the oil filter and gasket {n}, refill with the grade "
    f"the manufacturer specifies, then check the dipstick level and look for leaks under the sump."
    for n in range(8)
)

NOTES = "# Field notes\n\n" + "\n\n".join(f"Week {n}: light rain, slugs on the lettuce." for n in range(60))


async def test_real_model_embeds_every_chunk_whole_and_search_finds_the_document(mesh_factory, caplog):
    mesh = await mesh_factory(embedder_backend="local", indexer={"chunk_tokens": 256})
    indexer, search, embedder = mesh.stub("indexer"), mesh.stub("search"), mesh.stub("embedder")
    info = await embedder.GetModelInfo(embedder_pb.GetModelInfoRequest())
    assert (info.backend, info.max_sequence_length) == ("local", 256)
    # Short paragraphs pack chunks to the full window; the long title's context must then not push them past
    # what the model embeds (the model would silently drop the chunk's end).
    title = "Field notes from the allotment society, with weekly observations on weather, soil, pests and harvests"
    with caplog.at_level("WARNING", logger="ragmesh_indexer.service"):
        for collection, doc_id, text in (
            ("real", "garden", GARDEN),
            ("real", "engine", ENGINE),
            ("notes", "notes", NOTES),
        ):
            result = (
                await indexer.IngestDocument(
                    pb.IngestDocumentRequest(
                        document=pb.DocumentInput(collection=collection, doc_id=doc_id, text=text, title=title)
                    )
                )
            ).result
            assert result.status == pb.INGEST_STATUS_INDEXED and result.chunks >= 2
    assert not [r for r in caplog.records if "truncated" in r.getMessage()]

    texts = [c.payload["text"] for d in ("garden", "engine") for c in mesh.store.document_chunks("real", d)]
    embedded = await embedder.Embed(
        embedder_pb.EmbedRequest(
            texts=texts, input_type=embedder_pb.INPUT_TYPE_DOCUMENT, kinds=[embedder_pb.VECTOR_KIND_DENSE]
        )
    )
    assert [e.truncated for e in embedded.embeddings] == [False] * len(texts)
    assert all(e.token_count <= 256 for e in embedded.embeddings)
    assert max(e.token_count for e in embedded.embeddings) > 150  # chunks use the window

    for query, expected in (
        ("how do I look after my vegetable garden", "garden"),
        ("motor maintenance and lubrication", "engine"),
    ):
        reply = await search.Search(
            search_pb.SearchRequest(query=query, collections=["real"], mode=search_pb.SEARCH_MODE_DENSE, top_k=1)
        )
        assert reply.results[0].doc_id == expected
    await mesh.stop()


async def test_chunks_reach_the_embedder_as_their_tokens_and_embed_as_their_texts(mesh_factory):
    """The indexer sends each chunk's model tokens (from its chunking), so the embedder does not tokenise it again;
    the vectors are those of the texts: each chunk's embedded text (title and heading context, then the chunk) finds
    that chunk first with a cosine of 1."""
    mesh = await mesh_factory(embedder_backend="local", embedder={"precision": "fp32"}, indexer={"chunk_tokens": 64})
    indexer, embedder = mesh.stub("indexer"), mesh.stub("embedder")
    registry = setup_telemetry("embedder").registry

    def pretokenized() -> float:
        return registry.get_sample_value("ragmesh_embedder_pretokenized_texts_total", {"model": "default"}) or 0.0

    before = pretokenized()
    title = "Allotment handbook"
    text = f"{GARDEN}\n\n## Pests\n\n{NOTES.split(chr(10), 2)[2][:1500]}"
    result = (
        await indexer.IngestDocument(
            pb.IngestDocumentRequest(
                document=pb.DocumentInput(collection="tokens", doc_id="handbook", text=text, title=title)
            )
        )
    ).result
    chunks = mesh.store.document_chunks("tokens", "handbook")
    assert result.chunks == len(chunks) > 5
    assert pretokenized() - before == len(chunks)

    paths = heading_paths(text, [c.payload["start"] for c in chunks])
    embedded = [embedded_text(title, path, c.payload["text"]) for c, path in zip(chunks, paths, strict=True)]
    assert sum(e != c.payload["text"] for e, c in zip(embedded, chunks, strict=True)) >= len(chunks) - 1
    fresh = await embedder.Embed(
        embedder_pb.EmbedRequest(
            texts=embedded, input_type=embedder_pb.INPUT_TYPE_DOCUMENT, kinds=[embedder_pb.VECTOR_KIND_DENSE]
        )
    )
    for chunk, embedding in zip(chunks, fresh.embeddings, strict=True):
        [best] = mesh.store.query("tokens", Query(mode="dense", limit=1, dense=list(embedding.dense)))
        assert best.id == chunk.id and best.score == pytest.approx(1.0, abs=1e-5)
    await mesh.stop()
