"""`ragmesh eval`'s metrics against values computed by hand, and the BEIR loader's reject paths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from ragmesh_cli import evaluation
from ragmesh_cli.evaluation import (
    Dataset,
    SearchSpec,
    load_dataset,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    recall_at_k,
    score_run,
)

GRADES = {"a": 3, "b": 1, "c": 2, "z": 0}


def test_ndcg_uses_graded_gain_and_log2_discount():
    # ranked: x(0) a(3) c(2): DCG = 0 + 3/log2(3) + 2/log2(4) = 1.8928 + 1 ; ideal a c b: 3 + 2/log2(3) + 1/2
    dcg = 3 / math.log2(3) + 2 / 2
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    assert ndcg_at_k(["x", "a", "c"], GRADES) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(["a", "c", "b"], GRADES) == pytest.approx(1.0)
    assert ndcg_at_k(["z", "x"], GRADES) == 0.0
    assert ndcg_at_k(["a"], {"q": 0}) == 0.0  # nothing relevant: 0, not a division by zero


def test_ndcg_only_counts_the_top_k():
    ranked = ["x"] * 10 + ["a"]
    assert ndcg_at_k(ranked, GRADES, k=10) == 0.0
    assert ndcg_at_k(ranked, GRADES, k=11) > 0.0


def test_recall_counts_distinct_relevant_documents_in_the_top_k():
    assert recall_at_k(["a", "x", "b"], GRADES, 2) == pytest.approx(1 / 3)
    assert recall_at_k(["a", "x", "b", "z", "c"], GRADES, 5) == pytest.approx(1.0)
    assert recall_at_k(["z"], GRADES, 10) == 0.0  # grade 0 is not relevant


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document():
    assert mrr_at_k(["z", "x", "c", "a"], GRADES) == pytest.approx(1 / 3)
    assert mrr_at_k(["x"] * 10 + ["a"], GRADES, k=10) == 0.0


def test_percentile_interpolates_between_ranks():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([], 50) == 0.0


def test_score_run_averages_over_queries():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2, "c": 1}}
    scores = score_run("dense", {"q1": ["a"], "q2": ["x", "c"]}, qrels, [10.0, 30.0])
    assert scores.queries == 2
    assert scores.mrr_at_10 == pytest.approx((1 + 1 / 2) / 2)
    assert scores.recall_at_10 == pytest.approx((1 + 1 / 2) / 2)
    q2 = (1 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert scores.ndcg_at_10 == pytest.approx((1 + q2) / 2)
    assert scores.latency_p50_ms == pytest.approx(20.0)


def test_queries_without_a_relevant_judgment_are_skipped():
    dataset = Dataset(
        corpus={},
        queries={"q2": "b", "q1": "a", "q3": "c", "q4": "d"},
        qrels={"q1": {"d1": 1}, "q2": {"d1": 0}, "q4": {"d2": 2}},
    )
    assert dataset.judged_queries() == ["q1", "q4"]
    assert dataset.judged_queries(1) == ["q1"]


def _write(root: Path, corpus: list[dict], queries: list[dict], qrels: str) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in corpus) + "\n")
    (root / "queries.jsonl").write_text("\n".join(json.dumps(d) for d in queries) + "\n")
    (root / "qrels" / "test.tsv").write_text(qrels)
    return root


def test_load_dataset_reads_beir_files(tmp_path):
    root = _write(
        tmp_path / "ds",
        [{"_id": "d1", "title": "T", "text": "hello"}, {"_id": 2, "text": "x"}],
        [{"_id": "q1", "text": "hi"}],
        "query-id\tcorpus-id\tscore\nq1\td1\t2\n",
    )
    dataset = load_dataset(root)
    assert dataset.corpus == {"d1": ("T", "hello"), "2": ("", "x")}
    assert dataset.queries == {"q1": "hi"}
    assert dataset.qrels == {"q1": {"d1": 2}}


def test_load_dataset_rejects_missing_and_malformed_files(tmp_path):
    with pytest.raises(ValueError, match="corpus.jsonl is missing"):
        load_dataset(tmp_path)
    root = _write(tmp_path / "bad", [{"_id": "d1", "text": "x"}], [{"_id": "q1", "text": "y"}], "q1\td1\n")
    with pytest.raises(ValueError, match="expected query-id, corpus-id, score"):
        load_dataset(root)
    (root / "queries.jsonl").write_text("{not json\n")
    with pytest.raises(ValueError, match="queries.jsonl:1"):
        load_dataset(root)


def test_search_spec_names_modes_and_fusions():
    from ragmesh.search.v1 import search_service_pb2 as pb

    assert SearchSpec.parse("hybrid:dbsf") == SearchSpec("hybrid:dbsf", pb.SEARCH_MODE_HYBRID, pb.FUSION_DBSF)
    assert SearchSpec.parse("semantic") == SearchSpec("semantic", pb.SEARCH_MODE_SEMANTIC, pb.FUSION_UNSPECIFIED)
    for bad in ("fuzzy", "hybrid:max", "unspecified"):
        with pytest.raises(ValueError, match="unknown mode"):
            SearchSpec.parse(bad)


def test_leaderboard_ndcg_is_normalised_over_the_retrieved_list_only():
    from ragmesh_cli.evaluation import ndcg_retrieved_at_k

    assert ndcg_retrieved_at_k(["b", "x"], GRADES) == pytest.approx(1.0)  # a (grade 3) not retrieved: ignored
    assert ndcg_retrieved_at_k(["x", "b"], GRADES) == pytest.approx((1 / math.log2(3)) / 1)
    assert ndcg_retrieved_at_k(["x", "z"], GRADES) == 0.0


def test_the_default_is_compared_per_query_with_the_better_single_mode():
    from ragmesh_cli.evaluation import compare, summary_line

    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 1}}
    dense = score_run("dense", {"q1": ["a"], "q2": ["x", "b"], "q3": ["c"]}, qrels, [])
    sparse = score_run("sparse", {"q1": ["x"], "q2": ["x"], "q3": ["x"]}, qrels, [])
    hybrid = score_run("hybrid", {"q1": ["a"], "q2": ["b"], "q3": ["x", "c"]}, qrels, [])
    comparison = compare([dense, sparse, hybrid])
    assert (comparison.best_single, comparison.wins, comparison.losses, comparison.ties) == ("dense", 1, 1, 1)
    assert comparison.holds == (hybrid.ndcg_at_10 >= dense.ndcg_at_10)
    assert "hybrid vs dense: 1 wins, 1 losses, 1 ties" in comparison.line()
    worse = score_run("hybrid", {"q1": ["x"], "q2": ["x"], "q3": ["x"]}, qrels, [])
    assert summary_line([comparison, compare([dense, sparse, worse]), None]) == (
        "hybrid (default) >= best single mode on 1 of 2 sets"
    )
    assert compare([sparse, dense]) is None  # the default was not run


def test_answers_are_scored_on_the_documents_they_cite():
    qrels = {"q1": {"a": 1}, "q2": {"b": 2}, "q3": {"c": 1}}
    asked = {
        "q1": evaluation.AskedQuery(cited=["a", "x"], sources=["a", "x"]),  # cites the relevant one (and another)
        "q2": evaluation.AskedQuery(cited=["y"], sources=["y", "b"]),  # retrieved it, cited something else
        "q3": None,  # NO_RESULTS
    }
    scores = evaluation.score_answers("extractive", asked, qrels, [10.0, 20.0, 30.0])
    assert (scores.queries, scores.answered) == (3, 2)
    assert scores.cited_relevant == 0.5  # q1 of the two answers
    assert scores.citation_precision == 1 / 3  # a of a, x, y
    assert scores.retrieved_relevant == 1.0
    assert scores.citations_per_answer == 1.5
    assert scores.latency_p50_ms == 20.0
    empty = evaluation.score_answers("extractive", {"q": None}, qrels, [1.0])
    assert (empty.answered, empty.cited_relevant, empty.citation_precision) == (0, 0.0, 0.0)


async def test_an_ingest_stream_cut_short_is_sent_again_for_what_is_left():
    """A stream the server cuts (UNAVAILABLE: a connection past its max age, a restart) is resent for the documents
    it had not finished; each document counts once."""
    import grpc
    from ragmesh.indexer.v1 import indexer_service_pb2 as pb
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
    from ragmesh_common.clients import ServiceClient

    received: list[list[str]] = []

    class CutOnce(pb_grpc.IndexerServiceServicer):
        async def IngestDocuments(self, request, context):  # noqa: N802 (the RPC's name)
            received.append([d.doc_id for d in request.documents])
            for i, document in enumerate(request.documents):
                if len(received) == 1 and i == 2:
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "GOAWAY received: max_age")
                result = pb.IngestResult(status=pb.INGEST_STATUS_INDEXED, doc_id=document.doc_id)
                yield pb.IngestDocumentsResponse(index=i, result=result, total=len(request.documents))

    server = grpc.aio.server()
    pb_grpc.add_IndexerServiceServicer_to_server(CutOnce(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = ServiceClient("indexer", f"127.0.0.1:{port}", pb_grpc.IndexerServiceStub, timeout=10)
    try:
        corpus = {f"d{i}": ("", f"text {i}") for i in range(5)}
        dataset = evaluation.Dataset(corpus=corpus, queries={}, qrels={})
        counted: list[int] = []
        assert await evaluation.ingest_corpus(dataset, "c", client, counted.append) == 0
    finally:
        await client.close()
        await server.stop(None)
    assert received == [["d0", "d1", "d2", "d3", "d4"], ["d2", "d3", "d4"]]
    assert sum(counted) == 5
