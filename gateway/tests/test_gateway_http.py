"""The gateway over real HTTP with every backend down (addresses point at closed ports): everything the
gateway decides on its own -- settings, auth, validation, the error shape, body caps, readiness -- and the
503 a user gets when a service is unreachable."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from ragmesh_common.config import ConfigError, load
from ragmesh_gateway.app import create_app, run_gateway
from ragmesh_gateway.config import GatewaySettings

KEY = "s3cret-key"


def closed_port_addr() -> str:
    """host:port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def dead_settings(**overrides) -> GatewaySettings:
    addrs = {f"{svc}_addr": closed_port_addr() for svc in ("converter", "embedder", "indexer", "search", "answer")}
    return GatewaySettings(http_port=0, gateway_ready_timeout_seconds=1.0, **{**addrs, **overrides})


def assert_error(response: httpx.Response, status: int, reason: str, *, traced: bool = False) -> dict:
    """The one error shape, with the request id echoed; returns the error object."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "reason", "message", "details", "request_id", "trace_id"}
    assert error["reason"] == reason
    assert error["message"]
    assert isinstance(error["details"]["field_violations"], list)
    assert error["details"]["domain"].endswith("ragmesh")
    assert error["request_id"] == response.headers["x-request-id"]
    if not traced:
        assert error["trace_id"] == ""  # no span is recording
    return error


@pytest.fixture(scope="module")
async def gateway():
    async with run_gateway(dead_settings()) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
async def small_cap_url():
    async with run_gateway(dead_settings(max_upload_bytes=1024)) as url:
        yield url


@pytest.fixture(scope="module")
async def keyed():
    settings = dead_settings(api_keys=f"other-key, {KEY}")
    async with run_gateway(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


# --- settings ---------------------------------------------------------------------------------------------
def test_settings_refuse_non_loopback_without_keys(monkeypatch):
    monkeypatch.setenv("RAGMESH_HTTP_HOST", "0.0.0.0")
    with pytest.raises(ConfigError, match="RAGMESH_API_KEYS"):
        load(GatewaySettings)


def test_settings_allow_non_loopback_with_keys_or_when_told(monkeypatch):
    monkeypatch.setenv("RAGMESH_HTTP_HOST", "0.0.0.0")
    monkeypatch.setenv("RAGMESH_API_KEYS", " k1 ,k2,")
    settings = load(GatewaySettings)
    assert [k.get_secret_value() for k in settings.api_keys] == ["k1", "k2"]
    assert "k1" not in repr(settings)
    monkeypatch.delenv("RAGMESH_API_KEYS")
    monkeypatch.setenv("RAGMESH_ALLOW_UNAUTHENTICATED", "true")
    assert load(GatewaySettings).http_host == "0.0.0.0"


def test_settings_read_backend_addresses_and_limits(monkeypatch):
    monkeypatch.setenv("RAGMESH_SEARCH_ADDR", "search.mesh:7000")
    monkeypatch.setenv("RAGMESH_MAX_UPLOAD_BYTES", "2048")
    monkeypatch.setenv("RAGMESH_CORS_ORIGINS", "https://a.example,https://b.example")
    settings = load(GatewaySettings)
    assert settings.addresses["search"] == "search.mesh:7000"
    assert settings.addresses["indexer"] == "127.0.0.1:50053"
    assert settings.max_upload_bytes == 2048
    assert settings.cors_origins == ("https://a.example", "https://b.example")


# --- liveness, request ids, routing errors -----------------------------------------------------------------
async def test_health_is_ok_without_backends(gateway):
    response = await gateway.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-request-id"])


async def test_request_ids_made_here_are_distinct_version_4_uuids(gateway):
    ids = [(await gateway.get("/health")).headers["x-request-id"] for _ in range(50)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(hex=i).version == 4 and uuid.UUID(hex=i).variant == uuid.RFC_4122 for i in ids)


async def test_request_id_is_echoed_when_sane_and_replaced_when_not(gateway):
    response = await gateway.get("/health", headers={"X-Request-ID": "req-123.abc"})
    assert response.headers["x-request-id"] == "req-123.abc"
    response = await gateway.get("/nowhere", headers={"X-Request-ID": "bad id\twith junk"})
    error = assert_error(response, 404, "ROUTE_NOT_FOUND")
    assert error["request_id"] != "bad id\twith junk"


async def test_unknown_route_and_wrong_method(gateway):
    assert_error(await gateway.get("/api/v1/nope"), 404, "ROUTE_NOT_FOUND")
    response = await gateway.get("/api/v1/search")
    assert_error(response, 405, "METHOD_NOT_ALLOWED")
    assert "POST" in response.headers["allow"]


async def test_openapi_lists_the_routes(gateway):
    response = await gateway.get("/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/ingest",
        "/api/v1/ingest/batch",
        "/api/v1/ingest/file",
        "/api/v1/ingest_url",
        "/api/v1/convert",
        "/api/v1/search",
        "/api/v1/documents/{doc_id}",
        "/api/v1/collections",
        "/api/v1/collections/{name}",
        "/health",
        "/ready",
    ):
        assert path in paths, path
    assert set(paths["/api/v1/convert"]["post"]["requestBody"]["content"]) == {
        "multipart/form-data",
        "application/json",
    }
    assert (await gateway.get("/docs")).status_code == 200
    assert "securitySchemes" not in response.json()["components"]  # no keys: no auth to declare
    assert "ErrorResponse" in response.json()["components"]["schemas"]


async def test_openapi_declares_bearer_auth_when_keys_are_set(keyed):
    spec = (await keyed.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"] == {
        "HTTPBearer": {"type": "http", "scheme": "bearer", "description": "An API key from RAGMESH_API_KEYS."}
    }
    # Declared on every operation of the API (the routes that check a key), and on nothing else.
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            expected = [{"HTTPBearer": []}] if path.startswith("/api/v1/") else None
            assert operation.get("security") == expected, (method, path)


# --- validation (decided in the gateway, before any backend is called) -------------------------------------
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": 101}, "top_k"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x", "collection": "a", "collections": ["b"]}, "body"),
        ({"query": "x", "filters": {"k": {"nested": 1}}}, "filters.k"),
        ({"query": "x", "surprise": 1}, "surprise"),
        ({}, "query"),
    ],
)
async def test_search_rejects_invalid_bodies(gateway, body, field):
    error = assert_error(await gateway.post("/api/v1/search", json=body), 400, "REQUEST_INVALID")
    assert error["code"] == "INVALID_ARGUMENT"
    assert field in [v["field"] for v in error["details"]["field_violations"]]


async def test_bad_collection_names_are_refused_with_their_reason(gateway):
    error = assert_error(
        await gateway.post("/api/v1/search", json={"query": "x", "collection": "Bad Name!"}),
        400,
        "COLLECTION_NAME_INVALID",
    )
    assert error["details"]["field_violations"][0]["field"] == "collection"
    error = assert_error(
        await gateway.post("/api/v1/search", json={"query": "x", "collections": ["ok", "-bad"]}),
        400,
        "COLLECTION_NAME_INVALID",
    )
    assert error["details"]["field_violations"][0]["field"] == "collections[1]"
    assert_error(
        await gateway.post("/api/v1/ingest", json={"text": "t", "collection": "UPPER"}), 400, "COLLECTION_NAME_INVALID"
    )
    assert_error(
        await gateway.get("/api/v1/documents/d1", params={"collection": "no/slash"}), 400, "COLLECTION_NAME_INVALID"
    )
    assert_error(await gateway.get("/api/v1/documents/"), 400, "DOCUMENT_ID_INVALID")
    assert_error(await gateway.delete("/api/v1/documents/"), 400, "DOCUMENT_ID_INVALID")


async def test_ingest_rejects_invalid_bodies(gateway):
    assert_error(await gateway.post("/api/v1/ingest", json={"text": ""}), 400, "REQUEST_INVALID")
    assert_error(
        await gateway.post("/api/v1/ingest", content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "REQUEST_INVALID",
    )
    error = assert_error(
        await gateway.post("/api/v1/ingest", json={"text": "t", "metadata": {"bad key": 1}}), 400, "METADATA_INVALID"
    )
    assert error["details"]["field_violations"][0]["field"].startswith("metadata.")
    assert_error(
        await gateway.post("/api/v1/ingest", json={"text": "t", "doc_id": " padded "}), 400, "DOCUMENT_ID_INVALID"
    )
    error = assert_error(await gateway.post("/api/v1/ingest/batch", json={"documents": []}), 400, "REQUEST_INVALID")
    assert error["details"]["field_violations"][0]["field"] == "documents"
    error = assert_error(
        await gateway.post(
            "/api/v1/ingest/batch", json={"documents": [{"text": "a"}, {"text": "b", "doc_id": "\x01"}]}
        ),
        400,
        "DOCUMENT_ID_INVALID",
    )
    assert error["details"]["field_violations"][0]["field"] == "documents[1].doc_id"
    assert_error(await gateway.post("/api/v1/ingest_url", json={"collection": "x"}), 400, "REQUEST_INVALID")


@pytest.mark.parametrize(
    ("path", "raw", "reason"),
    [
        ("/api/v1/search", '{"query": "x", "score_threshold": NaN}', "REQUEST_INVALID"),
        ("/api/v1/search", '{"query": "x", "filters": {"k": "\\ud800"}}', "TEXT_INVALID"),
        ("/api/v1/ingest", '{"text": "abc", "metadata": {"k": 1e400}}', "REQUEST_INVALID"),
        ("/api/v1/ingest", '{"text": "abc", "metadata": {"k": "\\udfff"}}', "TEXT_INVALID"),
        ("/api/v1/ingest", '{"text": "abc", "title": "\\udfff"}', "TEXT_INVALID"),
        ("/api/v1/ingest", '{"text": "abc", "doc_id": "\\udfff"}', "TEXT_INVALID"),
        ("/api/v1/ingest", "[1, 2]", "REQUEST_INVALID"),
        ("/api/v1/ingest/batch", '{"documents": [{"text": "a", "title": "\\ud800"}]}', "TEXT_INVALID"),
    ],
)
async def test_malformed_json_values_are_400_never_500(gateway, path, raw, reason):
    response = await gateway.post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert_error(response, 400, reason)


async def test_ingest_file_form_errors(gateway):
    files = {"file": ("a.txt", b"hello", "text/plain")}
    for metadata in ("{broken", "[1, 2]", '"text"'):
        error = assert_error(
            await gateway.post("/api/v1/ingest/file", files=files, data={"metadata": metadata}),
            400,
            "METADATA_INVALID",
        )
        assert error["details"]["field_violations"][0]["field"] == "metadata"
    error = assert_error(await gateway.post("/api/v1/ingest/file", data={"collection": "x"}), 400, "REQUEST_INVALID")
    assert error["details"]["field_violations"][0]["field"] == "file"
    for field, value, reason in (
        ("collection", "Not Valid!", "COLLECTION_NAME_INVALID"),
        ("doc_id", " leading-space", "DOCUMENT_ID_INVALID"),
    ):
        error = assert_error(await gateway.post("/api/v1/ingest/file", files=files, data={field: value}), 400, reason)
        assert error["details"]["field_violations"][0]["field"] == field
    # A field sent more than once (found by schemathesis: three titles, the last one taken).
    repeated = await gateway.post("/api/v1/ingest/file", files=files, data={"title": ["one", "two"]})
    error = assert_error(repeated, 400, "REQUEST_INVALID")
    assert error["details"]["field_violations"][0]["field"] == "title"
    archive = await gateway.post(
        "/api/v1/jobs/archive", files={"file": ("a.zip", b"PK", "application/zip")}, data={"collection": ["a", "b"]}
    )
    assert assert_error(archive, 400, "REQUEST_INVALID")["details"]["field_violations"][0]["field"] == "collection"


async def test_convert_needs_a_file_or_a_url(gateway):
    error = assert_error(
        await gateway.post("/api/v1/convert", data={"other": "x"}, files={"f": ("a", b"1")}), 400, "REQUEST_INVALID"
    )
    assert error["details"]["field_violations"][0]["field"] == "file"
    assert_error(await gateway.post("/api/v1/convert", json={"uri": "https://example.com"}), 400, "REQUEST_INVALID")
    assert_error(
        await gateway.post("/api/v1/convert", content=b"{", headers={"content-type": "application/json"}),
        400,
        "REQUEST_INVALID",
    )
    assert_error(
        await gateway.post("/api/v1/convert", content=b"raw", headers={"content-type": "text/plain"}),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )


async def test_delete_collection_requires_confirmation(gateway):
    error = assert_error(await gateway.delete("/api/v1/collections/default"), 400, "CONFIRMATION_REQUIRED")
    assert error["details"]["collection"] == "default"
    assert_error(
        await gateway.delete("/api/v1/collections/default", params={"confirm": "false"}), 400, "CONFIRMATION_REQUIRED"
    )
    assert_error(
        await gateway.delete("/api/v1/collections/default", params={"confirm": "maybe"}), 400, "REQUEST_INVALID"
    )


# --- upload cap --------------------------------------------------------------------------------------------
def _multipart(payload: bytes) -> tuple[bytes, str]:
    boundary = "ragmeshboundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode()
        + payload
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


async def test_oversized_upload_with_content_length_is_413(small_cap_url):
    body, content_type = _multipart(b"x" * 4096)
    async with httpx.AsyncClient(base_url=small_cap_url) as client:
        response = await client.post("/api/v1/ingest/file", content=body, headers={"content-type": content_type})
        error = assert_error(response, 413, "PAYLOAD_TOO_LARGE")
        assert error["details"]["limit_bytes"] == "1024"
        # JSON bodies are capped the same way.
        assert_error(await client.post("/api/v1/ingest", json={"text": "y" * 4096}), 413, "PAYLOAD_TOO_LARGE")


async def test_oversized_chunked_upload_is_413(small_cap_url):
    body, content_type = _multipart(b"x" * 4096)

    async def pieces():
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    async with httpx.AsyncClient(base_url=small_cap_url) as client:
        for path in ("/api/v1/ingest/file", "/api/v1/convert"):
            response = await client.post(path, content=pieces(), headers={"content-type": content_type})
            assert "content-length" not in response.request.headers
            assert_error(response, 413, "PAYLOAD_TOO_LARGE")


async def test_small_upload_passes_the_cap(small_cap_url):
    # Under the cap the request goes through to the (down) backend: the cap did not refuse it.
    body, content_type = _multipart(b"x" * 100)
    async with httpx.AsyncClient(base_url=small_cap_url) as client:
        response = await client.post("/api/v1/ingest/file", content=body, headers={"content-type": content_type})
        assert_error(response, 503, "SERVICE_UNAVAILABLE")


# --- auth --------------------------------------------------------------------------------------------------
async def test_api_key_missing_wrong_and_right(keyed):
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"}):
        response = await keyed.get("/api/v1/collections", headers=headers)
        error = assert_error(response, 401, "API_KEY_MISSING")
        assert error["code"] == "UNAUTHENTICATED"
        assert response.headers["www-authenticate"] == "Bearer"
    response = await keyed.get("/api/v1/collections", headers={"Authorization": f"Bearer {KEY}x"})
    assert_error(response, 401, "API_KEY_INVALID")
    assert response.headers["www-authenticate"] == "Bearer"
    # The right key gets past auth (to a refusal the gateway makes itself).
    response = await keyed.delete("/api/v1/collections/default", headers={"Authorization": f"bearer {KEY}"})
    assert_error(response, 400, "CONFIRMATION_REQUIRED")


async def test_health_ready_and_docs_stay_open_with_keys(keyed):
    assert (await keyed.get("/health")).status_code == 200
    assert (await keyed.get("/openapi.json")).status_code == 200
    assert (await keyed.get("/docs")).status_code == 200
    assert_error(await keyed.get("/ready"), 503, "SERVICES_NOT_READY")  # not 401


# --- backends down -----------------------------------------------------------------------------------------
async def test_ready_is_503_naming_every_service_that_is_down(gateway):
    error = assert_error(await gateway.get("/ready"), 503, "SERVICES_NOT_READY")
    assert error["code"] == "UNAVAILABLE"
    assert error["details"]["services"].split(",") == ["converter", "embedder", "indexer", "search", "answer"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "service"),
    [
        ("POST", "/api/v1/search", {"json": {"query": "hello"}}, "search"),
        ("GET", "/api/v1/collections", {}, "search"),
        ("GET", "/api/v1/documents/some-doc", {}, "search"),
        ("POST", "/api/v1/ingest", {"json": {"text": "hello"}}, "indexer"),
        ("DELETE", "/api/v1/documents/some-doc", {}, "indexer"),
        ("POST", "/api/v1/convert", {"json": {"url": "https://example.com"}}, "converter"),
        ("POST", "/api/v1/convert", {"files": {"file": ("a.txt", b"hi", "text/plain")}}, "converter"),
        ("POST", "/api/v1/ask", {"json": {"query": "hello"}}, "answer"),
        ("POST", "/api/v1/ask", {"json": {"query": "hello", "stream": True}}, "answer"),
        ("GET", "/api/v1/sessions/abc", {}, "answer"),
    ],
)
async def test_a_backend_that_is_down_is_503_naming_it(gateway, method, path, kwargs, service):
    error = assert_error(await gateway.request(method, path, **kwargs), 503, "SERVICE_UNAVAILABLE")
    assert error["code"] == "UNAVAILABLE"
    assert error["details"]["service"] == service


# --- the last resort ---------------------------------------------------------------------------------------
async def test_unexpected_exception_is_a_logged_500_in_the_same_shape(caplog):
    app = create_app(dead_settings())

    @app.get("/boom")
    async def boom():
        raise RuntimeError("secret internals")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        response = await client.get("/boom", headers={"X-Request-ID": "r-1"})
    error = assert_error(response, 500, "INTERNAL_ERROR")
    assert error["request_id"] == "r-1"
    assert "secret internals" not in response.text
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


async def test_error_body_carries_the_current_trace_id():
    class RecordingSpan(trace.NonRecordingSpan):
        def is_recording(self) -> bool:
            return True

    context = trace.SpanContext(trace_id=0x1234ABCD, span_id=0x42, is_remote=False)
    transport = httpx.ASGITransport(app=create_app(dead_settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        with trace.use_span(RecordingSpan(context)):
            error = assert_error(await client.get("/nowhere"), 404, "ROUTE_NOT_FOUND", traced=True)
    assert error["trace_id"] == "000000000000000000000000" + "1234abcd"


async def test_cors_preflight_allows_configured_origins_only():
    app = create_app(dead_settings(cors_origins="https://app.example"))
    transport = httpx.ASGITransport(app=app)
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        allowed = await client.options("/api/v1/search", headers={"Origin": "https://app.example", **preflight})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        other = await client.options("/api/v1/search", headers={"Origin": "https://evil.example", **preflight})
        assert "access-control-allow-origin" not in other.headers
        simple = await client.get("/health", headers={"Origin": "https://app.example"})
        assert "X-Request-ID" in simple.headers["access-control-expose-headers"]


@pytest.mark.e2e  # ragmesh serve gateway in a child process
def test_serve_gateway_runs_until_sigterm_then_exits_cleanly():
    port = int(closed_port_addr().rsplit(":", 1)[1])
    env = {**os.environ, "RAGMESH_HTTP_PORT": str(port), "RAGMESH_SHUTDOWN_GRACE_SECONDS": "1"}
    ragmesh = str(Path(sys.executable).with_name("ragmesh"))  # the entrypoint the gateway image runs
    process = subprocess.Popen([ragmesh, "serve", "gateway"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(600):  # wait for start-up (bounded; no timing is asserted)
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        else:
            raise AssertionError("the gateway did not start")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    assert b"shutting down" in out
