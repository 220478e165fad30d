"""The network policies deny by default and open exactly the mesh's real edges, where "real" is read from the
manifests themselves: the ADDR / QDRANT_URL / OTLP endpoints each container is configured with, the
collector's exporter, and the Qdrant cluster's peer port."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import (
    by_name,
    container_env,
    named_port,
    of_kind,
    ragmesh_containers,
    resolve_service_port,
    selects,
    workloads,
)

WITH_POLICIES = (
    "default",
    "prod",
    "base+network-policies",
    "base+observability+network-policies",
    "base+network-policies+graph",
    "base+observability+network-policies+graph",
)


def _pods(docs) -> dict[str, dict]:
    return {w["metadata"]["name"]: w for w in workloads(docs)}


def _labels(workload) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def _ports(workload) -> set[int]:
    return {p["containerPort"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}


def _peer_matches(peer: dict, labels: dict[str, str]) -> bool:
    # Only same-namespace pod selectors can match a pod of this namespace: namespaceSelector peers name other
    # namespaces (kube-system, monitoring) and ipBlock peers exclude the private ranges pod IPs live in.
    if set(peer) != {"podSelector"}:
        return False
    return selects(peer["podSelector"].get("matchLabels", {}), labels)


def _rule_allows(rule: dict, side: str, peer_labels: dict[str, str], port: int) -> bool:
    peers = rule.get(side)
    if peers is not None and not any(_peer_matches(p, peer_labels) for p in peers):
        return False
    ports = rule.get("ports")
    return ports is None or any(p["port"] == port for p in ports)


def allowed_edges(docs) -> set[tuple[str, str, int]]:
    """(source pod, destination pod, port) for every connection the policies let through inside the namespace."""
    policies = of_kind(docs, "NetworkPolicy")
    pods = _pods(docs)
    edges = set()
    for src, src_w in pods.items():
        for dst, dst_w in pods.items():
            for port in _ports(dst_w):
                egress = [
                    p
                    for p in policies
                    if "Egress" in p["spec"]["policyTypes"]
                    and selects(p["spec"]["podSelector"].get("matchLabels", {}), _labels(src_w))
                ]
                ingress = [
                    p
                    for p in policies
                    if "Ingress" in p["spec"]["policyTypes"]
                    and selects(p["spec"]["podSelector"].get("matchLabels", {}), _labels(dst_w))
                ]
                out_ok = any(
                    _rule_allows(r, "to", _labels(dst_w), port) for p in egress for r in p["spec"].get("egress", [])
                )
                in_ok = any(
                    _rule_allows(r, "from", _labels(src_w), port) for p in ingress for r in p["spec"].get("ingress", [])
                )
                if out_ok and in_ok:
                    edges.add((src, dst, port))
    return edges


def real_edges(docs) -> set[tuple[str, str, int]]:
    """The connections the configuration says will be made."""
    edges = set()
    pods = _pods(docs)
    for workload, container, _ in ragmesh_containers(docs):
        env = container_env(docs, container)
        src = workload["metadata"]["name"]
        for name, value in env.items():
            if name.endswith("_ADDR") or name in ("QDRANT_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
                if "://" in value:
                    parsed = urlparse(value)
                    host, port = parsed.hostname, parsed.port
                else:
                    host, port = value.rsplit(":", 1)
                dst, _, target_port = resolve_service_port(docs, host, int(port))
                edges.add((src, dst["metadata"]["name"], target_port))
    if "otel-collector" in pods:
        config = yaml.safe_load(
            next(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("otel-collector"))["data"][
                "config.yaml"
            ]
        )
        for exporter in config["service"]["pipelines"]["traces"]["exporters"]:
            host, port = config["exporters"][exporter]["endpoint"].split(":")
            dst, _, target_port = resolve_service_port(docs, host, int(port))
            edges.add(("otel-collector", dst["metadata"]["name"], target_port))
    # Qdrant nodes talk to each other on the peer port; the policy is there before the StatefulSet is scaled.
    qdrant = by_name(docs, "StatefulSet", "qdrant")["spec"]["template"]["spec"]["containers"][0]
    edges.add(("qdrant", "qdrant", named_port(qdrant, "p2p")))
    return edges


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_policies_allow_exactly_the_real_edges_of_the_mesh(renders, name):
    docs = renders[name]
    expected = real_edges(docs)
    # The edges the issue names must be among them, or the derivation above is broken.
    assert {
        ("gateway", "search", 50054),
        ("indexer", "embedder", 50052),
        ("search", "qdrant", 6333),
        ("gateway", "answer", 50055),
        ("answer", "search", 50054),
        ("answer", "embedder", 50052),
    } <= expected
    if "graph" in name.split("+"):
        assert {("gateway", "graph", 50056), ("indexer", "graph", 50056), ("answer", "graph", 50056)} <= expected
    assert allowed_edges(docs) == expected


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_everything_else_is_denied_by_default(renders, name):
    docs = renders[name]
    deny = by_name(docs, "NetworkPolicy", "default-deny")
    assert deny["spec"]["podSelector"] == {} and set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    # DNS is the one egress every pod has, and only to the cluster's DNS pods.
    dns = by_name(docs, "NetworkPolicy", "allow-dns")
    assert {p["port"] for r in dns["spec"]["egress"] for p in r["ports"]} == {53}
    # Every pod is covered by its own policy, so no pod relies on the default alone by accident.
    covered = {
        p["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
        for p in of_kind(docs, "NetworkPolicy")
    }
    assert set(_pods(docs)) <= covered


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_only_the_gateway_is_open_to_clients_and_only_egress_to_public_addresses_leaves(renders, name):
    docs = renders[name]
    open_ports = set()
    public_egress = set()
    for policy in of_kind(docs, "NetworkPolicy"):
        target = policy["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
        for rule in policy["spec"].get("ingress", []):
            if "from" not in rule:
                open_ports |= {(target, p["port"]) for p in rule["ports"]}
        for rule in policy["spec"].get("egress", []):
            for peer in rule.get("to", []):
                if "ipBlock" in peer:
                    assert peer["ipBlock"]["cidr"] == "0.0.0.0/0"
                    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
                        peer["ipBlock"]["except"]
                    )
                    public_egress.add(target)
    gateway = by_name(docs, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0]
    assert open_ports == {("gateway", named_port(gateway, "http"))}
    # URL ingestion (converter) and the chat model (answer) reach out; nothing else does.
    assert public_egress == {"converter", "answer"}


@pytest.mark.parametrize("name", WITH_POLICIES)
def test_prometheus_may_scrape_every_metrics_port(renders, name):
    docs = renders[name]
    for workload, container, service in ragmesh_containers(docs):
        if service == "gateway":
            continue  # /metrics on the open HTTP port
        port = named_port(container, "metrics")
        policy = by_name(docs, "NetworkPolicy", workload["metadata"]["name"])
        scrape = [
            r
            for r in policy["spec"]["ingress"]
            if any(
                p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name") == "monitoring"
                for p in r.get("from", [])
            )
        ]
        assert scrape and [p["port"] for p in scrape[0]["ports"]] == [port], service


def test_the_policy_evaluator_sees_a_missing_edge(renders):
    """A policy set without the indexer -> embedder rule must lose exactly that edge (the check above can fail)."""
    docs = list(renders["base+network-policies"])
    indexer = by_name(docs, "NetworkPolicy", "indexer")
    pruned = yaml.safe_load(yaml.safe_dump(indexer))
    pruned["spec"]["egress"] = [
        r
        for r in pruned["spec"]["egress"]
        if not any(_peer_matches(p, {"app.kubernetes.io/name": "embedder"}) for p in r.get("to", []))
    ]
    docs[docs.index(indexer)] = pruned
    assert real_edges(docs) - allowed_edges(docs) == {("indexer", "embedder", 50052)}
