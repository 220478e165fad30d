"""A real HAProxy (Debian's `haproxy`) in front of gateway replicas, as a platform team runs it: round robin per
request, no affinity, health checks on GET /ready, connection failures retried on another replica.

    with run_haproxy(["127.0.0.1:8001", "127.0.0.1:8002"], tmp_path) as lb:
        httpx.get(f"{lb.url}/health")

`haproxy_config` writes the configuration alone (for a test that starts HAProxy its own way). Tests that need it
skip when the binary is missing (`scripts/system-deps.sh` installs it)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

HAPROXY = shutil.which("haproxy") or next(
    (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None
)


def haproxy_config(backends: Sequence[str], port: int, *, check_interval_ms: int = 1000) -> str:
    """haproxy.cfg for `backends` ("host:port" of each gateway) behind 127.0.0.1:`port`: `balance roundrobin`
    with no stickiness; each replica checked with GET /ready every `check_interval_ms` (down after 3 failures or
    5 s without an answer, up after 1 success); a request whose connection fails is retried on another replica
    (`option redispatch`; connection failures only, so a POST is never sent twice). Logs go to stdout."""
    servers = "\n".join(f"    server gw{i} {addr} check" for i, addr in enumerate(backends))
    return f"""\
global
    maxconn 2000
    log stdout format raw local0

defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 10s
    retries 3
    option redispatch 1

frontend gateways_in
    bind 127.0.0.1:{port}
    default_backend gateways

backend gateways
    balance roundrobin
    option httpchk GET /ready
    http-check expect status 200
    timeout check 5s
    default-server inter {check_interval_ms}ms fall 3 rise 1
{servers}
"""


@dataclass
class HAProxy:
    """A running HAProxy: `url` is its frontend, `config` the file it runs, `log` its output."""

    url: str
    config: Path
    log: Path
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def run_haproxy(backends: Sequence[str], workdir: Path, *, port: int | None = None) -> Iterator[HAProxy]:
    """Run `haproxy -f <cfg> -db` in front of `backends` until the block ends (SIGTERM, then SIGKILL); skips the
    test when HAProxy is not installed. Yields once the frontend accepts connections (the replicas' health is
    the caller's to wait for: HAProxy answers 503 while none is up)."""
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (scripts/system-deps.sh installs Debian's package)")
    port = port or _free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "haproxy.cfg"
    config.write_text(haproxy_config(backends, port))
    log = workdir / "haproxy.log"
    with log.open("wb") as out:
        process = subprocess.Popen([HAPROXY, "-f", str(config), "-db"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                raise AssertionError(f"haproxy exited with {process.returncode}:\n{log.read_text(errors='replace')}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"haproxy not listening on {port}:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield HAProxy(url=f"http://127.0.0.1:{port}", config=config, log=log, process=process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
