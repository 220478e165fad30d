"""One contract for every Store adapter (embedded qdrant-edge and qdrant-client), plus embedded-only tests
(reopen, process ownership, concurrency). Small hand-made 4-d vectors; no model."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import qdrant_edge as qe
from qdrant_client import QdrantClient
from ragmesh_store import (
    KEYWORD_FIELDS,
    ChunkPoint,
    CollectionNotFound,
    EdgeStore,
    Hit,
    HybridEvidence,
    Query,
    SearchDefaults,
    Sparse,
    Store,
    StoreBusyError,
    StoreError,
    StoreSettings,
    open_store,
)
from ragmesh_store._common import path_prefixes
from ragmesh_store.client import QdrantClientStore

# Local mode warns that payload indexes have no effect there (the adapter still creates them, for servers);
# a client for an unreachable URL warns that it could not check the server's version.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning"),
    pytest.mark.filterwarnings("ignore:Failed to obtain server version:UserWarning"),
]
DIM = 4
NS = uuid.UUID("5b7e2a10-0000-4000-8000-000000000000")


# gamma's chunks have UUID ids, as every chunk had before point ids became numbers: a collection may hold both, and
# each test over the corpus reads, scores, fetches and deletes both kinds.
UUID_IDS = {"gamma"}


def point_id(doc_id: str, chunk_index: int) -> str:
    """A decimal number under 2^63, the kind of id the indexer makes (its own hash: a library's tests know no
    service), or for a doc in UUID_IDS a UUID."""
    named = uuid.uuid5(NS, f"{doc_id}:{chunk_index}")
    return str(named) if doc_id in UUID_IDS else str(named.int >> 65)


def chunk(
    doc_id: str, chunk_index: int, dense: list[float], terms: list[int], weight: float = 1.0, **payload
) -> ChunkPoint:
    metadata = payload.pop("metadata", {})
    return ChunkPoint(
        id=point_id(doc_id, chunk_index),
        dense=dense,
        sparse=Sparse(terms, [weight] * len(terms)),
        payload={
            "doc_id": doc_id,
            "chunk_index": chunk_index,
            "text": f"{doc_id} chunk {chunk_index}",
            "source": "text",
            "content_hash": f"hash-{doc_id}",
            "metadata": metadata,
            **payload,
        },
    )


# alpha and gamma are source files (path, its folders, language); beta is not.
ALPHA_FILE = {"path": "src/a/alpha.py", "path_prefixes": path_prefixes("src/a/alpha.py"), "language": "python"}
GAMMA_FILE = {"path": "src/b/gamma.go", "path_prefixes": path_prefixes("src/b/gamma.go"), "language": "go"}
# alpha: 2 chunks near axis 0, terms 1-2; beta: 1 chunk on axis 1, term 3; gamma: 3 chunks near axis 2, term 4.
CORPUS = [
    chunk(
        "alpha",
        0,
        [1, 0, 0, 0],
        [1, 2],
        metadata={"lang": "en", "year": 2020, "draft": False, "ratio": 0.5},
        **ALPHA_FILE,
    ),
    chunk(
        "alpha",
        1,
        [0.9, 0.1, 0, 0],
        [1],
        metadata={"lang": "en", "year": 2020, "draft": False, "ratio": 0.5},
        **ALPHA_FILE,
    ),
    chunk("beta", 0, [0, 1, 0, 0], [3], source="url", metadata={"lang": "de", "year": 2021, "draft": True}),
    chunk("gamma", 0, [0, 0, 1, 0], [4, 5], metadata={"lang": "fr", "team.name": "core"}, **GAMMA_FILE),
    chunk("gamma", 1, [0, 0, 0.9, 0.1], [4], metadata={"lang": "fr", "team.name": "core"}, **GAMMA_FILE),
    chunk("gamma", 2, [0, 0.1, 0.9, 0], [4, 6], metadata={"lang": "fr", "team.name": "core"}, **GAMMA_FILE),
]


ADAPTERS = ["edge", "client"]


def open_adapter(kind: str, path: Path) -> Store:
    if kind == "edge":
        return EdgeStore(path, DIM)
    return QdrantClientStore(QdrantClient(":memory:"), DIM, prefix="test_")


@pytest.fixture(params=ADAPTERS)
def store(request, tmp_path: Path) -> Iterator[Store]:
    opened = open_adapter(request.param, tmp_path / "data")
    yield opened
    opened.close()


@pytest.fixture
def corpus(store: Store) -> Store:
    store.ensure_collection("docs")
    store.upsert("docs", CORPUS)
    return store


@pytest.fixture(scope="module", params=ADAPTERS)
def readonly(request, tmp_path_factory) -> Iterator[Store]:
    """The corpus, shared by the tests that only read (building it costs a few flushes)."""
    opened = open_adapter(request.param, tmp_path_factory.mktemp("readonly"))
    opened.ensure_collection("docs")
    opened.upsert("docs", CORPUS)
    yield opened
    opened.close()


def dense_query(vector: list[float], limit: int = 10, **kw) -> Query:
    return Query(mode="dense", limit=limit, dense=vector, **kw)


def ids_of(hits) -> list[tuple[str, int]]:
    return [(h.payload["doc_id"], h.payload["chunk_index"]) for h in hits]


# --- collections -------------------------------------------------------------------------------------------
def test_collection_lifecycle(store: Store) -> None:
    assert not store.collection_exists("docs")
    assert store.ensure_collection("docs") is True
    assert store.ensure_collection("docs") is False
    store.ensure_collection("archive")
    assert store.collection_exists("docs")
    assert store.list_collections() == ["archive", "docs"]

    store.upsert("docs", CORPUS[:3])
    assert store.delete_collection("docs") == 3
    assert not store.collection_exists("docs")
    assert store.list_collections() == ["archive"]
    # A re-created collection starts empty.
    store.ensure_collection("docs")
    assert store.stats("docs").chunks == 0


MISSING_CALLS = {
    "delete_collection": lambda s: s.delete_collection("nope"),
    "upsert": lambda s: s.upsert("nope", CORPUS[:1]),
    "upsert_nothing": lambda s: s.upsert("nope", []),
    "delete_points": lambda s: s.delete_points("nope", [point_id("alpha", 0)]),
    "clear_points": lambda s: s.clear_points("nope"),
    "delete_document": lambda s: s.delete_document("nope", "alpha"),
    "document_chunks": lambda s: s.document_chunks("nope", "alpha"),
    "document_chunk_ids": lambda s: s.document_chunk_ids("nope", "alpha"),
    "document_hash": lambda s: s.document_hash("nope", "alpha"),
    "query": lambda s: s.query("nope", dense_query([1, 0, 0, 0])),
    "stats": lambda s: s.stats("nope"),
}


@pytest.mark.parametrize("call", MISSING_CALLS.values(), ids=MISSING_CALLS.keys())
def test_missing_collection_raises_collection_not_found(store: Store, call) -> None:
    store.ensure_collection("docs")
    with pytest.raises(CollectionNotFound) as info:
        call(store)
    assert info.value.name == "nope"
    assert "nope" in str(info.value)


@pytest.mark.parametrize("name", ["", "../escape", "UPPER", "a/b", "x" * 64])
def test_invalid_collection_names_are_refused(store: Store, name: str) -> None:
    with pytest.raises(ValueError, match="invalid collection name"):
        store.ensure_collection(name)
    with pytest.raises(ValueError, match="invalid collection name"):
        store.stats(name)
    assert store.list_collections() == []


@pytest.mark.parametrize(
    "query",
    [
        dense_query([1, 0, 0, 0], filters={"metadata.lang": []}),
        dense_query([1, 0, 0, 0], filters={"metadata.lang": {"nested": 1}}),
        Query(mode="dense", limit=3, sparse=Sparse([1], [1.0])),
        Query(mode="sparse", limit=3, dense=[1, 0, 0, 0]),
        Query(mode="hybrid", limit=3, dense=[1, 0, 0, 0]),
    ],
    ids=["empty-any-of", "nested-value", "dense-without-vector", "sparse-without-vector", "hybrid-without-sparse"],
)
def test_malformed_queries_are_value_errors(readonly: Store, query: Query) -> None:
    with pytest.raises(ValueError):
        readonly.query("docs", query)


def test_wrong_dimension_is_a_store_error(store: Store) -> None:
    store.ensure_collection("docs")
    with pytest.raises(StoreError):
        store.upsert("docs", [chunk("bad", 0, [1, 0, 0], [1])])
    assert store.stats("docs").chunks == 0


# --- queries -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (dense_query([0, 1, 0, 0]), ("beta", 0)),
        (Query(mode="sparse", limit=10, sparse=Sparse([5], [1.0])), ("gamma", 0)),
        (Query(mode="sparse", limit=10, sparse=Sparse([2], [1.0])), ("alpha", 0)),
        (Query(mode="hybrid", limit=10, dense=[0, 0.1, 0.9, 0], sparse=Sparse([6], [1.0])), ("gamma", 2)),
    ],
    ids=["dense", "sparse", "sparse-2", "hybrid"],
)
def test_query_finds_the_right_point_first(readonly: Store, query: Query, expected) -> None:
    hits = readonly.query("docs", query)
    assert ids_of(hits)[0] == expected
    assert hits[0].id == point_id(*expected)
    assert hits[0].payload["text"] == f"{expected[0]} chunk {expected[1]}"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_sparse_query_returns_only_points_with_the_terms(readonly: Store) -> None:
    hits = readonly.query("docs", Query(mode="sparse", limit=10, sparse=Sparse([4], [1.0])))
    assert sorted(ids_of(hits)) == [("gamma", 0), ("gamma", 1), ("gamma", 2)]


def test_limit_is_respected(readonly: Store) -> None:
    assert len(readonly.query("docs", dense_query([1, 0, 0, 0], limit=2))) == 2
    hybrid = Query(mode="hybrid", limit=3, dense=[1, 0, 0, 0], sparse=Sparse([4], [1.0]), prefetch_limit=2)
    assert len(readonly.query("docs", hybrid)) == 3


@pytest.mark.parametrize(
    ("filters", "expected_docs"),
    [
        ({"source": "url"}, {"beta"}),
        ({"doc_id": "gamma"}, {"gamma"}),
        ({"doc_id": ["alpha", "beta"]}, {"alpha", "beta"}),
        ({"metadata.lang": "fr"}, {"gamma"}),
        ({"metadata.lang": ["de", "fr", "xx"]}, {"beta", "gamma"}),
        ({"metadata.year": 2020}, {"alpha"}),
        ({"metadata.year": [2021, 1999]}, {"beta"}),
        ({"metadata.draft": True}, {"beta"}),
        ({"metadata.draft": False}, {"alpha"}),
        ({"metadata.ratio": 0.5}, {"alpha"}),
        ({"metadata.team.name": "core"}, {"gamma"}),
        ({"metadata.lang": "en", "source": "url"}, set()),
        ({"metadata.lang": "xx"}, set()),
        ({"metadata.unknown_key": "x"}, set()),
        ({"language": "python"}, {"alpha"}),
        ({"language": ["go", "rust"]}, {"gamma"}),
        ({"path": "src/b/gamma.go"}, {"gamma"}),
        ({"path_prefix": "src"}, {"alpha", "gamma"}),
        ({"path_prefix": "src/a/"}, {"alpha"}),
        ({"path_prefix": "./src/b"}, {"gamma"}),
        ({"path_prefix": "src/b/gamma.go"}, {"gamma"}),
        ({"path_prefix": "sr"}, set()),
        ({"path_prefix": "src/a", "language": "go"}, set()),
    ],
)
def test_filters(readonly: Store, filters, expected_docs) -> None:
    hits = readonly.query("docs", dense_query([0.5, 0.5, 0.5, 0.5], filters=filters))
    assert {h.payload["doc_id"] for h in hits} == expected_docs


@pytest.mark.parametrize("mode", ["sparse", "hybrid"])
def test_filters_apply_in_every_mode(readonly: Store, mode) -> None:
    query = Query(
        mode=mode, limit=10, dense=[1, 0, 0, 0], sparse=Sparse([1, 3], [1.0, 1.0]), filters={"metadata.lang": "de"}
    )
    assert ids_of(readonly.query("docs", query)) == [("beta", 0)]


def test_path_prefixes_are_the_folders_then_the_path() -> None:
    assert path_prefixes("a/b/c.py") == ["a", "a/b", "a/b/c.py"]
    assert path_prefixes("./top.md") == ["top.md"]


def test_list_documents_gives_one_row_per_document(readonly: Store) -> None:
    rows = readonly.list_documents("docs", {}, ["content_hash", "path"])
    assert rows == [
        {"doc_id": "alpha", "content_hash": "hash-alpha", "path": "src/a/alpha.py"},
        {"doc_id": "beta", "content_hash": "hash-beta", "path": None},
        {"doc_id": "gamma", "content_hash": "hash-gamma", "path": "src/b/gamma.go"},
    ]
    assert [r["doc_id"] for r in readonly.list_documents("docs", {"path_prefix": "src"}, [])] == ["alpha", "gamma"]
    assert readonly.list_documents("docs", {"doc_id": "nope"}, ["title"]) == []


def test_list_documents_of_a_missing_collection(store: Store) -> None:
    with pytest.raises(CollectionNotFound):
        store.list_documents("absent", {}, [])


def test_score_threshold(readonly: Store) -> None:
    hits = readonly.query("docs", dense_query([1, 0, 0, 0], score_threshold=0.95))
    assert ids_of(hits) == [("alpha", 0), ("alpha", 1)]
    assert all(h.score >= 0.95 for h in hits)
    assert readonly.query("docs", dense_query([0, 0, 0, 1], score_threshold=0.5)) == []


@pytest.mark.parametrize("mode", ["dense", "sparse"])
def test_equal_scores_are_ordered_by_doc_id_on_every_call(store: Store, mode) -> None:
    store.ensure_collection("ties")
    # Eight chunks with identical vectors; a limit of 3 cuts inside the group of equal scores.
    docs = ["d7", "d3", "d5", "d1", "d6", "d2", "d4", "d0"]
    store.upsert("ties", [chunk(doc, 0, [1, 1, 0, 0], [9]) for doc in docs])
    query = Query(mode=mode, limit=3, dense=[1, 1, 0, 0], sparse=Sparse([9], [1.0]))
    results = [ids_of(store.query("ties", query)) for _ in range(5)]
    assert results[0] == [("d0", 0), ("d1", 0), ("d2", 0)]
    assert all(r == results[0] for r in results)


def test_equal_fused_scores_are_ordered_by_doc_id_on_every_call(store: Store) -> None:
    store.ensure_collection("ties")
    # "zulu" is first by dense and second by sparse, "alpha" the other way round: equal RRF scores.
    store.upsert(
        "ties",
        [
            chunk("zulu", 0, [1, 0, 0, 0], [8], weight=0.5),
            chunk("alpha", 0, [0.9, 0.1, 0, 0], [8], weight=1.0),
            chunk("other", 0, [0, 0, 1, 0], [7]),
        ],
    )
    query = Query(mode="hybrid", limit=1, dense=[1, 0, 0, 0], sparse=Sparse([8], [1.0]))
    results = [corpus_ids for corpus_ids in (ids_of(store.query("ties", query)) for _ in range(5))]
    assert results == [[("alpha", 0)]] * 5
    both = store.query("ties", Query(mode="hybrid", limit=3, dense=[1, 0, 0, 0], sparse=Sparse([8], [1.0])))
    assert ids_of(both)[:2] == [("alpha", 0), ("zulu", 0)]
    assert both[0].score == both[1].score > both[2].score


# --- writes ------------------------------------------------------------------------------------------------
def test_upsert_is_idempotent_and_replaces_by_id(corpus: Store) -> None:
    corpus.upsert("docs", CORPUS)
    assert corpus.stats("docs").chunks == len(CORPUS)
    changed = chunk("beta", 0, [0, 1, 0, 0], [3], source="url", title="new title")
    corpus.upsert("docs", [changed])
    assert corpus.stats("docs").chunks == len(CORPUS)
    assert corpus.document_chunks("docs", "beta")[0].payload["title"] == "new title"


def test_delete_document_returns_count_and_keeps_other_documents(corpus: Store) -> None:
    assert corpus.delete_document("docs", "gamma") == 3
    assert corpus.document_chunks("docs", "gamma") == []
    assert corpus.delete_document("docs", "gamma") == 0
    assert corpus.delete_document("docs", "never-stored") == 0
    assert corpus.stats("docs").chunks == 3
    assert {h.payload["doc_id"] for h in corpus.query("docs", dense_query([0, 0, 1, 0]))} == {"alpha", "beta"}


def test_delete_points(corpus: Store) -> None:
    corpus.delete_points("docs", [point_id("gamma", 1), point_id("gamma", 2), point_id("nobody", 0)])
    assert ids_of(corpus.document_chunks("docs", "gamma")) == [("gamma", 0)]
    corpus.delete_points("docs", [])
    assert corpus.stats("docs").chunks == 4


def test_clear_points_empties_the_collection_and_keeps_it_with_its_records(corpus: Store) -> None:
    corpus.set_collection_record("docs", "golden_set", {"queries": ["q"]})
    corpus.set_search_defaults("docs", SearchDefaults(fusion="dbsf", rrf_k=7))
    assert corpus.clear_points("docs") == 6
    assert corpus.collection_exists("docs") and corpus.list_collections() == ["docs"]
    assert (corpus.stats("docs").documents, corpus.stats("docs").chunks) == (0, 0)
    assert corpus.query("docs", dense_query([1, 0, 0, 0])) == [] and corpus.document_chunks("docs", "alpha") == []
    assert corpus.collection_record("docs", "golden_set") == {"queries": ["q"]}
    assert corpus.search_defaults("docs") == SearchDefaults(fusion="dbsf", rrf_k=7)
    assert corpus.clear_points("docs") == 0  # an empty collection: nothing to do
    corpus.upsert("docs", CORPUS[:2])  # still usable
    assert ids_of(corpus.document_chunks("docs", "alpha")) == [("alpha", 0), ("alpha", 1)]


def test_versions_of_a_collection_are_collections_of_their_own_that_are_not_listed(store: Store) -> None:
    store.ensure_collection("docs")
    assert store.ensure_collection("docs.v2") is True
    store.upsert("docs.v2", CORPUS[:3])
    assert store.collection_exists("docs.v2") and store.stats("docs.v2").chunks == 3
    assert store.stats("docs").chunks == 0  # apart from the collection itself
    assert store.list_collections() == ["docs"]
    assert store.clear_points("docs.v2") == 3 and store.delete_collection("docs.v2") == 0
    assert not store.collection_exists("docs.v2") and store.collection_exists("docs")
    for name in ("docs.v0", "docs.v", "Docs.v2", "docs.v2.v3", "../x.v2"):
        with pytest.raises(ValueError, match="invalid collection name"):
            store.ensure_collection(name)


# --- documents ---------------------------------------------------------------------------------------------
def test_document_chunks_are_ordered_by_chunk_index(store: Store) -> None:
    store.ensure_collection("docs")
    # Inserted out of order, 12 chunks so that a string sort ("10" < "2") would show.
    store.upsert("docs", [chunk("long", i, [1, 0, 0, i / 12], [i + 1]) for i in (5, 11, 0, 10, 2, 1, 9, 3, 8, 4, 7, 6)])
    store.upsert("docs", CORPUS)
    hits = store.document_chunks("docs", "long")
    assert [h.payload["chunk_index"] for h in hits] == list(range(12))
    assert [h.id for h in hits] == [point_id("long", i) for i in range(12)]
    assert all(h.score == 0 for h in hits)
    assert store.document_chunks("docs", "unknown") == []


def test_numeric_and_uuid_point_ids_come_back_as_they_were_stored(readonly: Store) -> None:
    hits = readonly.query("docs", dense_query([1, 1, 1, 1]))
    assert {h.id for h in hits} == {p.id for p in CORPUS}
    numeric = {h.id for h in hits if h.payload["doc_id"] not in UUID_IDS}
    assert len(numeric) == 3 and all(i.isdigit() for i in numeric)
    assert all(uuid.UUID(h.id) and len(h.id) == 36 for h in hits if h.payload["doc_id"] in UUID_IDS)
    hybrid = readonly.query(
        "docs", Query(mode="hybrid", limit=10, dense=[1, 1, 1, 1], sparse=Sparse([1, 4], [1, 1]), prefetch_limit=10)
    )
    assert {h.id for h in hybrid} == {p.id for p in CORPUS}  # the dense list reads every chunk


def test_document_chunk_ids(readonly: Store) -> None:
    assert sorted(readonly.document_chunk_ids("docs", "gamma")) == sorted(point_id("gamma", i) for i in range(3))
    assert readonly.document_chunk_ids("docs", "unknown") == []


def test_document_hash(readonly: Store) -> None:
    assert readonly.document_hash("docs", "beta") == "hash-beta"
    assert readonly.document_hash("docs", "unknown") is None


def test_stats_counts_documents_and_chunks(corpus: Store) -> None:
    stats = corpus.stats("docs")
    assert (stats.name, stats.documents, stats.chunks) == ("docs", 3, 6)
    corpus.delete_document("docs", "alpha")
    assert (corpus.stats("docs").documents, corpus.stats("docs").chunks) == (2, 4)


# --- concurrency ----------------------------------------------------------------------------------------
def test_readers_and_writer_threads_share_one_store(store: Store) -> None:
    store.ensure_collection("docs")
    store.upsert("docs", CORPUS)
    errors: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        try:
            for batch in range(10):
                store.upsert("docs", [chunk(f"w{batch}", i, [0, 0, 0, 1], [7]) for i in range(5)])
            store.delete_document("docs", "w0")
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                store.query("docs", Query(mode="hybrid", limit=5, dense=[0, 0, 0, 1], sparse=Sparse([7], [1.0])))
                store.stats("docs")
                store.document_chunks("docs", "alpha")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    stats = store.stats("docs")
    assert (stats.documents, stats.chunks) == (3 + 9, len(CORPUS) + 9 * 5)


# --- settings ------------------------------------------------------------------------------------------------
def test_settings_from_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGMESH_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("QDRANT_COLLECTION_PREFIX", "prod_")
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret")
    monkeypatch.setenv("QDRANT_SHARD_NUMBER", "3")
    settings = StoreSettings()
    assert settings.data_dir == tmp_path / "d"
    assert settings.qdrant_url is None
    assert settings.collection_prefix == "prod_"
    assert settings.shard_number == 3
    assert "s3cret" not in repr(settings)
    assert settings.qdrant_api_key is not None and settings.qdrant_api_key.get_secret_value() == "s3cret"


def test_open_store_without_url_is_the_embedded_store(tmp_path: Path) -> None:
    store = open_store(StoreSettings(RAGMESH_DATA_DIR=tmp_path), DIM)
    try:
        assert isinstance(store, EdgeStore)
        assert store.dimension == DIM
    finally:
        store.close()


# --- qdrant-client store only ----------------------------------------------------------------------------
def test_client_prefix_separates_deployments() -> None:
    client = QdrantClient(":memory:")
    prod, staging = QdrantClientStore(client, DIM, prefix="prod_"), QdrantClientStore(client, DIM, prefix="stg_")
    try:
        prod.ensure_collection("docs")
        staging.ensure_collection("docs")
        staging.ensure_collection("other")
        prod.upsert("docs", CORPUS)
        assert sorted(c.name for c in client.get_collections().collections) == ["prod_docs", "stg_docs", "stg_other"]
        assert prod.list_collections() == ["docs"]
        assert staging.list_collections() == ["docs", "other"]
        assert (prod.stats("docs").chunks, staging.stats("docs").chunks) == (len(CORPUS), 0)
        assert not prod.collection_exists("other")
    finally:
        prod.close()


def test_open_store_with_url_is_the_client_store() -> None:
    settings = StoreSettings(QDRANT_URL="http://qdrant.invalid:6333", QDRANT_COLLECTION_PREFIX="p_")
    store = open_store(settings, DIM)
    try:
        assert isinstance(store, QdrantClientStore)
        assert (store.prefix, store.dimension) == ("p_", DIM)
    finally:
        store.close()


# --- embedded store only -------------------------------------------------------------------------------------
@pytest.fixture
def edge(tmp_path: Path) -> Iterator[EdgeStore]:
    store = EdgeStore(tmp_path / "data", DIM)
    yield store
    store.close()


def test_edge_data_survives_close_and_reopen(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data", DIM)
    store.ensure_collection("docs")
    store.upsert("docs", CORPUS)
    store.close()

    reopened = EdgeStore(tmp_path / "data", DIM)
    try:
        assert reopened.list_collections() == ["docs"]
        assert reopened.stats("docs").chunks == len(CORPUS)
        assert reopened.document_hash("docs", "alpha") == "hash-alpha"
        hits = reopened.query("docs", dense_query([0, 1, 0, 0], filters={"metadata.draft": True}))
        assert ids_of(hits) == [("beta", 0)]
    finally:
        reopened.close()


@pytest.mark.parametrize("flush_interval", [0.0, 60.0])
def test_edge_flushes_written_segments(tmp_path: Path, flush_interval: float) -> None:
    """Writes are flushed before they return (0) or by the background flusher / on close (60 s)."""
    store = EdgeStore(tmp_path / "data", DIM, flush_interval=flush_interval)
    try:
        store.ensure_collection("docs")
        store.upsert("docs", CORPUS)
        collection = store._get("docs")
        assert (collection._synced == collection._writes) is (flush_interval == 0)
        store.flush()
        assert collection._synced == collection._writes
    finally:
        store.close()


@pytest.mark.e2e  # a second process
def test_edge_acknowledged_writes_survive_a_killed_process(tmp_path: Path) -> None:
    result = _run_python(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store_contract import CORPUS
        from ragmesh_store import EdgeStore
        store = EdgeStore({str(tmp_path / "data")!r}, 4)
        store.ensure_collection("docs")
        store.upsert("docs", CORPUS)
        store.delete_document("docs", "beta")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert result.returncode == -9, result.stderr
    store = EdgeStore(tmp_path / "data", DIM)  # the dead process's lock is gone too
    try:
        assert (store.stats("docs").documents, store.stats("docs").chunks) == (2, len(CORPUS) - 1)
    finally:
        store.close()


def test_edge_reopen_with_another_dimension_is_a_store_error(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data", DIM)
    store.ensure_collection("docs")
    store.close()
    other = EdgeStore(tmp_path / "data", 8)
    try:
        with pytest.raises(StoreError, match="vector size"):
            other.stats("docs")
    finally:
        other.close()


def test_edge_creates_payload_indexes_for_filtered_fields(edge: EdgeStore) -> None:
    """Filters without a payload index scan every point (85 ms vs 0.26 ms at 100k): check they exist."""
    edge.ensure_collection("docs")
    edge.upsert("docs", CORPUS)
    edge.close()
    shard = qe.EdgeShard.load(str(edge.data_dir / "collections" / "docs"))
    try:
        schema = {field: info.data_type for field, info in shard.info().payload_schema.items()}
    finally:
        shard.close()
    keyword, integer = qe.PayloadSchemaType.Keyword, qe.PayloadSchemaType.Integer
    assert all(schema[f] == keyword for f in KEYWORD_FIELDS)
    assert schema["chunk_index"] == integer
    assert schema["metadata.lang"] == keyword
    assert schema["metadata.year"] == integer
    assert schema["metadata.draft"] == qe.PayloadSchemaType.Bool
    assert schema["metadata.ratio"] == qe.PayloadSchemaType.Float
    assert schema['metadata."team.name"'] == keyword


def test_edge_delete_collection_removes_its_directory(edge: EdgeStore) -> None:
    edge.ensure_collection("docs")
    edge.upsert("docs", CORPUS)
    path = edge.data_dir / "collections" / "docs"
    assert path.is_dir()
    edge.delete_collection("docs")
    assert list((edge.data_dir / "collections").iterdir()) == []


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.e2e  # a second process
def test_edge_second_process_gets_store_busy_error(edge: EdgeStore) -> None:
    result = _run_python(
        f"""
        from ragmesh_store import EdgeStore, StoreBusyError
        try:
            EdgeStore({str(edge.data_dir)!r}, 4)
        except StoreBusyError as exc:
            print(exc)
        else:
            print("OPENED")
        """
    )
    message = result.stdout.strip()
    assert message.startswith(
        f"the embedded store at RAGMESH_DATA_DIR={edge.data_dir} is already open in another process"
    )
    assert f"(pid {os.getpid()})" in message
    assert "ragmesh serve indexer search" in message and "QDRANT_URL" in message


@pytest.mark.e2e  # a second process
def test_edge_lock_is_released_on_close(tmp_path: Path) -> None:
    EdgeStore(tmp_path / "data", DIM).close()
    result = _run_python(
        f"""
        from ragmesh_store import EdgeStore
        store = EdgeStore({str(tmp_path / "data")!r}, 4)
        print(store.list_collections())
        store.close()
        """
    )
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.e2e  # a second process
def test_edge_shard_held_by_a_foreign_process_is_store_busy(edge: EdgeStore) -> None:
    """Someone opened a shard without our lock file (an older version, a script): its WAL lock wins."""
    edge.ensure_collection("docs")
    edge.close()
    path = edge.data_dir / "collections" / "docs"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import qdrant_edge, sys; s = qdrant_edge.EdgeShard.load({str(path)!r}); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store = EdgeStore(edge.data_dir, DIM)
        try:
            with pytest.raises(StoreBusyError, match="already open in another process"):
                store.stats("docs")
        finally:
            store.close()
    finally:
        holder.communicate(input="", timeout=60)


def test_search_defaults_persist_with_the_collection(store: Store, tmp_path: Path) -> None:
    store.ensure_collection("docs")
    assert store.search_defaults("docs") == SearchDefaults()
    store.set_search_defaults("docs", SearchDefaults(fusion="dbsf", rrf_k=20))
    assert store.search_defaults("docs") == SearchDefaults(fusion="dbsf", rrf_k=20)
    with pytest.raises(CollectionNotFound):
        store.search_defaults("missing")
    with pytest.raises(CollectionNotFound):
        store.set_search_defaults("missing", SearchDefaults(fusion="rrf"))
    store.delete_collection("docs")
    store.ensure_collection("docs")  # a new collection of the same name starts without them
    assert store.search_defaults("docs") == SearchDefaults()


def test_edge_search_defaults_survive_a_reopen(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data", DIM)
    store.ensure_collection("docs")
    store.set_search_defaults("docs", SearchDefaults(fusion="rrf", rrf_k=7))
    store.close()
    store = EdgeStore(tmp_path / "data", DIM)
    try:
        assert store.search_defaults("docs") == SearchDefaults(fusion="rrf", rrf_k=7)
        assert store.stats("docs").chunks == 0  # the shard still loads with the file beside it
    finally:
        store.close()


GOLDEN = {"queries": [{"query_id": "q1", "text": "alpha things", "relevant": {"alpha": 2, "beta": 0}}]}


def test_collection_records_are_kept_with_the_collection(store: Store) -> None:
    store.ensure_collection("docs")
    assert store.collection_record("docs", "golden_set") is None
    store.set_collection_record("docs", "golden_set", GOLDEN)
    store.set_collection_record("docs", "evaluations", {"runs": [{"ndcg_at_10": 0.5}]})
    assert store.collection_record("docs", "golden_set") == GOLDEN
    store.set_search_defaults("docs", SearchDefaults(fusion="rrf"))  # records and defaults do not touch each other
    assert store.collection_record("docs", "evaluations") == {"runs": [{"ndcg_at_10": 0.5}]}
    store.set_collection_record("docs", "evaluations", {"runs": []})  # replaced whole
    assert store.collection_record("docs", "evaluations") == {"runs": []}
    assert store.search_defaults("docs") == SearchDefaults(fusion="rrf")
    store.set_collection_record("docs", "golden_set", None)  # None removes it
    assert store.collection_record("docs", "golden_set") is None
    assert store.collection_record("docs", "evaluations") == {"runs": []}


def test_a_collection_record_read_is_the_callers_own_copy(store: Store) -> None:
    store.ensure_collection("docs")
    store.set_collection_record("docs", "golden_set", GOLDEN)
    first = store.collection_record("docs", "golden_set")
    first["queries"].clear()  # a caller editing what it read changes nothing stored
    assert store.collection_record("docs", "golden_set") == GOLDEN


def test_edge_collection_records_survive_close_and_reopen(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data", DIM)
    store.ensure_collection("docs")
    store.set_collection_record("docs", "golden_set", GOLDEN)
    assert store.collection_record("docs", "golden_set") == GOLDEN  # read (and kept) before it changes
    store.set_collection_record("docs", "golden_set", {"queries": []})
    store.set_collection_record("docs", "evaluations", {"runs": [1]})
    store.set_collection_record("docs", "evaluations", None)
    assert store.collection_record("docs", "golden_set") == {"queries": []}
    store.close()

    reopened = EdgeStore(tmp_path / "data", DIM)
    try:  # what the first instance answered from memory is what it wrote to disk
        assert reopened.collection_record("docs", "golden_set") == {"queries": []}
        assert reopened.collection_record("docs", "evaluations") is None
    finally:
        reopened.close()


def test_collection_records_go_with_the_collection_and_refuse_bad_keys(store: Store) -> None:
    with pytest.raises(CollectionNotFound):
        store.collection_record("missing", "golden_set")
    with pytest.raises(CollectionNotFound):
        store.set_collection_record("missing", "golden_set", GOLDEN)
    store.ensure_collection("docs")
    for key in ("", "Golden", "../x", "golden-set", "a" * 64):
        with pytest.raises(ValueError):
            store.set_collection_record("docs", key, GOLDEN)
    store.set_collection_record("docs", "golden_set", GOLDEN)
    store.delete_collection("docs")
    store.ensure_collection("docs")  # a new collection of the same name starts without it
    assert store.collection_record("docs", "golden_set") is None


@pytest.mark.parametrize("kind", ADAPTERS)
def test_collection_records_survive_a_reopen(kind: str, tmp_path: Path) -> None:
    def reopen() -> Store:  # the embedded store, or qdrant-client's local mode on disk
        if kind == "edge":
            return EdgeStore(tmp_path / "data", DIM)
        return QdrantClientStore(QdrantClient(path=str(tmp_path / "local")), DIM, prefix="test_")

    store = reopen()
    store.ensure_collection("docs")
    store.set_collection_record("docs", "golden_set", GOLDEN)
    store.close()
    store = reopen()
    try:
        assert store.collection_record("docs", "golden_set") == GOLDEN
        assert store.stats("docs").chunks == 0
    finally:
        store.close()


@pytest.mark.parametrize("fusion", ["rrf", "dbsf", "relative_score"])
def test_hybrid_fusions_and_rrf_weights(corpus: Store, fusion: str) -> None:
    query = Query(mode="hybrid", limit=3, dense=[1, 0, 0, 0], sparse=Sparse([4], [1.0]), fusion=fusion)
    hits = corpus.query("docs", query)
    assert hits and [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    dense_only = Query(mode="hybrid", limit=3, dense=[1, 0, 0, 0], sparse=Sparse([4], [1.0]), rrf_weights=(1.0, 0.0))
    assert ids_of(corpus.query("docs", dense_only))[:1] == ids_of(corpus.query("docs", dense_query([1, 0, 0, 0])))[:1]


def test_relative_score_fusion_is_a_weighted_sum_of_min_max_normalised_scores(corpus: Store) -> None:
    dense, sparse = [1, 0, 0, 0], Sparse([4], [1.0])
    fused = corpus.query(
        "docs", Query(mode="hybrid", limit=3, dense=dense, sparse=sparse, fusion="relative_score", dense_weight=1.0)
    )
    assert ids_of(fused) == ids_of(corpus.query("docs", dense_query(dense, limit=3)))  # all weight on dense
    assert fused[0].score == pytest.approx(1.0) and all(0.0 <= h.score <= 1.0 for h in fused)


def test_hybrid_evidence_scores_every_candidate_by_both_vectors_and_gives_each_terms_idf(corpus: Store) -> None:
    import math

    dense, sparse = [1.0, 0.0, 0.0, 0.0], Sparse([4, 99], [1.0, 1.0])  # term 99 is in no chunk
    query = Query(mode="hybrid", limit=2, dense=dense, sparse=sparse, prefetch_limit=3)
    evidence = corpus.hybrid_evidence("docs", query, vectors_of=2)
    # Each list as its own query would give it (prefetch_limit deep; without payloads, so ties go by point id).
    assert [h.id for h in evidence.dense][:2] == [h.id for h in corpus.query("docs", dense_query(dense, limit=2))]
    sparse_hits = corpus.query("docs", Query(mode="sparse", limit=3, sparse=sparse))
    assert {h.id for h in evidence.sparse} == {h.id for h in sparse_hits}
    assert len(evidence.dense) == 3 and all(h.payload == {} for h in evidence.dense + evidence.sparse)
    # Every candidate has its cosine; BM25 scores exist for exactly the candidates that hold a query term.
    candidates = {h.id for h in evidence.dense + evidence.sparse}
    assert set(evidence.dense_scores) == candidates
    by_id = {p.id: p for p in CORPUS}
    assert set(evidence.sparse_scores) == {i for i in candidates if 4 in by_id[i].sparse.indices}
    for hit in evidence.sparse:
        assert evidence.sparse_scores[hit.id] == pytest.approx(hit.score, rel=1e-5)
    gamma2 = point_id("gamma", 2)  # a sparse candidate: its cosine with the query, computed by the engine
    assert evidence.dense_scores[gamma2] == pytest.approx(0.0, abs=1e-6)
    assert evidence.dense_scores[point_id("alpha", 0)] == pytest.approx(1.0, abs=1e-6)
    # Qdrant's IDF: ln(1 + (N - n + 0.5) / (n + 0.5)); term 4 is in 3 of 6 chunks, term 99 in none.
    assert evidence.term_idf[4] == pytest.approx(math.log(1 + 3.5 / 3.5), rel=1e-4)
    assert evidence.term_idf[99] == pytest.approx(math.log(1 + 6.5 / 0.5), rel=1e-4)
    # The dense vectors of the top chunks of each list, for feedback.
    assert point_id("alpha", 0) in evidence.vectors and len(evidence.vectors[point_id("alpha", 0)]) == DIM


def test_hybrid_evidence_keeps_equal_scores_in_id_order(readonly: Store) -> None:
    """Only gamma1 points along the query; the other five chunks tie at cosine 0, and the list keeps the one with
    the smallest id, whatever order the engine read them in."""
    query = Query(mode="hybrid", limit=2, dense=[0.0, 0.0, 0.0, 1.0], sparse=Sparse([4], [1.0]), prefetch_limit=2)
    evidence = readonly.hybrid_evidence("docs", query)
    tied = sorted(point_id(d, i) for d, i in [("alpha", 0), ("alpha", 1), ("beta", 0), ("gamma", 0), ("gamma", 2)])
    assert [h.id for h in evidence.dense] == [point_id("gamma", 1), tied[0]]
    assert [h.score for h in evidence.dense][1] == pytest.approx(0.0, abs=1e-6)


def test_hybrid_evidence_vectors_are_the_stored_ones_of_the_top_chunks_of_each_list(readonly: Store) -> None:
    """The feedback vectors of the best chunk of each list (alpha0, a numeric id, by cosine; a gamma chunk, a UUID
    id, among those with the best BM25 score): each the stored vector (unit length, as cosine stores
    it); a chunk not read is not there."""
    query = Query(mode="hybrid", limit=1, dense=[1.0, 0.0, 0.0, 0.0], sparse=Sparse([4], [1.0]), prefetch_limit=1)
    evidence = readonly.hybrid_evidence("docs", query, vectors_of=1)
    alpha0 = point_id("alpha", 0)
    top = set(evidence.vectors)
    (gamma,) = top - {alpha0}
    assert alpha0 in top and len(top) == len(evidence.vectors) == 2
    assert gamma in {point_id("gamma", i) for i in range(3)} and uuid.UUID(gamma)
    stored = {p.id: p.dense for p in CORPUS}
    for point in top:
        unit = [x / math.sqrt(sum(v * v for v in stored[point])) for x in stored[point]]
        assert list(evidence.vectors[point]) == pytest.approx(unit, abs=1e-6)
    beta0 = point_id("beta", 0)
    assert beta0 not in evidence.vectors and evidence.vectors.get(beta0) is None
    with pytest.raises(KeyError):
        evidence.vectors[beta0]


def test_hybrid_evidence_applies_filters_to_the_candidates_but_not_to_the_idf(corpus: Store) -> None:
    query = Query(
        mode="hybrid", limit=3, dense=[1.0, 0, 0, 0], sparse=Sparse([4], [1.0]), filters={"metadata.lang": "en"}
    )
    evidence = corpus.hybrid_evidence("docs", query)
    assert {h.id for h in evidence.dense + evidence.sparse} == {point_id("alpha", 0), point_id("alpha", 1)}
    assert evidence.sparse == [] and evidence.vectors == {}
    assert evidence.term_idf[4] == pytest.approx(0.6931, rel=1e-3)  # corpus-wide: 3 of 6 chunks


def test_hybrid_evidence_for_a_moved_dense_vector_reusing_the_sparse_side_equals_a_fresh_call(corpus: Store) -> None:
    """Pseudo-relevance feedback moves only the dense vector: the second call, given the first's evidence, gives
    what a call of its own would (the lists are cut at 2, so the dense candidates change)."""
    sparse = Sparse([4, 99], [1.0, 1.0])
    first = corpus.hybrid_evidence(
        "docs", Query(mode="hybrid", limit=2, dense=[1.0, 0, 0, 0], sparse=sparse, prefetch_limit=2)
    )
    moved = Query(mode="hybrid", limit=2, dense=[0.0, 1.0, 0.2, 0.0], sparse=sparse, prefetch_limit=2)
    fresh = corpus.hybrid_evidence("docs", moved)
    reused = corpus.hybrid_evidence("docs", moved, same_sparse_as=first)
    assert {h.id for h in fresh.dense} == {point_id("beta", 0), point_id("gamma", 2)}  # not first's candidates
    assert (reused.dense, reused.sparse) == (fresh.dense, fresh.sparse)
    assert reused.dense_scores == pytest.approx(fresh.dense_scores, abs=1e-6)
    assert reused.sparse_scores == pytest.approx(fresh.sparse_scores, rel=1e-5)
    assert reused.term_idf == pytest.approx(fresh.term_idf, rel=1e-5)


def test_hybrid_evidence_reusing_the_sparse_side_searches_only_the_dense_list(corpus: Store) -> None:
    """The sparse list, the BM25 scores and the IDFs given come back as given (these are not the collection's:
    proof that nothing was searched or probed again), and the dense side is read as usual."""
    sparse = Sparse([4, 99], [1.0, 1.0])
    query = Query(mode="hybrid", limit=2, dense=[0.0, 1.0, 0.2, 0.0], sparse=sparse, prefetch_limit=2)
    gamma0, beta0 = point_id("gamma", 0), point_id("beta", 0)
    planted = HybridEvidence(
        dense=[Hit(beta0, 1.0, {})],
        sparse=[Hit(gamma0, 9.0, {})],
        dense_scores={},
        sparse_scores={gamma0: 9.0},
        term_idf={4: 1.25, 99: 7.5},
    )
    again = corpus.hybrid_evidence("docs", query, same_sparse_as=planted)
    assert again.sparse == planted.sparse and again.term_idf == planted.term_idf
    assert again.sparse_scores[gamma0] == 9.0
    fresh = corpus.hybrid_evidence("docs", query)
    assert again.dense == fresh.dense
    candidates = {h.id for h in again.dense} | {gamma0}
    assert set(again.dense_scores) == candidates
    assert again.dense_scores == pytest.approx({i: fresh.dense_scores.get(i, 0.0) for i in candidates}, abs=1e-6)
    # gamma 2 is a new dense candidate: its BM25 score read by id; beta 0 holds no query term, so it has none.
    assert again.sparse_scores[point_id("gamma", 2)] == pytest.approx(
        fresh.sparse_scores[point_id("gamma", 2)], rel=1e-5
    )
    assert beta0 not in again.sparse_scores


def test_payloads_by_id(corpus: Store) -> None:
    wanted = [
        point_id("beta", 0),
        point_id("alpha", 1),
        point_id("gamma", 2),
        "00000000-0000-4000-8000-000000000000",
        "12345",
    ]
    payloads = corpus.payloads("docs", wanted)
    assert set(payloads) == set(wanted[:3])  # an unknown id is left out
    assert (payloads[wanted[0]]["doc_id"], payloads[wanted[1]]["chunk_index"]) == ("beta", 1)
    assert payloads[wanted[2]]["doc_id"] == "gamma"
    assert corpus.payloads("docs", []) == {}
    with pytest.raises(CollectionNotFound):
        corpus.payloads("nope", wanted)
