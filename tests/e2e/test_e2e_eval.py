"""`ragmesh eval` through a real in-process mesh on a CI-sized subset of msmarco-5k (hash embedder: fast; its
BM25 half is the real one), and the command's reject paths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ragmesh_common import eval_cli, evaluation
from ragmesh_common.cli import app
from typer.testing import CliRunner

DATASET = Path(os.environ.get("RAGMESH_EVAL_DATASET",
                              Path(__file__).resolve().parents[3] / "shared" / "datasets" / "msmarco-5k"))
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

    # A second run reuses the ingested collection and measures exactly the same (deterministic ranking).
    again = tmp_path / "again.json"
    await eval_cli.run(subset, ["sparse", "hybrid:dbsf"], "", True, 0, again, mesh.addrs["indexer"],
                       mesh.addrs["search"])
    assert "reusing" in capsys.readouterr().err
    repeated = {m["mode"]: m for m in json.loads(again.read_text())["modes"]}
    for name in ("sparse", "hybrid:dbsf"):
        for metric in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10"):
            assert repeated[name][metric] == modes[name][metric]


def test_eval_rejects_an_unknown_mode_and_a_folder_without_beir_files(tmp_path):
    runner = CliRunner(env={"COLUMNS": "400"})
    result = runner.invoke(app, ["eval", str(tmp_path), "--mode", "fuzzy"])
    assert result.exit_code == 2 and "unknown mode" in result.output
    result = runner.invoke(app, ["eval", str(tmp_path)])
    assert result.exit_code == 2 and "corpus.jsonl is missing" in result.output
