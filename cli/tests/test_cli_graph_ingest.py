"""`ragmesh graph ingest` as a person runs it (a subprocess on an 80-column terminal) with this repository's own
Kubernetes manifests (`kubectl kustomize deploy/k8s`) into a real mesh with the graph service: the counts per
entity and relation type in a table that fits, and the graph they describe explorable at once."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

pytestmark = pytest.mark.asyncio(loop_scope="session")
ROOT = Path(__file__).resolve().parents[2]
RAGMESH = str(Path(sys.executable).with_name("ragmesh"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    return await mesh_factory(graph=True)


@pytest.fixture(scope="module")
def k8s_file(tmp_path_factory) -> Path:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/k8s (kubectl kustomize)")
    rendered = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy" / "k8s")], capture_output=True, check=True)
    path = tmp_path_factory.mktemp("k8s") / "k8s.yaml"
    path.write_bytes(rendered.stdout)
    return path


async def ragmesh(mesh, *args: str) -> tuple[int, str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "OTEL_"))}
    addrs = {f"RAGMESH_{name.upper()}_ADDR": addr for name, addr in mesh.addrs.items()}
    process = await asyncio.create_subprocess_exec(
        RAGMESH,
        *args,
        env={**clean, **addrs, "COLUMNS": "80", "TERM": "dumb"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return process.returncode or 0, out.decode(), err.decode()


def cells(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│") if c.strip()] for line in out.splitlines() if "│" in line]


async def test_ingest_prints_counts_per_type_in_80_columns_then_the_graph_is_there(mesh, k8s_file, tmp_path):
    kinds = [line.removeprefix("kind: ") for line in k8s_file.read_text().splitlines() if line.startswith("kind: ")]
    code, out, err = await ragmesh(mesh, "graph", "ingest", str(k8s_file), "-c", "k8s")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = cells(out)
    for kind in ("Deployment", "Service", "ConfigMap"):
        assert ["entity", kind, str(kinds.count(kind))] in rows
    assert any(row[:2] == ["relation", "SELECTS"] for row in rows)
    assert any(row[:2] == ["relation", "REFERENCES"] for row in rows)

    code, out, _ = await ragmesh(mesh, "graph", "explore", "Deployment/ragmesh/search", "-c", "k8s")
    assert code == 0 and ["1", "<-[SELECTS]-", "Service/ragmesh/search"] in cells(out)

    # Ingesting the same file again replaces the entities: the counts stay.
    code, again, _ = await ragmesh(mesh, "graph", "ingest", str(k8s_file), "-c", "k8s")
    assert code == 0 and cells(again) == rows

    missing = tmp_path / "absent.yaml"
    code, _, err = await ragmesh(mesh, "graph", "ingest", str(missing), "-c", "k8s")
    assert code == 2 and "absent.yaml" in err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "9bad", "primary_key": ["name"], "properties": {"name": "x"}}\n')
    code, _, err = await ragmesh(mesh, "graph", "ingest", str(bad), "-c", "k8s")
    assert code == 1 and "INVALID_ARGUMENT ENTITY_INVALID" in err
