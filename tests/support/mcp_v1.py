"""A client of the 1.x MCP SDK generation for tests: `mcp<2` (the newest 1.x on PyPI) in a venv of its own, built
once and cached under .ragmesh/mcp-v1/ (a lock keeps parallel test processes from building it twice), and driven
as a subprocess (`tests/support/mcp_v1_client.py`). The test skips with the reason when PyPI cannot be reached."""

from __future__ import annotations

import asyncio
import fcntl
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".ragmesh" / "mcp-v1"
CLIENT_SCRIPT = Path(__file__).with_name("mcp_v1_client.py")
REQUIREMENT = "mcp<2"


def mcp_v1_python() -> Path:
    """The Python of the cached venv holding `mcp<2` (built on first use, ~1 minute)."""
    python = VENV / "bin" / "python"
    ready = VENV / ".ready"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with (VENV.parent / "mcp-v1.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            pip = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REQUIREMENT],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if pip.returncode != 0:
                pytest.skip(f"cannot install {REQUIREMENT!r} for the 1.x MCP client (PyPI unreachable?): {pip.stderr}")
            ready.write_text(REQUIREMENT + "\n")
    return python


class V1Client:
    """One run of the 1.x client script (see its docstring) as a child process of the running event loop."""

    def __init__(
        self,
        url: str,
        collection: str,
        *,
        calls: int = 10,
        pause_after: int | None = None,
        key: str | None = None,
        tools_only: bool = False,
    ) -> None:
        self.args = [str(CLIENT_SCRIPT), f"{url}/mcp", collection, "--calls", str(calls)]
        if pause_after is not None:
            self.args += ["--pause-after", str(pause_after)]
        if key is not None:
            self.args += ["--key", key]
        if tools_only:
            self.args.append("--tools-only")
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> V1Client:
        python = await asyncio.to_thread(mcp_v1_python)  # the event loop (and a mesh on it) keeps serving
        self.process = await asyncio.create_subprocess_exec(
            str(python),
            *self.args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return self

    async def paused(self) -> None:
        """Wait until the client has paused (printed PAUSED)."""
        assert self.process is not None and self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), 300)
        if line.strip() != b"PAUSED":
            raise AssertionError(f"the 1.x client did not pause: {line!r} {await self._stderr()}")

    async def resume(self) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()

    async def report(self) -> dict[str, Any]:
        """Its JSON report, once it has finished (fails with its stderr if it crashed)."""
        assert self.process is not None and self.process.stdout is not None
        out = await asyncio.wait_for(self.process.stdout.read(), 300)
        code = await self.process.wait()
        if code != 0:
            raise AssertionError(f"the 1.x client exited with {code}: {await self._stderr()}")
        return json.loads(out.decode().strip().splitlines()[-1])

    async def _stderr(self) -> str:
        assert self.process is not None and self.process.stderr is not None
        return (await self.process.stderr.read()).decode(errors="replace")[-4000:]
