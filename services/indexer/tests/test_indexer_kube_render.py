"""This repository's own Kubernetes render (`kubectl kustomize deploy/k8s`, and the prod overlay) as graph
entities: the relations someone reading deploy/k8s would draw, and the Secret's values nowhere."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ragmesh_indexer.entity_files import EntityFile, read

pytestmark = pytest.mark.deploy  # renders with kubectl, a child process
K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"
GRPC = ("answer", "converter", "embedder", "indexer", "search")


def render(path: Path) -> bytes:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render the kustomizations (kubectl kustomize)")
    return subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
def base() -> tuple[bytes, dict]:
    text = render(K8S)
    return text, {e.id: e for e in read([EntityFile(text, "ragmesh.yaml")], max_property_chars=250)}


@pytest.fixture(scope="module")
def prod() -> dict:
    return {e.id: e for e in read([EntityFile(render(K8S / "overlays" / "prod"), "prod.yaml")], max_property_chars=250)}


def targets(entities: dict, entity_id: str, relation: str) -> set[str]:
    return {link.target_id for link in entities[entity_id].relations if link.type == relation}


def config_map(entities: dict, prefix: str) -> str:
    """The id of the ConfigMap kustomize named "<prefix>-<hash>"."""
    [found] = [i for i in entities if i.startswith(f"ConfigMap/ragmesh/{prefix}-")]
    return found


@pytest.mark.parametrize("service", [*GRPC, "gateway"])
def test_each_service_selects_its_deployment_which_uses_its_account(base, service):
    _, entities = base
    assert targets(entities, f"Service/ragmesh/{service}", "SELECTS") == {f"Deployment/ragmesh/{service}"}
    assert targets(entities, f"Deployment/ragmesh/{service}", "USES") == {f"ServiceAccount/ragmesh/{service}"}
    assert f"ServiceAccount/ragmesh/{service}" in entities
    assert f"Container/ragmesh/{service}/server" in targets(entities, f"Deployment/ragmesh/{service}", "HAS")


def test_both_qdrant_services_select_the_statefulset(base):
    _, entities = base
    for service in ("qdrant", "qdrant-headless"):
        assert targets(entities, f"Service/ragmesh/{service}", "SELECTS") == {"StatefulSet/ragmesh/qdrant"}


def test_the_gateway_references_every_backend_through_its_config_map(base):
    _, entities = base
    server = "Container/ragmesh/gateway/server"
    assert targets(entities, server, "REFERENCES") >= {f"Service/ragmesh/{s}" for s in (*GRPC, "otel-collector")}
    assert "Service/ragmesh/qdrant" not in targets(entities, server, "REFERENCES")  # the gateway has no store
    # OTEL_SERVICE_NAME=gateway names the pod itself, not a Service it calls
    assert "Service/ragmesh/gateway" not in targets(entities, server, "REFERENCES")
    assert targets(entities, server, "READS") == {
        config_map(entities, "ragmesh-gateway"),
        config_map(entities, "ragmesh-otel"),
        "Secret/ragmesh/ragmesh-secrets",  # RAGMESH_API_KEYS
    }


def test_indexer_and_search_reference_qdrant_by_its_url(base):
    _, entities = base
    for service in ("indexer", "search"):
        assert "Service/ragmesh/qdrant" in targets(entities, f"Container/ragmesh/{service}/server", "REFERENCES")
    assert "Service/ragmesh/qdrant" not in targets(entities, "Container/ragmesh/answer/server", "REFERENCES")


def test_the_collector_reads_its_config_through_a_volume(base):
    _, entities = base
    assert targets(entities, "Container/ragmesh/otel-collector/otel-collector", "READS") == {
        config_map(entities, "otel-collector")
    }


def test_embedder_hpa_scales_the_embedder(base):
    _, entities = base
    assert targets(entities, "HorizontalPodAutoscaler/ragmesh/embedder", "SCALES") == {"Deployment/ragmesh/embedder"}


def test_network_policies_apply_to_their_pods_and_default_deny_to_all(base):
    _, entities = base
    workloads = {i for i in entities if i.startswith(("Deployment/", "StatefulSet/"))}
    assert len(workloads) == 9
    assert targets(entities, "NetworkPolicy/ragmesh/default-deny", "APPLIES_TO") == workloads
    assert targets(entities, "NetworkPolicy/ragmesh/indexer", "APPLIES_TO") == {"Deployment/ragmesh/indexer"}
    assert targets(entities, "NetworkPolicy/ragmesh/qdrant", "APPLIES_TO") == {"StatefulSet/ragmesh/qdrant"}


def test_the_namespace_is_keyed_by_name_alone(base):
    _, entities = base
    assert "Namespace/ragmesh" in entities


def test_the_secret_keeps_only_its_keys(base):
    text, entities = base
    [secret] = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Secret"]
    values = [v for v in {**(secret.get("data") or {}), **(secret.get("stringData") or {})}.values() if v]
    assert values, "the render's Secret has values to hide"
    stored = entities["Secret/ragmesh/ragmesh-secrets"]
    assert stored.properties["keys"] == sorted({*(secret.get("data") or {}), *(secret.get("stringData") or {})})
    everything = json.dumps([(e.properties, e.all_properties, e.text()) for e in entities.values()])
    assert all(str(v) not in everything for v in values)


def test_prod_pdbs_protect_their_workloads_and_the_external_secret_is_still_read(prod):
    for service in GRPC:
        assert targets(prod, f"PodDisruptionBudget/ragmesh/{service}", "PROTECTS") == {f"Deployment/ragmesh/{service}"}
    assert targets(prod, "PodDisruptionBudget/ragmesh/qdrant", "PROTECTS") == {"StatefulSet/ragmesh/qdrant"}
    # the overlay's Secret comes from outside the render: the relation is still sent (the graph reports it
    # dangling until the Secret is ingested)
    assert "Secret/ragmesh/ragmesh-secrets" not in prod
    assert "Secret/ragmesh/ragmesh-secrets" in targets(prod, "Container/ragmesh/indexer/server", "READS")


def test_every_id_is_unique(base):
    text, _ = base
    ids = [e.id for e in read([EntityFile(text, "ragmesh.yaml")], max_property_chars=250)]
    assert len(ids) == len(set(ids)) > 200  # services' and network policy rules' ports do not collide
