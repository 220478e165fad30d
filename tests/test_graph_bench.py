"""`bench.graph_bench` cannot rot: its synthetic cluster has the shape the benchmark's figures are quoted for, and
the whole benchmark (the mesh's IngestEntities against LadybugDB's bulk insert, then the graph's reads) runs end
to end at a tiny size. No timing is asserted: figures from a test machine mean nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from bench.graph_bench import entity_id, generate, ladybug_bulk, tables

ROOT = Path(__file__).resolve().parents[1]


def test_the_synthetic_cluster_is_shaped_like_a_real_one_and_the_same_for_a_seed():
    entities = generate(2000, seed=3)
    assert len(entities) == 2000
    assert entities == generate(2000, seed=3) and entities != generate(2000, seed=4)
    ids = [entity_id(e) for e in entities]
    assert len(set(ids)) == len(ids)
    kinds = Counter(e["type"] for e in entities)
    assert set(kinds) == {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "Container",
        "Deployment",
        "StatefulSet",
        "Service",
        "HorizontalPodAutoscaler",
    }
    # Every relation points at an entity before it: no cut into requests or batches leaves one dangling.
    seen: set[str] = set()
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for entity, eid in zip(entities, ids, strict=True):
        assert {r["target_id"] for r in entity["relations"]} <= seen, eid
        seen.add(eid)
        for relation in entity["relations"]:
            out[eid][f"{relation['type']} {relation['target_id'].split('/')[0]}"] += 1
    for entity, eid in zip(entities, ids, strict=True):
        counts = out[eid]
        if entity["type"] == "Service":
            assert sum(counts[f"SELECTS {k}"] for k in ("Deployment", "StatefulSet")) == sum(counts.values()) == 1
        elif entity["type"] in ("Deployment", "StatefulSet"):
            assert counts["USES ServiceAccount"] == 1 and 1 <= counts["HAS Container"] <= 3
        elif entity["type"] == "Container":
            assert counts["REFERENCES Service"] <= 3 and counts["READS ConfigMap"] <= 2 and counts["READS Secret"] <= 1
            assert (
                eid
                == f"Container/{entity['properties']['namespace']}/{entity['properties']['workload']}/"
                + (entity["properties"]["name"])
            )
        elif entity["type"] == "HorizontalPodAutoscaler":
            assert set(counts) == {"SCALES Deployment"}
    assert ids[0].startswith("Namespace/") and "Deployment/" + ids[0].split("/")[1] + "/" in " ".join(ids)


def test_ladybugs_bulk_insert_loads_every_node_and_relation_of_the_cluster(tmp_path):
    entities = generate(200)
    nodes, relations = tables(entities)
    result = ladybug_bulk(entities, tmp_path)
    assert result["entities"] == 200 == sum(result["entity_types"].values())
    assert result["relations"] == sum(len(pairs) for pairs in relations.values()) > 0
    assert result["entity_types"] == {kind: len(table["rows"]) for kind, table in nodes.items()}
    # Flattened properties are columns of their type (nested objects with dots, lists as lists).
    assert nodes["Deployment"]["columns"]["spec.replicas"] == "INT64"
    assert nodes["Container"]["columns"]["ports"] == "STRING[]"


@pytest.mark.slow  # the mesh and the graph service as child processes, at a tiny size
def test_the_graph_benchmark_runs_end_to_end_at_a_tiny_size(tmp_path):
    out = tmp_path / "graph.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.graph_bench",
            *"--entities 300 --backends hash local --local-max 0 --request-entities 120 --queries 4 --json".split(),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    [size] = report["data"]["sizes"]
    bulk, mesh = size["ladybug_bulk"], size["mesh"]["hash"]
    assert "failed" not in mesh, (mesh["failed"], mesh["graph_log_error"])
    assert size["entities"] == bulk["entities"] == mesh["entities"] == 300
    # The mesh stored every relation the bulk insert loaded, none dangling.
    assert mesh["relations"] == bulk["relations"] == size["relations"] and mesh["dangling_relations"] == 0
    assert mesh["entities_per_second"] > 0 and mesh["ratio_to_ladybug_bulk"] > 0
    # The graph service's share, the same entities straight into UpsertEntities: the same graph again.
    direct = mesh["graph_upsert_direct"]
    assert (direct["entities"], direct["relations"], direct["dangling_relations"]) == (300, bulk["relations"], 0)
    # The graph holds what the bulk insert loaded: the same entities of each type.
    assert mesh["graph_entities"] == 300 and mesh["same_entities_as_ladybug"] and bulk["entities_per_second"] > 0
    assert mesh["graph_rss_mb_loaded"] > 0 and mesh["graph_rss_mb_idle"] > 0
    for depth in (1, 2, 3):
        assert mesh[f"explore_depth_{depth}"]["n"] == 4 and mesh[f"explore_depth_{depth}"]["p50_ms"] > 0
    assert mesh["shortest_paths"]["n"] == 4
    assert "--local-max" in size["mesh"]["local"]["skipped"]
    assert "| IngestEntities, embedder `hash`" in report["markdown"] and "ExploreEntity depth 3" in report["markdown"]
    # Beside the reports in bench/results, the file is not taken for one.
    from bench import summary

    assert summary.load([out]) == []
