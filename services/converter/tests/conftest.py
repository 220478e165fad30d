"""Fixtures for the converter tests: in-process servers on port 0 reached over real gRPC, a local HTTP
server for URL fetches, and honest builders for documents we cannot ship (an encrypted PDF)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from ragmesh.converter.v1 import converter_service_pb2_grpc as pb_grpc
from ragmesh_converter.config import ConverterSettings
from ragmesh_converter.server import create_server

# The shared samples sit next to the repository: <repo>/../shared/documents (/work/shared/documents here).
DOCUMENTS = Path(__file__).resolve().parents[3].parent / "shared" / "documents"


SMALL_CAP = 64 * 1024


@pytest.fixture
def documents() -> Path:
    """/work/shared/documents (the shared sample files)."""
    if not DOCUMENTS.is_dir():
        pytest.skip(f"shared sample documents not found at {DOCUMENTS}")
    return DOCUMENTS


@pytest.fixture
def small_cap() -> int:
    """The size cap of `small_converter`."""
    return SMALL_CAP


@pytest.fixture(scope="session")
async def start_converter() -> AsyncIterator[Callable[..., object]]:
    """Start converter servers with given settings; returns (stub, service). All stop at the end."""
    running = []

    async def start(http_transport=None, **settings):
        service = create_server(ConverterSettings(port=0, **settings), http_transport=http_transport)
        await service.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        running.append((service, channel))
        return pb_grpc.ConverterServiceStub(channel), service

    yield start
    for service, channel in running:
        await channel.close()
        await service.stop(0)


@pytest.fixture(scope="session")
async def converter(start_converter) -> pb_grpc.ConverterServiceStub:
    """A converter with default settings (50 MB cap, private URLs refused)."""
    stub, _ = await start_converter()
    return stub


@pytest.fixture(scope="session")
async def small_converter(start_converter) -> pb_grpc.ConverterServiceStub:
    """A converter with a 64 KiB cap that may fetch from 127.0.0.1."""
    stub, _ = await start_converter(
        max_bytes=SMALL_CAP, max_unpacked_bytes=4 * SMALL_CAP, allow_private_urls=True, max_redirects=2
    )
    return stub


# --- a local web site ---------------------------------------------------------------------------------
class Site:
    """A threaded HTTP server on 127.0.0.1 with fixed routes; `paths` records what was requested."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.release = threading.Event()  # lets the /slow handler finish at teardown
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                site.paths.append(self.path)
                route = site.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_error(404, "not here")
                    return
                route(self)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {}
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(
        self, path: str, body: bytes, content_type: str, *, status: int = 200, headers=None, length: bool = True
    ) -> None:
        def route(handler: http.server.BaseHTTPRequestHandler) -> None:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            for key, value in (headers or {}).items():
                handler.send_header(key, value)
            if length:
                handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)  # without Content-Length, HTTP/1.0 ends the body by closing

        self.routes[path] = route

    def redirect(self, path: str, location: str) -> None:
        self.add(path, b"", "text/plain", status=302, headers={"Location": location})

    def stall(self, path: str) -> None:
        def route(handler: http.server.BaseHTTPRequestHandler) -> None:
            self.release.wait(60)

        self.routes[path] = route

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def site() -> Site:
    server = Site()
    yield server
    server.close()


# --- an encrypted PDF, built by the PDF 1.7 standard security handler (V1/R2, RC4 40-bit) ---------------
_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


@pytest.fixture
def make_encrypted_pdf() -> Callable[..., bytes]:
    return encrypted_pdf


def encrypted_pdf(text: str, user_password: bytes, owner_password: bytes = b"owner") -> bytes:
    """A one-page PDF whose content only opens with `user_password` (PDF 1.7, 7.6.3, algorithms 2-4)."""
    doc_id = hashlib.md5(text.encode()).digest()
    permissions = (-44).to_bytes(4, "little", signed=True)
    owner = _rc4(hashlib.md5((owner_password + _PAD)[:32]).digest()[:5], (user_password + _PAD)[:32])
    key = hashlib.md5((user_password + _PAD)[:32] + owner + permissions + doc_id).digest()[:5]
    user = _rc4(key, _PAD)

    def seal(number: int, data: bytes) -> bytes:
        return _rc4(hashlib.md5(key + number.to_bytes(3, "little") + b"\0\0").digest()[:10], data)

    content = seal(5, f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode("latin-1"))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> "
        b"/Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -44 >>" % (owner.hex().encode(), user.hex().encode()),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    ident = doc_id.hex().encode()
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 6 0 R /ID [<%s> <%s>] >>\n" % (len(objects) + 1, ident, ident)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


# --- a password-protected Office file's container (MS-OFFCRYPTO: an OLE file with EncryptionInfo and ----
# EncryptedPackage streams instead of the ZIP package). The stream contents are filler, not AES output:
# what makes Office (and the converter) treat the file as encrypted is this structure.
_FREE, _END, _FAT, _NOSTREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF


def _dir_entry(
    name: str, kind: int, *, right: int = _NOSTREAM, child: int = _NOSTREAM, start: int = _END, size: int = 0
) -> bytes:
    encoded = (name + "\0").encode("utf-16-le") if name else b""
    return (
        encoded.ljust(64, b"\0")
        + len(encoded).to_bytes(2, "little")
        + bytes([kind, 1])
        + _NOSTREAM.to_bytes(4, "little")
        + right.to_bytes(4, "little")
        + child.to_bytes(4, "little")
        + bytes(16 + 4 + 8 + 8)
        + start.to_bytes(4, "little")
        + size.to_bytes(8, "little")
    )


def encrypted_office_container() -> bytes:
    stream_sectors = 8  # 4096-byte streams live in the regular FAT, not the mini stream
    fat = [_FAT, _END]
    for first in (2, 2 + stream_sectors):
        fat += [*range(first + 1, first + stream_sectors), _END]
    fat += [_FREE] * (128 - len(fat))
    header = (
        bytes.fromhex("D0CF11E0A1B11AE1")
        + bytes(16)
        + (0x3E).to_bytes(2, "little")
        + (3).to_bytes(2, "little")
        + bytes.fromhex("FEFF")
        + (9).to_bytes(2, "little")
        + (6).to_bytes(2, "little")
        + bytes(6)
        + (0).to_bytes(4, "little")
        + (1).to_bytes(4, "little")
        + (1).to_bytes(4, "little")
        + bytes(4)
        + (4096).to_bytes(4, "little")
        + _END.to_bytes(4, "little")
        + (0).to_bytes(4, "little")
        + _END.to_bytes(4, "little")
        + (0).to_bytes(4, "little")
        + (0).to_bytes(4, "little")
        + _FREE.to_bytes(4, "little") * 108
    )
    directory = (
        _dir_entry("Root Entry", 5, child=1)
        + _dir_entry("EncryptionInfo", 2, right=2, start=2, size=4096)
        + _dir_entry("EncryptedPackage", 2, start=2 + stream_sectors, size=4096)
        + _dir_entry("", 0)
    )
    fat_sector = b"".join(entry.to_bytes(4, "little") for entry in fat)
    return header + fat_sector + directory + bytes([4, 0, 4, 0]) * 1024 + bytes(range(256)) * 16


@pytest.fixture
def make_encrypted_office() -> Callable[[], bytes]:
    return encrypted_office_container
