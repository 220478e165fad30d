"""Chunking with the real tokenizer, and documents rebuilt from their chunks through the search service."""

from __future__ import annotations

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_indexer.chunking import Chunker
from ragmesh_indexer.config import IndexerSettings
from ragmesh_indexer.service import point_id
from tokenizers import Tokenizer

pytestmark = pytest.mark.asyncio(loop_scope="session")
WORDS = "river stone mountain quickly electricity photosynthesis antidisestablishmentarianism über 東京 42.5%".split()


def long_markdown() -> str:
    sections = []
    for s in range(6):
        body = "\n\n".join(
            " ".join(WORDS[(s * 7 + p * 3 + w) % len(WORDS)] for w in range(40 + 25 * p)) for p in range(4)
        )
        sections.append(f"## Section {s}\n\n{body}")
    return "# Handbook\n\nIntro.\n\n" + "\n\n".join(sections) + "\n\n```python\n# not a heading\nx = 1\n```\n"


@pytest.fixture(scope="module")
def chunker_factory():
    path = IndexerSettings().tokenizer_path
    return lambda tokens, overlap=0: Chunker(path, tokens, overlap)


def rebuild(chunks) -> str:
    """The document from its chunks alone, as the chunking module documents it."""
    out, end = "", None
    for c in chunks:
        if end is None:
            out = c.text
        elif c.start < end:
            out += c.text[end - c.start :]
        else:
            out += c.separator + c.text
        end = max(end or 0, c.start + len(c.text))
    return out


@pytest.mark.parametrize(("tokens", "overlap"), [(200, 0), (64, 0), (64, 20), (32, 8)])
@pytest.mark.parametrize("repetitive", [False, True])
async def test_chunks_fit_the_window_and_rebuild_the_document(chunker_factory, tokens, overlap, repetitive):
    if repetitive:  # the same words over and over: every chunk's text occurs at many offsets
        text = "# Log\n\n" + "error retry ok. " * 300 + "\n\n" + "ab " * 400
    else:
        text = long_markdown() + "\n" + "x" * 2000  # a "word" far longer than any chunk
    chunker = chunker_factory(tokens, overlap)
    chunks = chunker.split(text, max_sequence_length=256)
    assert rebuild(chunks) == text.strip()
    assert all(a.start < b.start for a, b in zip(chunks, chunks[1:], strict=False))
    assert all(c.tokens <= tokens for c in chunks)
    assert all(chunker.count_tokens(c.text) == c.tokens for c in chunks)
    assert max(c.tokens for c in chunks) > tokens * 0.8  # chunks are filled, not tiny
    for c in chunks:
        assert text[c.start : c.start + len(c.text)] == c.text
    if not repetitive:
        assert sum(c.text.count("x" * 50) for c in chunks) >= 2000 // 50 - 2  # the long word is kept, in pieces


async def test_token_counts_are_the_model_tokenizers_own(chunker_factory):
    """The chunker counts with the tokenizer's batch call that skips character offsets: the counts are those of a
    full `encode` (what decides whether the model would cut a chunk), for any text."""
    tokenizer = Tokenizer.from_file(str(IndexerSettings().tokenizer_path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    chunker = chunker_factory(200)
    texts = [
        long_markdown(),
        " ".join(WORDS) * 40,
        "naïve café Ünïcödé 東京タワー 서울 🙂 — “quotes” x²",
        "x" * 3000,
        "  ",
    ]
    for text in texts:
        assert chunker.count_tokens(text) == len(tokenizer.encode(text).ids)
        assert chunker.count_tokens(text) - chunker.count_tokens("") == len(
            tokenizer.encode(text, add_special_tokens=False).ids
        )
        assert list(chunker.token_ids(text)) == tokenizer.encode(text).ids


@pytest.mark.parametrize(("tokens", "overlap"), [(200, 0), (64, 20)])
async def test_each_chunk_carries_the_model_tokens_it_is_embedded_as(chunker_factory, tokens, overlap):
    """The ids the indexer sends the embedder (so that it does not tokenise the chunk again) are exactly what the
    model's tokenizer makes of the chunk's text, special tokens included, overlapped chunks and cut words too."""
    tokenizer = Tokenizer.from_file(str(IndexerSettings().tokenizer_path / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    chunks = chunker_factory(tokens, overlap).split(long_markdown() + "\n" + "x" * 2000, max_sequence_length=256)
    assert len(chunks) > 5
    for chunk in chunks:
        assert list(chunk.token_ids) == tokenizer.encode(chunk.text).ids
        assert len(chunk.token_ids) == chunk.tokens


async def test_chunk_size_is_capped_by_the_model_window(chunker_factory):
    chunks = chunker_factory(200).split(long_markdown(), max_sequence_length=32)
    assert all(c.tokens <= 32 for c in chunks) and len(chunks) > 20


async def test_headings_start_sections_and_stay_in_the_text(chunker_factory):
    chunks = chunker_factory(200).split(long_markdown(), max_sequence_length=256)
    starts = [c.text.split("\n", 1)[0] for c in chunks]
    assert [f"## Section {s}" in starts for s in range(6)] == [True] * 6
    assert not any(c.text.startswith("# not a heading") for c in chunks)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "  \n\t\n",
        "one line",
        "  indented first line\n\nA second paragraph.\n\n",
        "windows\r\nline ends\r\n",
        "Setext title\n============\n\ntext under it",
        "\u00a0no-break spaces\u2003around\u00a0",
        "a\n\n\n\nb",
    ],
)
async def test_a_document_without_a_hash_sign_is_one_section_as_the_markdown_splitter_says(chunker_factory, text):
    """The shortcut for documents that cannot hold a heading gives the splitter's own sections."""
    chunker = chunker_factory(200)
    assert chunker._sections(text) == chunker._markdown_sections(text)


async def test_source_code_is_split_by_its_syntax(chunker_factory):
    code = "\n\n".join(
        f"def f{i}(x):\n    # compute {i}\n    return x * {i} + " + " + ".join(["x"] * 30) for i in range(12)
    )
    chunker = chunker_factory(64)
    chunks = chunker.split(code, max_sequence_length=256, filename="module.py")
    assert sum(c.text.startswith("def f") for c in chunks) >= 10
    assert chunker.fingerprint(256, "module.py") != chunker.fingerprint(256, "notes.md")


async def test_point_ids_are_deterministic_positive_63_bit_numbers():
    assert point_id("doc", 0) == point_id("doc", 0) != point_id("doc", 1) != point_id("doc2", 1)
    ids = [int(point_id(f"doc-{d}", i)) for d in range(1000) for i in range(10)]
    assert len(set(ids)) == len(ids) and all(0 <= i < 2**63 for i in ids)
    assert max(ids) > 2**62  # the whole range is used, not a few bits of it
    assert point_id("doc", 0) == str(int(point_id("doc", 0)))  # plain decimal


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def overlap_mesh(mesh_factory):
    return await mesh_factory(indexer={"chunk_tokens": 48, "chunk_overlap_tokens": 16})


async def test_get_document_rebuilds_overlapping_chunks_exactly(overlap_mesh):
    text = "# Notes\n\n" + " ".join(f"w{i}" for i in range(400)) + "\n\nEnd  line.\n\n\n   last paragraph"
    result = (
        await overlap_mesh.stub("indexer").IngestDocument(
            pb.IngestDocumentRequest(document=pb.DocumentInput(collection="ovl", doc_id="n", text=text))
        )
    ).result
    chunks = overlap_mesh.store.document_chunks("ovl", "n")
    overlapping = sum(
        b.payload["start"] < a.payload["start"] + len(a.payload["text"])
        for a, b in zip(chunks, chunks[1:], strict=False)
    )
    assert overlapping >= 3  # the overlap setting is in effect
    document = await overlap_mesh.stub("search").GetDocument(search_pb.GetDocumentRequest(collection="ovl", doc_id="n"))
    assert len(document.chunks) == result.chunks
    assert document.text == text
