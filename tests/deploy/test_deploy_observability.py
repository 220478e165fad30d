"""The observability component's Grafana dashboard and Prometheus alert rules: promtool accepts and unit-tests
the rules, the dashboard has what Grafana needs, every query parses as PromQL and names only metrics that
ragmesh really exports, and the rendered ConfigMaps carry exactly these files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import jsonschema
import pytest
import yaml

from .deploy_support import K8S, REPO, render_combo

OBSERVABILITY = K8S / "components" / "observability"
RULES = OBSERVABILITY / "prometheus" / "ragmesh-alerts.yaml"
RULES_TEST = OBSERVABILITY / "prometheus" / "ragmesh-alerts.test.yaml"
DASHBOARD = OBSERVABILITY / "grafana" / "ragmesh-dashboard.json"

# What Grafana needs to import and draw the dashboard (there is no official schema; this is the part we use).
_TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "legendFormat": {"type": "string"},
    },
}
_GRID = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type"],
                        "properties": {"type": {"enum": ["datasource", "query", "custom", "constant", "interval"]}},
                    },
                }
            },
        },
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos"],
                "properties": {
                    "id": {"type": "integer"},
                    "gridPos": _GRID,
                    "type": {"enum": ["row", "timeseries", "stat"]},
                },
                "if": {"properties": {"type": {"const": "row"}}},
                "then": {"required": ["panels", "collapsed"]},
                "else": {
                    "required": ["datasource", "targets", "fieldConfig"],
                    "properties": {"targets": {"type": "array", "minItems": 1, "items": _TARGET}},
                },
            },
        },
    },
}

# What an SRE must see (the issue's list), as the metrics that show it.
REQUIRED_METRICS = {
    "request rate, errors and latency per RPC": "ragmesh_grpc_server_handling_seconds_bucket",
    "request rate and errors per RPC": "ragmesh_grpc_server_handling_seconds_count",
    "REST latency": "ragmesh_http_server_request_duration_seconds_bucket",
    "embedder queue depth": "ragmesh_embedder_queue_depth",
    "embedder batch size": "ragmesh_embedder_batch_size_bucket",
    "ingest rate": "ragmesh_indexer_documents_total",
    "ingestion in progress": "ragmesh_grpc_server_in_flight_requests",
}
# Metrics that come from Prometheus itself or prometheus-client's process collector.
BUILTIN_METRICS = {"up", "process_resident_memory_bytes", "process_cpu_seconds_total"}
_SUFFIXES = {
    "Counter": ("_total", "_created"),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "Gauge": ("",),
    "Summary": ("_sum", "_count", "_created"),
}
_DEFINITION = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"(ragmesh_[a-z0-9_]+)\"")
_METRIC_NAME = re.compile(r"\b((?:ragmesh|process)_[a-z0-9_]+|up)\b(?!\s*\()")


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is needed (Debian package prometheus; scripts/system-deps.sh installs it)")
    return path


def exported_metrics() -> set[str]:
    """Every series name ragmesh's code defines with prometheus-client (with the suffixes it exposes)."""
    names = set(BUILTIN_METRICS)
    for path in REPO.glob("*/**/ragmesh_*/**/*.py"):
        if ".venv" in path.parts:
            continue
        for kind, name in _DEFINITION.findall(path.read_text(encoding="utf-8")):
            names.update(f"{name.removesuffix('_total')}{suffix}" for suffix in _SUFFIXES[kind])
    return names


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard()["panels"] for target in panel.get("targets", ())]


def rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule.get("alert") or rule["record"], rule["expr"]) for group in groups for rule in group["rules"]]


def _as_promql(expr: str) -> str:
    """A Grafana query as plain PromQL: its variables replaced by values they can take."""
    return expr.replace("$__rate_interval", "5m").replace("$job", ".*")


def test_promtool_accepts_the_rules():
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alerts_fire_in_promtool_unit_tests():
    result = subprocess.run(
        [_promtool(), "test", "rules", RULES_TEST.name],
        cwd=RULES_TEST.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_says_how_bad_and_what_to_do():
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
                assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]


def test_the_dashboard_matches_the_schema():
    jsonschema.validate(dashboard(), DASHBOARD_SCHEMA)
    ids = [panel["id"] for panel in dashboard()["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_every_dashboard_query_parses_as_promql(tmp_path):
    # promtool parses the queries when they are recording rules.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": _as_promql(expr)}
                    for i, (_, expr) in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_queries_name_only_metrics_ragmesh_exports(source):
    exported = exported_metrics()
    assert "ragmesh_embedder_queue_depth" in exported and "ragmesh_indexer_documents_total" in exported
    exprs = dashboard_exprs() if source == "dashboard" else rule_exprs()
    unknown = {
        (title, name)
        for title, expr in exprs
        for name in _METRIC_NAME.findall(expr)
        if name not in exported and not name.startswith("ragmesh:")
    }
    assert not unknown, f"metrics no ragmesh process exports: {sorted(unknown)}"


def test_the_dashboard_shows_what_an_sre_needs():
    used = {name for _, expr in dashboard_exprs() for name in _METRIC_NAME.findall(expr)}
    missing = {what: metric for what, metric in REQUIRED_METRICS.items() if metric not in used}
    assert not missing, missing


def test_the_component_ships_the_files_as_labelled_configmaps():
    docs = render_combo(("observability",))
    maps = {d["metadata"]["name"].rsplit("-", 1)[0]: d for d in docs if d["kind"] == "ConfigMap"}
    board = maps["ragmesh-grafana-dashboard"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["ragmesh-dashboard.json"]) == dashboard()
    rules = maps["ragmesh-prometheus-rules"]
    assert rules["metadata"]["labels"]["prometheus_rule"] == "1"
    assert rules["data"]["ragmesh-alerts.yaml"] == RULES.read_text()
