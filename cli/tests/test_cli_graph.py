"""`ragmesh up` starts the optional graph service only when RAGMESH_GRAPH_ENABLED=true; `ragmesh serve graph`
knows it whatever the setting says."""

from __future__ import annotations

from ragmesh_cli import mesh


def test_up_starts_the_graph_service_only_when_the_graph_is_enabled(monkeypatch):
    monkeypatch.delenv("RAGMESH_GRAPH_ENABLED", raising=False)
    assert "graph" not in mesh.up_services()
    assert {"converter", "embedder", "indexer", "search", "answer", "gateway"} <= set(mesh.up_services())
    monkeypatch.setenv("RAGMESH_GRAPH_ENABLED", "true")
    assert "graph" in mesh.up_services()
    # Started after search and before the services that call it.
    order = mesh.validate_names(mesh.up_services())
    assert order.index("search") < order.index("graph") < order.index("indexer") < order.index("answer")


def test_serve_knows_the_graph_service_when_the_graph_is_off(monkeypatch):
    monkeypatch.setenv("RAGMESH_GRAPH_ENABLED", "false")
    assert mesh.validate_names(["graph"]) == ["graph"]
    assert mesh.settings_class("graph").__name__ == "GraphSettings"
