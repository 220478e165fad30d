"""The contract is the spec: schemathesis (every check, none turned off for any operation; every phase: examples,
coverage, fuzzing and stateful; a fixed seed and a bounded example count) drives the real gateway over the
in-process mesh (hash embedder, and the graph service with RAGMESH_GRAPH_ENABLED, so that the graph routes are in
the document) from its own /openapi.json, and finds nothing: no server error, no schema-valid request refused, no
invalid one accepted, no response outside the spec, no deleted resource still answering. `schemathesis.toml` at
the repository root says which answers are about content (a file, a URL, a Cypher text, an entity) for the
operations that take one, and turns one check off for one operation, saying why."""

from __future__ import annotations

import asyncio
import os
import sys
import tomllib
from pathlib import Path

import pytest
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

ROOT = Path(__file__).resolve().parents[1]
ST = Path(sys.executable).with_name("st")
SEED = "20261123"
MAX_EXAMPLES = "10"


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory(graph=True)


async def _schemathesis(url: str, tmp_path: Path) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        # Every check is on by default in schemathesis 4 (`--checks all` would also mark each one as set on the
        # command line, which outranks the per-operation settings in schemathesis.toml).
        str(ST),
        "run",
        f"{url}/openapi.json",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        MAX_EXAMPLES,
        "--seed",
        SEED,
        "--no-color",
        "--request-timeout",
        "60",
        # Every check runs, max_response_time too, but as "answers before the client gives up", not as a speed
        # test: timings belong in bench/, and this machine is shared.
        "--max-response-time",
        "60",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEMATHESIS_TELEMETRY": "false", "COLUMNS": "200"},
    )
    output, _ = await process.communicate()
    return process.returncode, output.decode(errors="replace")


@pytest.mark.timeout(900)  # ~5 min of requests on a quiet 2-core machine; the default 300 s is for one test
async def test_schemathesis_finds_nothing(mesh, tmp_path):
    assert ST.exists(), "schemathesis is needed (requirements-dev.txt)"
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, graph_enabled=True, **addrs)) as url:
        code, output = await _schemathesis(url, tmp_path)
    assert "Tested:" in output, output[-3000:]
    assert code == 0, output[-12000:]
    # Every check runs on every operation but one, whose exception schemathesis.toml explains.
    operations = tomllib.loads((ROOT / "schemathesis.toml").read_text())["operations"]
    turned_off = [
        (op.get("include-path"), check)
        for op in operations
        for check, options in op.get("checks", {}).items()
        if options.get("enabled") is False
    ]
    assert turned_off == [("/api/v1/ingest/file", "negative_data_rejection")]


async def test_the_spec_declares_bearer_auth_exactly_when_keys_are_set(mesh):
    import httpx

    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    for keys, secured in (("", False), ("k1:read", True)):
        async with run_gateway(GatewaySettings(http_port=0, api_keys=keys, **addrs)) as url:
            async with httpx.AsyncClient() as http:
                spec = (await http.get(f"{url}/openapi.json")).json()
        operations = [op for path, ops in spec["paths"].items() if path.startswith("/api/") for op in ops.values()]
        assert all(("security" in op) is secured for op in operations)
        assert ("securitySchemes" in spec.get("components", {})) is secured
        assert all(("401" in op["responses"]) is secured for op in operations)


async def test_a_wrong_method_answers_405_with_every_allowed_method(mesh):
    import httpx

    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, **addrs)) as url, httpx.AsyncClient(base_url=url) as http:
        response = await http.put("/api/v1/documents/some/doc")
        assert response.status_code == 405
        assert response.headers["allow"] == "DELETE, GET"
        assert response.json()["error"]["reason"] == "METHOD_NOT_ALLOWED"
        response = await http.post("/api/v1/collections/docs")
        assert response.status_code == 405 and response.headers["allow"] == "DELETE"


async def test_whole_numbers_beyond_64_bits_filter_as_numbers_not_a_server_error(mesh):
    # Found by schemathesis: 3e249 arrived as a whole double, became a Python int too big for the store.
    import httpx

    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, **addrs)) as url, httpx.AsyncClient(base_url=url) as http:
        ingested = await http.post(
            "/api/v1/ingest", json={"text": "Big numbers.", "metadata": {"n": 3e249}, "collection": "big"}
        )
        assert ingested.status_code == 200, ingested.text
        found = await http.post(
            "/api/v1/search",
            json={"query": "big numbers", "collection": "big", "filters": {"n": [3e249, 1.5, True, "x"]}},
        )
        assert found.status_code == 200, found.text
        assert [hit["metadata"]["n"] for hit in found.json()["results"]] == [pytest.approx(3e249)]
