"""`ragmesh eval` through a real in-process mesh on a CI-sized subset of msmarco-5k (hash embedder: fast; its
BM25 half is the real one), and the command's reject paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ragmesh_cli import eval_cli, evaluation, golden_cli
from ragmesh_cli.app import app
from typer.testing import CliRunner

DATASET = Path(
    os.environ.get("RAGMESH_EVAL_DATASET", Path(__file__).resolve().parents[3] / "shared" / "datasets" / "msmarco-5k")
)
QUERIES = 4
DISTRACTORS = 100


def _subset(source: Path, target: Path) -> Path:
    """The first QUERIES judged queries, their judged passages and DISTRACTORS other passages, as BEIR files."""
    dataset = evaluation.load_dataset(source)
    query_ids = dataset.judged_queries(QUERIES)
    judged = {d for q in query_ids for d in dataset.qrels[q]}
    others = [d for d in dataset.corpus if d not in judged][:DISTRACTORS]
    (target / "qrels").mkdir(parents=True)
    with (target / "corpus.jsonl").open("w") as f:
        for doc_id in sorted(judged & dataset.corpus.keys()) + others:
            title, text = dataset.corpus[doc_id]
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (target / "queries.jsonl").open("w") as f:
        for q in query_ids:
            f.write(json.dumps({"_id": q, "text": dataset.queries[q]}) + "\n")
    lines = [f"{q}\t{d}\t{g}" for q in query_ids for d, g in dataset.qrels[q].items()]
    (target / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(lines) + "\n")
    return target


@pytest.mark.skipif(not (DATASET / "corpus.jsonl").is_file(), reason=f"{DATASET} is not available")
@pytest.mark.asyncio(loop_scope="session")
async def test_eval_measures_every_mode_on_a_msmarco_subset(mesh_factory, tmp_path, capsys):
    mesh = await mesh_factory()
    subset = _subset(DATASET, tmp_path / "msmarco-subset")
    out = tmp_path / "results.json"
    await eval_cli.run(subset, [], "", True, 0, out, mesh.addrs["indexer"], mesh.addrs["search"])
    results = json.loads(out.read_text())
    modes = {m["mode"]: m for m in results["modes"]}
    assert list(modes) == list(evaluation.DEFAULT_SPECS)
    for m in modes.values():
        assert m["queries"] == QUERIES
        assert 0.0 <= m["ndcg_at_10"] <= 1.0 and m["recall_at_10"] <= m["recall_at_100"] <= 1.0
    assert modes["sparse"]["ndcg_at_10"] > 0.3  # real BM25 finds judged passages among the distractors
    assert f"{modes['sparse']['ndcg_at_10']:.3f}" in capsys.readouterr().err  # the table

    assert 0.0 <= modes["hybrid"]["ndcg_at_10_retrieved"] <= 1.0
    versus = results["default_vs_best_single"]
    assert versus["default"] == "hybrid" and versus["best_single"] in ("dense", "sparse")
    assert versus["wins"] + versus["losses"] + versus["ties"] == QUERIES

    # A second run reuses the ingested collection and measures exactly the same (deterministic ranking).
    again = tmp_path / "again.json"
    await eval_cli.run(
        subset, ["sparse", "hybrid:dbsf"], "", True, 0, again, mesh.addrs["indexer"], mesh.addrs["search"]
    )
    assert "reusing" in capsys.readouterr().err
    repeated = {m["mode"]: m for m in json.loads(again.read_text())["modes"]}
    for name in ("sparse", "hybrid:dbsf"):
        for metric in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10"):
            assert repeated[name][metric] == modes[name][metric]


@pytest.mark.skipif(not (DATASET / "corpus.jsonl").is_file(), reason=f"{DATASET} is not available")
@pytest.mark.asyncio(loop_scope="session")
async def test_eval_answers_scores_the_citations_of_every_judged_query(mesh_factory, tmp_path, capsys):
    mesh = await mesh_factory()
    subset = _subset(DATASET, tmp_path / "answers-subset")
    out = tmp_path / "results.json"
    addrs = mesh.addrs
    await eval_cli.run(
        subset, ["sparse"], "", True, 0, out, addrs["indexer"], addrs["search"], answer_addr=addrs["answer"]
    )
    answers = json.loads(out.read_text())["answers"]
    assert answers["generator"] == "extractive" and answers["queries"] == QUERIES
    assert 0 < answers["answered"] <= QUERIES
    # Real BM25 retrieves the judged passages among the distractors, and the answers cite some of them.
    assert 0 < answers["cited_relevant"] <= answers["retrieved_relevant"] <= 1.0
    assert 0 < answers["citation_precision"] <= 1.0 and answers["citations_per_answer"] >= 1.0
    assert "cites relevant" in capsys.readouterr().err  # the table


def test_eval_rejects_an_unknown_mode_and_a_folder_without_beir_files(tmp_path):
    runner = CliRunner(env={"COLUMNS": "400"})
    result = runner.invoke(app, ["eval", str(tmp_path), "--mode", "fuzzy"])
    assert result.exit_code == 2 and "unknown mode" in result.output
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code == 2 and "corpus.jsonl is missing" in result.output


@pytest.mark.skipif(not (DATASET / "corpus.jsonl").is_file(), reason=f"{DATASET} is not available")
@pytest.mark.asyncio(loop_scope="session")
async def test_eval_runs_several_datasets_with_a_summary_line(mesh_factory, tmp_path, capsys):
    mesh = await mesh_factory()
    first = _subset(DATASET, tmp_path / "first")
    second = _subset(DATASET, tmp_path / "second")
    out = tmp_path / "results.json"
    await eval_cli.run(
        [first, second], ["dense", "sparse", "hybrid"], "", True, 0, out, mesh.addrs["indexer"], mesh.addrs["search"]
    )
    results = json.loads(out.read_text())
    assert [Path(d["dataset"]).name for d in results["datasets"]] == ["first", "second"]
    held = [d["default_vs_best_single"]["holds"] for d in results["datasets"]]
    assert results["summary"] == {"default_at_least_best_single": sum(held), "compared": 2}
    err = capsys.readouterr().err
    assert f"hybrid (default) >= best single mode on {sum(held)} of 2 sets" in err
    assert err.count(" wins, ") == 2


@pytest.mark.skipif(not (DATASET / "corpus.jsonl").is_file(), reason=f"{DATASET} is not available")
@pytest.mark.asyncio(loop_scope="session")
async def test_a_collection_is_scored_on_its_golden_set_with_the_change_since_the_last_time(
    mesh_factory, tmp_path, capsys
):
    mesh = await mesh_factory()
    subset = _subset(DATASET, tmp_path / "golden-subset")
    first = tmp_path / "first.json"
    # `ragmesh eval DATASET --save-golden` ingests the corpus under its ids and stores the judged queries.
    await eval_cli.run(
        subset, ["sparse"], "gold", True, 0, first, mesh.addrs["indexer"], mesh.addrs["search"], save_golden=True
    )
    measured = json.loads(first.read_text())["modes"][0]
    assert "golden set of 'gold': 4 queries" in capsys.readouterr().err

    # `ragmesh eval --collection gold --mode sparse`: the service scores the live collection like `ragmesh eval`.
    scored = tmp_path / "scored.json"
    assert await golden_cli.evaluate("gold", ["sparse"], scored, mesh.addrs["search"]) == 0
    (once,) = json.loads(scored.read_text())["evaluations"]
    assert once["queries"] == QUERIES and once["previous"] is None
    assert once["ndcg_at_10"] == pytest.approx(measured["ndcg_at_10"], abs=1e-6)
    assert once["mrr_at_10"] == pytest.approx(measured["mrr_at_10"], abs=1e-6)
    assert "sparse: first evaluation" in capsys.readouterr().err

    # `ragmesh golden upload` replaces the set from the dataset's files (the same queries here); the second
    # evaluation shows the change since the first (none: the index did not change).
    assert await golden_cli.upload("gold", subset, "test", 2, mesh.addrs["search"]) == 0
    assert await golden_cli.evaluate("gold", ["sparse"], scored, mesh.addrs["search"]) == 0
    (twice,) = json.loads(scored.read_text())["evaluations"]
    assert twice["queries"] == 2 and twice["previous"]["evaluated_at"] == once["evaluated_at"]
    err = capsys.readouterr().err
    assert "the golden set changed since the previous evaluation" in err
    assert f"nDCG@10 {twice['ndcg_at_10']:.3f} ({twice['ndcg_at_10'] - once['ndcg_at_10']:+.3f})" in err


def test_eval_without_a_dataset_needs_a_collection_and_plain_modes():
    runner = CliRunner(env={"COLUMNS": "400"})
    result = runner.invoke(app, ["eval"])
    assert result.exit_code == 2 and "--collection" in result.output
    result = runner.invoke(app, ["eval", "--collection", "docs", "--mode", "hybrid:rrf"])
    assert result.exit_code == 2 and "unknown mode 'hybrid:rrf'" in result.output


def test_golden_upload_rejects_a_folder_without_queries_and_qrels(tmp_path):
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["golden", "upload", "docs", str(tmp_path)])
    assert result.exit_code == 2 and "queries.jsonl is missing" in result.output


@pytest.mark.asyncio(loop_scope="session")
async def test_golden_upload_refuses_a_dataset_without_a_relevant_judgment(tmp_path, capsys):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "anything"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t0\n")
    assert await golden_cli.upload("docs", tmp_path, "test", 0, "127.0.0.1:1") == 1  # refused before any call
    assert "no query has a relevant judgment" in capsys.readouterr().err
