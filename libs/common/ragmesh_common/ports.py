"""Start-up errors about ports: which setting moves a port, and (best effort, Linux) which process holds it."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from .config import ConfigError

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int) -> str | None:
    """ "pid N (command line)" of a process listening on `port`, when this user may see it; else None."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        return f"pid {pid} ({cmdline.strip()[:120]})"
    return None


def port_free(host: str, port: int) -> bool:
    """Whether `host:port` can be listened on now (with SO_REUSEADDR, as servers bind: a port held only by
    connections closing in TIME_WAIT counts as free). A host that does not resolve counts as free: the server's
    own bind reports that."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True
    for family, kind, proto, _, address in infos:
        with contextlib.closing(socket.socket(family, kind, proto)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError:
                return False
    return True


def port_in_use(what: str, host: str, port: int, setting: str) -> ConfigError:
    """The start-up error for a port that cannot be bound: names the port, who wants it, what holds it (when
    it can be found) and the variable that moves it."""
    holder = port_holder(port) if port else None
    held = f", held by {holder}" if holder else ""
    return ConfigError(
        f"{what} cannot listen on {host}:{port}: the address is in use{held}; "
        f"stop that process or set {setting} to a free port (0 picks one)"
    )
