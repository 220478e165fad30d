"""`make bench` cannot rot: the orchestrator runs end to end at a tiny size (hash embedder, a few passages, the
store at 1,000 points) and writes a report with every section filled or skipped with its reason. No timing
is asserted: figures from a test machine mean nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_benchmark_report_runs_end_to_end_at_a_tiny_size(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench.report", "--smoke", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    [json_path] = tmp_path.glob("*.json")
    report = json.loads(json_path.read_text())
    assert report.get("skipped", {}) == {}, report["skipped"]
    assert report["machine"]["cpus_usable"] >= 1 and report["machine"]["packages"]["qdrant-edge-py"]
    mesh = report["mesh"]["hash"]
    assert mesh["ingest_rest_passages_per_second"] > 0 and mesh["ingest_grpc_passages_per_second"] > 0
    for key in ("rest_dense_1", "rest_hybrid_2", "grpc_dense_1"):
        assert mesh[key]["p50_ms"] > 0 and mesh[key]["n"] >= 3
    assert report["in_process"]["hash"]["dense_1"]["p50_ms"] > 0
    assert report["in_process"]["hash"]["service"]["hybrid_1"]["p50_ms"] > 0  # the search service's own code
    assert report["raw_model"]["hash"]["backend_direct"] > 0
    assert mesh["rest_dense_1_during_ingest"]["n"] >= 1 and mesh["rest_dense_1_during_ingest"]["p50_ms"] > 0
    assert report["hops"]["grpc_unary"]["p50_ms"] > 0 and report["hops"]["http_fastapi"]["p50_ms"] > 0
    assert report["store"]["data"]["points"] == 1000 and 0 <= report["store"]["data"]["recall_at_10"] <= 1
    assert "skipped" in report["langchain"]  # the LangChain part is named, with why it did not run
    markdown = json_path.with_suffix(".md").read_text()
    assert "## Targets" in markdown and "| REST dense p50 <= 6 ms (1 client) |" in markdown
    assert "| REST hybrid p50 <= in process (the search service's code) + 2 ms |" in markdown
    assert "store at 1,000: recall@10 >= 0.95" in markdown
    assert "The hops alone, nothing behind them" in markdown
    assert "clients ingest (" in markdown  # search during a bulk ingest


def test_the_service_ceiling_benchmark_runs_every_row_at_a_tiny_size(tmp_path):
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, "-m", "bench.bench_embedder_overhead", "--seconds", "0.2", "--rounds", "1",
                           "--clients", "2", "--request-size", "8", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(out.read_text())["data"]
    rows = [value for value in data.values() if isinstance(value, dict) and "texts_per_second" in value]
    assert len(rows) == 3 and all(row["texts_per_second"] > 0 for row in rows)


def test_the_ab_benchmark_runs_both_sides_at_a_tiny_size():
    done = subprocess.run([sys.executable, "-m", "bench.bench_ab", "--backend", "hash", "--passages", "64",
                           "--rounds", "1", "--passes", "1", "--a", "RAGMESH_EMBEDDER_RUNNERS=2", "--search", "dense"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["settings"]["A"] == {"RAGMESH_EMBEDDER_RUNNERS": "2"}
    for side in ("A", "B"):
        [result] = summary["results"][side]
        assert result["ingest"][0] > 0 and result["search_p50_ms"] > 0
        assert result["padding_pct"][0] >= 0  # read from the embedder's own metrics
