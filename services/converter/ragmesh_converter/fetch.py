"""Fetching a URL for conversion, with the SSRF guard.

Every hop (the first request and each redirect, followed here rather than by httpx) resolves the host,
refuses it when any of its addresses is not public (unless private URLs are allowed), and then connects to
the address it checked, not to a second lookup, so DNS rebinding cannot slip a private address in between.
The body is streamed and dropped as soon as it passes the size cap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from email.message import Message
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import PurePosixPath
from urllib.parse import unquote

import httpx
from ragmesh_common.telemetry import setup_telemetry

from . import errors
from .config import ConverterSettings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_CHARS = 8192
_REDIRECTS = {301, 302, 303, 307, 308}


async def resolve_host(host: str, port: int) -> list[Address]:
    """Every address `host` resolves to (the guard checks all of them, and connects to the first)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))


def is_public(address: Address) -> bool:
    """True for globally routable unicast addresses; false for private, loopback, link-local, multicast,
    reserved, shared (CGNAT) and unspecified ones, including IPv4 addresses mapped into IPv6."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not (
        address.is_multicast or address.is_reserved or address.is_link_local or address.is_loopback
    )


def parse_url(url: str) -> httpx.URL:
    """An absolute http(s) URL with a host, or URL_INVALID."""
    if not url or len(url) > MAX_URL_CHARS or any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise errors.url_invalid(url, f"the URL must be 1-{MAX_URL_CHARS} characters without spaces or controls")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise errors.url_invalid(url, f"the URL is malformed ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise errors.url_invalid(url, "only http and https URLs can be fetched")
    if not parsed.host:
        raise errors.url_invalid(url, "the URL has no host")
    return parsed


@dataclass(frozen=True)
class Fetched:
    """A fetched response body and what the server said about it."""

    data: bytes
    url: str  # after redirects
    filename: str
    mime_type: str
    charset: str | None


class UrlFetcher:
    """One long-lived httpx client; `fetch` applies the SSRF guard, the size cap and the time limit."""

    def __init__(self, settings: ConverterSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._client = httpx.AsyncClient(
            transport=transport,
            follow_redirects=False,
            trust_env=False,  # a proxy would connect to names we did not check
            timeout=httpx.Timeout(settings.fetch_timeout_seconds),
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),  # no state between requests
            headers={
                "User-Agent": settings.user_agent,
                "Accept": "text/markdown, text/html;q=0.9, text/plain;q=0.8, */*;q=0.1",
            },
        )
        setup_telemetry("converter").instrument_httpx(self._client)

    async def close(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str) -> Fetched:
        current = parse_url(url)
        try:
            async with asyncio.timeout(self.settings.fetch_timeout_seconds):
                for _ in range(self.settings.max_redirects + 1):
                    result = await self._hop(current)
                    if isinstance(result, Fetched):
                        return result
                    current = result
        except TimeoutError:
            raise errors.url_fetch_timeout(url, self.settings.fetch_timeout_seconds) from None
        raise errors.url_fetch_failed(
            url, f"more than {self.settings.max_redirects} redirects", cause="too_many_redirects"
        )

    async def _hop(self, url: httpx.URL) -> Fetched | httpx.URL:
        """One request: the body, or the URL a redirect points to (already validated)."""
        address = await self._checked_address(url)
        extensions = {"sni_hostname": url.raw_host.decode("ascii")} if url.scheme == "https" else {}
        request = self._client.build_request(
            "GET",
            url.copy_with(host=str(address)),
            headers={"Host": url.netloc.decode("ascii")},
            extensions=extensions,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise errors.url_fetch_timeout(str(url), self.settings.fetch_timeout_seconds) from None
        except httpx.HTTPError as exc:
            raise errors.url_fetch_failed(str(url), f"{type(exc).__name__}: {exc}", cause=type(exc).__name__) from None
        try:
            if response.status_code in _REDIRECTS and "location" in response.headers:
                target = url.join(response.headers["location"])
                return parse_url(str(target))
            if not response.is_success:
                raise errors.url_fetch_failed(
                    str(url), f"the server answered HTTP {response.status_code}", http_status=response.status_code
                )
            return await self._read(url, response)
        finally:
            await response.aclose()

    async def _checked_address(self, url: httpx.URL) -> Address:
        host = url.raw_host.decode("ascii")  # IDNA-encoded, as DNS and TLS want it
        try:
            addresses = await resolve_host(host, url.port or (443 if url.scheme == "https" else 80))
        except OSError as exc:
            raise errors.url_fetch_failed(str(url), f"{host} could not be resolved ({exc})", cause="dns") from None
        if not addresses:
            raise errors.url_fetch_failed(str(url), f"{host} has no addresses", cause="dns")
        if not self.settings.allow_private_urls:
            for address in addresses:
                if not is_public(address):
                    raise errors.url_not_allowed(str(url), host, str(address))
        return addresses[0]

    async def _read(self, url: httpx.URL, response: httpx.Response) -> Fetched:
        cap = self.settings.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise errors.payload_too_large(int(declared), cap, what="the response body")
        body = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                if len(body) + len(chunk) > cap:
                    raise errors.payload_too_large(None, cap, what="the response body")
                body += chunk
        except httpx.TimeoutException:
            raise errors.url_fetch_timeout(str(url), self.settings.fetch_timeout_seconds) from None
        except httpx.HTTPError as exc:
            raise errors.url_fetch_failed(str(url), f"{type(exc).__name__}: {exc}", cause=type(exc).__name__) from None
        header = Message()
        header["content-type"] = response.headers.get("content-type", "")
        header["content-disposition"] = response.headers.get("content-disposition", "")
        return Fetched(
            data=bytes(body),
            url=str(url),
            filename=header.get_filename() or unquote(PurePosixPath(url.path).name),
            mime_type=header.get_content_type() if response.headers.get("content-type") else "",
            charset=header.get_content_charset(),
        )
