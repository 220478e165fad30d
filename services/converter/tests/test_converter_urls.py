"""Convert(url=...): fetches from a local web site, the SSRF guard, redirects, caps and fetch failures."""

from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest
from ragmesh.converter.v1 import converter_service_pb2 as pb
from ragmesh_converter import fetch

PAGE = b"<html><head><title>Local Page</title></head><body><h1>Hello</h1><p>Fetched body text.</p></body></html>"
# A public address (Cloudflare's resolver); in the redirect test the network routes it to the local site.
PUBLIC_IP = "1.1.1.1"


@pytest.fixture(scope="session")
def pages(site):
    site.add("/page.html", PAGE, "text/html; charset=utf-8")
    site.add("/report", PAGE, "text/html", headers={"Content-Disposition": 'attachment; filename="report.html"'})
    site.redirect("/moved", "/page.html")
    site.redirect("/loop", "/loop")
    site.redirect("/to-secret", f"{site.base}/secret")
    site.add("/secret", b"internal only", "text/plain")
    site.add("/big", b"x" * (64 * 1024 + 1), "text/plain")
    site.add("/big-unannounced", b"y" * (64 * 1024 + 1), "text/plain", length=False)
    site.stall("/slow")
    return site


def _url(url: str) -> pb.ConvertRequest:
    return pb.ConvertRequest(url=url)


async def test_fetches_and_converts_a_page(small_converter, pages):
    reply = await small_converter.Convert(_url(f"{pages.base}/page.html"))
    doc = reply.document
    assert "Fetched body text." in doc.markdown
    assert doc.title == "Local Page"
    assert doc.mime_type == "text/html"
    assert doc.url == f"{pages.base}/page.html"
    assert doc.filename == "page.html"
    assert doc.size_bytes == len(PAGE)


async def test_filename_from_content_disposition(small_converter, pages):
    reply = await small_converter.Convert(_url(f"{pages.base}/report"))
    assert reply.document.filename == "report.html"


async def test_follows_redirects_and_reports_the_final_url(small_converter, pages):
    reply = await small_converter.Convert(_url(f"{pages.base}/moved"))
    assert reply.document.url == f"{pages.base}/page.html"
    assert "Fetched body text." in reply.document.markdown


async def test_too_many_redirects(small_converter, pages, rpc_error):
    error = await rpc_error(small_converter.Convert(_url(f"{pages.base}/loop")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "URL_FETCH_FAILED")
    assert error.metadata["cause"] == "too_many_redirects"


async def test_http_error_status(small_converter, pages, rpc_error):
    error = await rpc_error(small_converter.Convert(_url(f"{pages.base}/missing")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "URL_FETCH_FAILED")
    assert error.metadata["http_status"] == "404"


@pytest.mark.parametrize("path", ["/big", "/big-unannounced"])
async def test_body_over_the_cap(small_converter, pages, rpc_error, small_cap, path):
    error = await rpc_error(small_converter.Convert(_url(f"{pages.base}{path}")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE")
    assert error.metadata["max_bytes"] == str(small_cap)


async def test_connection_refused(small_converter, rpc_error):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    error = await rpc_error(small_converter.Convert(_url(f"http://127.0.0.1:{port}/")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "URL_FETCH_FAILED")
    assert error.metadata["cause"] == "ConnectError"


async def test_unresolvable_host(small_converter, rpc_error, monkeypatch):
    async def no_such_host(host: str, port: int):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(fetch, "resolve_host", no_such_host)
    error = await rpc_error(small_converter.Convert(_url("http://no-such-host.example/")))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "URL_FETCH_FAILED")
    assert error.metadata["cause"] == "dns"


async def test_fetch_timeout(start_converter, pages, rpc_error):
    stub, _ = await start_converter(allow_private_urls=True, fetch_timeout_seconds=0.5)
    error = await rpc_error(stub.Convert(_url(f"{pages.base}/slow")))
    assert (error.code.name, error.reason) == ("DEADLINE_EXCEEDED", "URL_FETCH_TIMEOUT")
    assert error.domain == "converter.ragmesh"


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/file.pdf",
        "gopher://example.com/",
        "example.com/page",
        "http://",
        "http:///path",
        "https://exa mple.com/",
        "http://[::1/",
        "",
    ],
)
async def test_invalid_urls(converter, rpc_error, url):
    error = await rpc_error(converter.Convert(_url(url)))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", "URL_INVALID")


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "169.254.169.254",
        "10.0.0.8",
        "0.0.0.0",
        "[::ffff:127.0.0.1]",
        "100.64.0.1",
        "224.0.0.1",
    ],
)
async def test_default_settings_refuse_non_public_addresses(converter, pages, rpc_error, host):
    before = len(pages.paths)
    url = f"http://{host}:{pages.port}/page.html"
    error = await rpc_error(converter.Convert(_url(url)))
    assert (error.code.name, error.reason) == ("PERMISSION_DENIED", "URL_NOT_ALLOWED")
    assert error.domain == "converter.ragmesh"
    assert len(pages.paths) == before  # refused before connecting


async def test_public_name_resolving_to_a_private_address_is_refused(converter, rpc_error, monkeypatch):
    async def intranet(host: str, port: int):
        return [ipaddress.ip_address("93.184.215.14"), ipaddress.ip_address("192.168.1.20")]

    monkeypatch.setattr(fetch, "resolve_host", intranet)
    error = await rpc_error(converter.Convert(_url("https://docs.example.com/handbook.pdf")))
    assert (error.code.name, error.reason) == ("PERMISSION_DENIED", "URL_NOT_ALLOWED")
    assert error.metadata["host"] == "docs.example.com"
    assert error.metadata["address"] == "192.168.1.20"


class RouteToSite(httpx.AsyncBaseTransport):
    """The network of the redirect test: PUBLIC_IP:80 is the local site; everything else is real."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == PUBLIC_IP:
            request.url = request.url.copy_with(host="127.0.0.1", port=self.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_redirect_to_a_private_address_is_refused(start_converter, pages, rpc_error, monkeypatch):
    stub, _ = await start_converter(http_transport=RouteToSite(pages.port))  # private URLs refused

    async def public_site(host: str, port: int):
        if host == "www.example.com":
            return [ipaddress.ip_address(PUBLIC_IP)]
        return await resolve(host, port)

    resolve = fetch.resolve_host
    monkeypatch.setattr(fetch, "resolve_host", public_site)

    # The public site itself is fetched (the Host header names it) ...
    reply = await stub.Convert(_url("http://www.example.com/page.html"))
    assert "Fetched body text." in reply.document.markdown
    # ... but its redirect to 127.0.0.1 is checked again and refused, before the secret is requested.
    error = await rpc_error(stub.Convert(_url("http://www.example.com/to-secret")))
    assert (error.code.name, error.reason) == ("PERMISSION_DENIED", "URL_NOT_ALLOWED")
    assert error.metadata["address"] == "127.0.0.1"
    assert "/to-secret" in pages.paths
    assert "/secret" not in pages.paths
