"""Title and heading context in each chunk's embedded text (the stored text stays the chunk)."""

from __future__ import annotations

import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_indexer.context import MAX_CONTEXT_CHARS, embedded_text, heading_paths
from ragmesh_store import Query

MARKDOWN = """# Heat pumps

Intro text.

## Installation

### Outdoor unit

Mount it on a wall.

```
# not a heading inside code
```

## Maintenance

Clean the filters.
"""


def test_heading_paths_follow_the_markdown_outline():
    starts = [MARKDOWN.index(s) for s in ("Intro", "Mount", "# not", "Clean", "## Maintenance")]
    assert heading_paths(MARKDOWN, starts) == [
        ["Heat pumps"],
        ["Heat pumps", "Installation", "Outdoor unit"],
        ["Heat pumps", "Installation", "Outdoor unit"],  # the code line is no heading
        ["Heat pumps", "Maintenance"],
        ["Heat pumps", "Installation", "Outdoor unit"],  # a chunk starting at a heading carries it itself
    ]


def test_embedded_text_prefixes_title_and_path_once():
    assert embedded_text("Heat pumps", ["Heat pumps", "Maintenance"], "Clean the filters.") == (
        "Heat pumps — Maintenance\n\nClean the filters."
    )
    assert embedded_text("Manual", ["Setup", "Wiring"], "Red to red.") == "Manual — Setup > Wiring\n\nRed to red."
    assert embedded_text("", [], "Just text.") == "Just text."
    assert embedded_text("Heat pumps", ["Heat pumps"], "# Heat pumps\n\nIntro") == "# Heat pumps\n\nIntro"
    long = embedded_text("T" * 500, [], "chunk")
    assert long.endswith("\n\nchunk") and len(long) <= MAX_CONTEXT_CHARS + len("\n\nchunk")


@pytest.mark.asyncio(loop_scope="session")
async def test_a_chunk_is_found_by_the_words_of_its_title_and_section(mesh_factory):
    mesh = await mesh_factory(indexer={"chunk_tokens": 24})
    filler = " ".join(f"word{i}" for i in range(40))
    text = f"# Tractor manual\n\n{filler}\n\n## Hydraulics\n\nCheck the fluid level weekly."
    other = indexer_pb.DocumentInput(collection="default", doc_id="other", text="Check the oil level weekly too.")
    document = indexer_pb.DocumentInput(collection="default", doc_id="tractor", title="Tractor manual", text=text)
    async for event in mesh.stub("indexer").IngestDocuments(
        indexer_pb.IngestDocumentsRequest(documents=[document, other])
    ):
        assert event.result.status == indexer_pb.INGEST_STATUS_INDEXED
    search = mesh.stub("search")
    reply = await search.Search(
        search_pb.SearchRequest(query="tractor weekly", top_k=1, mode=search_pb.SEARCH_MODE_SPARSE)
    )
    best = reply.results[0]
    assert best.doc_id == "tractor" and best.text.startswith("## Hydraulics")
    # the stored chunk text and the document are unchanged by the context
    document_text = (await search.GetDocument(search_pb.GetDocumentRequest(doc_id="tractor"))).text
    assert document_text == text.strip() and "Tractor manual —" not in best.text


@pytest.mark.asyncio(loop_scope="session")
async def test_embed_context_decides_what_the_stored_vectors_see(mesh_factory):
    filler = " ".join(f"word{i}" for i in range(40))
    text = f"# Tractor manual\n\n{filler}\n\n## Hydraulics\n\nCheck the fluid level weekly."
    title = "Tractor manual"
    hashes = []
    for context in ("title+headings", "none"):
        mesh = await mesh_factory(indexer={"chunk_tokens": 24, "embed_context": context})
        document = indexer_pb.DocumentInput(collection="default", doc_id="tractor", title=title, text=text)
        reply = await mesh.stub("indexer").IngestDocument(indexer_pb.IngestDocumentRequest(document=document))
        assert reply.result.status == indexer_pb.INGEST_STATUS_INDEXED
        chunks = mesh.store.document_chunks("default", "tractor")
        bare = [c.payload["text"] for c in chunks]
        paths = heading_paths(text, [c.payload["start"] for c in chunks])
        with_context = [embedded_text(title, path, t) for t, path in zip(bare, paths, strict=True)]
        assert sum(a != b for a, b in zip(bare, with_context, strict=True)) >= len(chunks) - 1
        stored, other = (with_context, bare) if context == "title+headings" else (bare, with_context)
        embedded = await mesh.stub("embedder").Embed(
            embedder_pb.EmbedRequest(
                texts=stored + other,
                input_type=embedder_pb.INPUT_TYPE_DOCUMENT,
                kinds=[embedder_pb.VECTOR_KIND_DENSE],
            )
        )
        vectors = [list(e.dense) for e in embedded.embeddings]
        for i, chunk in enumerate(chunks):
            [best] = mesh.store.query("default", Query(mode="dense", limit=1, dense=vectors[i]))
            assert best.id == chunk.id and best.score == pytest.approx(1.0, abs=1e-5)
            if stored[i] != other[i]:  # the text this setting does not embed is not what is stored
                [near] = mesh.store.query("default", Query(mode="dense", limit=1, dense=vectors[len(chunks) + i]))
                assert near.id != chunk.id or near.score < 0.99
        # BM25: the section's chunk matches its document's title word only when the context is embedded
        reply = await mesh.stub("search").Search(
            search_pb.SearchRequest(query="tractor", top_k=10, mode=search_pb.SEARCH_MODE_SPARSE)
        )
        found = any(r.text.startswith("## Hydraulics") for r in reply.results)
        assert found == (context == "title+headings")
        hashes.append(mesh.store.document_hash("default", "tractor"))
    assert hashes[0] != hashes[1]  # a changed setting re-embeds the document at its next ingest
