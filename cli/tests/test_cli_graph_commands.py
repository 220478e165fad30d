"""`ragmesh graph ...` and `ragmesh chat --graph` as a person runs them: the real command (a subprocess, on an
80-column terminal) against a real mesh with the graph service holding a small cluster (tests/support/graph.py,
written through the graph service); the chat with the fake OpenAI-compatible model over real HTTP, scripted to
call the graph tools. `ragmesh graph ingest` of this repository's manifests is test_cli_graph_ingest.py's."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pexpect
import pytest
import pytest_asyncio
from ragmesh.graph.v1 import graph_service_pb2 as pb

from tests.support.graph import cluster

pytestmark = pytest.mark.asyncio(loop_scope="session")
RAGMESH = str(Path(sys.executable).with_name("ragmesh"))
COLLECTION = "shop"
WEB = "Deployment/shop/web"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory(graph=True)
    await mesh.stub("graph").UpsertEntities(pb.UpsertEntitiesRequest(collection=COLLECTION, entities=cluster()))
    return mesh


def env(mesh, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "OTEL_"))}
    addrs = {f"RAGMESH_{name.upper()}_ADDR": addr for name, addr in mesh.addrs.items()}
    return {**clean, **addrs, "COLUMNS": "80", "TERM": "dumb", **extra}


async def ragmesh(mesh, *args: str) -> tuple[int, str, str]:
    """Run `ragmesh ARGS` to the end (without blocking the loop that serves the mesh): (exit code, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        RAGMESH, *args, env=env(mesh), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


def cells(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│") if c.strip()] for line in out.splitlines() if "│" in line]


def fits(out: str) -> bool:
    return max(len(line) for line in out.splitlines()) <= 80


async def test_explore_entity_types_and_paths(mesh):
    code, out, _ = await ragmesh(mesh, "graph", "explore", WEB, "-c", COLLECTION)
    assert code == 0 and fits(out)
    rows = cells(out)
    assert ["1", "<-[SELECTS]-", "Service/shop/web"] in rows
    assert ["1", "-[USES]->", "ServiceAccount/shop/runner"] in rows

    code, out, _ = await ragmesh(mesh, "graph", "explore", WEB, "-c", COLLECTION, "--depth", "2")
    assert code == 0 and ["2", "Service/shop/web", "<-[REFERENCES]-", "Ingress/shop/web"] in cells(out)

    code, out, _ = await ragmesh(mesh, "graph", "entity", "Container/shop/web/app", "-c", COLLECTION)
    rows = cells(out)
    assert code == 0 and fits(out)
    assert ["image", "nginx:1.27"] in rows and ["(parent)", WEB] in rows and ["<-[HAS]-", WEB] in rows

    code, out, _ = await ragmesh(mesh, "graph", "types", "-c", COLLECTION)
    assert code == 0 and fits(out)
    assert ["Deployment", "1", "namespace, name"] in cells(out)
    assert ["Service", "SELECTS", "Deployment", "1"] in cells(out)

    code, out, _ = await ragmesh(mesh, "graph", "paths", "Ingress", "ServiceAccount", "-c", COLLECTION)
    assert code == 0
    assert out.splitlines() == [
        "(:Ingress)-[:REFERENCES]->(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)"
    ]

    code, out, _ = await ragmesh(mesh, "graph", "explore", WEB, "-c", COLLECTION, "--json")
    assert code == 0 and json.loads(out)["entity"]["id"] == WEB


async def test_query_reads_a_write_is_refused_and_errors_are_printed(mesh):
    count = "MATCH (d:Deployment) RETURN d.id, d.`spec.replicas` AS replicas"
    code, out, _ = await ragmesh(mesh, "graph", "query", count, "-c", COLLECTION)
    assert code == 0 and [WEB, "3"] in cells(out)

    code, out, _ = await ragmesh(
        mesh, "graph", "query", "MATCH (t:EntityType) RETURN t.name", "--ontology", "-c", COLLECTION
    )
    assert code == 0 and ["Deployment"] in cells(out)

    code, out, err = await ragmesh(mesh, "graph", "query", "MATCH (d:Deployment) DETACH DELETE d", "-c", COLLECTION)
    assert code == 1 and "PERMISSION_DENIED QUERY_NOT_READ_ONLY" in err

    code, out, err = await ragmesh(mesh, "graph", "explore", "Deployment/shop/nowhere", "-c", COLLECTION)
    assert code == 1 and "NOT_FOUND ENTITY_NOT_FOUND" in err

    code, out, err = await ragmesh(mesh, "graph", "paths", "Ingress", "Nothing", "-c", COLLECTION)
    assert code == 1 and "ENTITY_TYPE_NOT_FOUND" in err

    code, out, _ = await ragmesh(mesh, "graph", "query", count, "-c", COLLECTION)
    assert [WEB, "3"] in cells(out)  # the refused write changed nothing


async def test_chat_with_the_graph_gives_the_model_graph_tools(mesh, fake_chat):
    fake_chat.reset()
    fake_chat.script = [("graph_explore_data_entity", {"entity_id": WEB})]
    child = pexpect.spawn(
        RAGMESH,
        ["chat", "--collection", COLLECTION, "--model", "fake-chat", "--graph"],
        env=env(mesh, RAGMESH_ANSWER_BASE_URL=fake_chat.url),
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    try:
        await asyncio.to_thread(child.expect_exact, "with its graph")
        await asyncio.to_thread(child.expect_exact, "you> ")
        child.sendline("Which Services send traffic to the web Deployment?")
        await asyncio.to_thread(child.expect_exact, "graph_explore_data_entity")
        await asyncio.to_thread(child.expect_exact, "ragmesh> Done: ")
        await asyncio.to_thread(child.expect_exact, "you> ")
        # A write through the model's query tool is refused; the model is told why.
        fake_chat.script = [("graph_raw_query_data", {"query": "MATCH (d:Deployment) DETACH DELETE d"})]
        child.sendline("Delete the deployments")
        await asyncio.to_thread(child.expect_exact, "graph_raw_query_data: QUERY_NOT_READ_ONLY")
        await asyncio.to_thread(child.expect_exact, "you> ")
        child.sendline("/exit")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close()
    first = fake_chat.calls("tools")[0]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert {"search", "graph_explore_data_entity", "graph_raw_query_data"} <= offered
    explored = json.loads(fake_chat.calls("tools")[1]["messages"][-1]["content"])
    selects = [n for n in explored["neighbours"] if n["relation"] == "SELECTS"]
    assert [n["id"] for n in selects] == ["Service/shop/web"]
    assert selects[0]["direction"] == "incoming"


async def test_chat_without_the_graph_offers_no_graph_tools(mesh, fake_chat):
    fake_chat.reset()
    child = pexpect.spawn(
        RAGMESH,
        ["chat", "--collection", COLLECTION, "--model", "fake-chat"],
        env=env(mesh, RAGMESH_ANSWER_BASE_URL=fake_chat.url),
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    try:
        await asyncio.to_thread(child.expect_exact, "you> ")
        child.sendline("What is the web deployment?")
        await asyncio.to_thread(child.expect_exact, "you> ")
        child.sendline("/exit")
        await asyncio.to_thread(child.expect, pexpect.EOF)
    finally:
        child.close()
    offered = {t["function"]["name"] for t in fake_chat.calls("tools")[0]["tools"]}
    assert offered == {"search", "fetch_document"}
