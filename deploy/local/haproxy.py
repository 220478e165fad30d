"""HAProxy (Debian's `haproxy` package) in front of gateway replicas: a haproxy.cfg writer and a runner.

Round robin per request, no affinity, health checks on GET /ready; a refused connection is retried on the other
replica (`option redispatch`), and so is an empty response (a gateway gone mid-request) to a read or a search,
never to a write (`retry-on conn-failure empty-response`, `http-request disable-l7-retry`). The runtime API on a
Unix socket (`set_state`) takes a replica out of rotation before a rolling restart ("drain": no new requests, the
ones in flight finish) and puts it back ("ready").
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

BACKEND = "gateways"


def haproxy_binary() -> str | None:
    """The haproxy executable (PATH, then /usr/sbin where Debian puts it), or None when it is not installed."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def config(port: int, servers: dict[str, int], admin_socket: Path, *, check_interval_ms: int = 1000) -> str:
    """haproxy.cfg: one frontend on 127.0.0.1:`port`, round robin over `servers` (name -> loopback port)."""
    lines = [
        "global",
        f"    stats socket {admin_socket} mode 600 level admin",
        "    maxconn 4096",
        "    log stdout format raw local0",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    option dontlog-normal",  # logged: servers going down and up, and requests that failed
        "    timeout connect 2s",
        "    timeout client 120s",
        "    timeout server 120s",
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response",
        "frontend ragmesh",
        f"    bind 127.0.0.1:{port}",
        f"    default_backend {BACKEND}",
        f"backend {BACKEND}",
        "    balance roundrobin",
        # A request already sent to a gateway that died before answering (empty response) is sent again to the
        # other only when that is safe: reads, and searches (POST /api/v1/search has no side effect). Any other
        # request in flight fails; a write is never sent twice. A refused connection is always retried.
        "    acl retry_safe method GET HEAD OPTIONS",
        "    acl retry_safe path /api/v1/search",
        "    http-request disable-l7-retry unless retry_safe",
        "    option httpchk GET /ready",
        "    http-check expect status 200",
        # fall 3 x 1 s: a dead gateway leaves the rotation within 3 s (meanwhile its refused connections are sent
        # to the other); a /ready slow under load (5 s allowed) or one failed does not take a live one out.
        # rise 1: back at its first 200.
        "    timeout check 5s",
        f"    default-server inter {check_interval_ms} fall 3 rise 1",
    ]
    lines += [f"    server {name} 127.0.0.1:{server_port} check" for name, server_port in servers.items()]
    return "\n".join(lines) + "\n"


@dataclass
class HAProxy:
    """One haproxy process with the config above, under `workdir` (haproxy.cfg, admin.sock, haproxy.log)."""

    workdir: Path
    port: int
    servers: dict[str, int]
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_socket(self) -> Path:
        return self.workdir / "haproxy-admin.sock"

    @property
    def log_path(self) -> Path:
        return self.workdir / "haproxy.log"

    def start(self) -> HAProxy:
        binary = haproxy_binary()
        if binary is None:
            raise FileNotFoundError("haproxy is not installed (Debian: apt-get install haproxy)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "haproxy.cfg"
        cfg.write_text(config(self.port, self.servers, self.admin_socket))
        subprocess.run([binary, "-c", "-q", "-f", str(cfg)], check=True)  # a bad config fails here, loudly
        with self.log_path.open("wb") as log:
            # -db: stay in the foreground, so this process is haproxy's and SIGTERM stops it.
            self.popen = subprocess.Popen(
                [binary, "-db", "-f", str(cfg)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def command(self, line: str) -> str:
        """One command on the runtime API (e.g. "show servers state"); its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.admin_socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def set_state(self, server: str, state: str) -> None:
        """ "drain" (no new requests, in-flight ones finish), "maint" or "ready"."""
        answer = self.command(f"set server {BACKEND}/{server} state {state}").strip()
        if answer:
            raise RuntimeError(f"haproxy: set server {server} state {state}: {answer}")

    def stop(self, timeout: float = 10) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode
