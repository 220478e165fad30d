"""The event loop `ragmesh up` and `ragmesh serve` run on (RAGMESH_EVENT_LOOP)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from ragmesh_common import loop
from ragmesh_common.config import ConfigError
from ragmesh_common.loop import loop_name


async def _which() -> str:
    return loop_name(asyncio.get_running_loop())


def run(main):
    """`ragmesh_common.loop.run` on a thread of its own, as a command's main thread runs it: an asyncio.Runner
    leaves its thread without a current event loop, which the other tests' thread still needs."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(loop.run, main).result()


@pytest.mark.parametrize(
    ("setting", "expected"), [(None, "uvloop"), ("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_the_setting_picks_the_loop_and_auto_is_uvloop_where_installed(monkeypatch, setting, expected):
    pytest.importorskip("uvloop", reason="uvloop is not installed here (no Windows build)")
    if setting is None:
        monkeypatch.delenv("RAGMESH_EVENT_LOOP", raising=False)
    else:
        monkeypatch.setenv("RAGMESH_EVENT_LOOP", setting)
    assert run(_which()) == expected


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    monkeypatch.setenv("RAGMESH_EVENT_LOOP", "auto")
    assert run(_which()) == "asyncio"
    monkeypatch.setenv("RAGMESH_EVENT_LOOP", "uvloop")
    with pytest.raises(ConfigError) as info:
        run(_which())
    assert "RAGMESH_EVENT_LOOP=uvloop" in str(info.value.code) and "not installed" in str(info.value.code)


def test_an_unknown_loop_is_a_config_error_and_the_command_is_not_left_unawaited(monkeypatch):
    monkeypatch.setenv("RAGMESH_EVENT_LOOP", "fast")
    command = _which()
    with pytest.raises(ConfigError) as info:
        run(command)
    assert "RAGMESH_EVENT_LOOP" in str(info.value.code) and "'fast'" in str(info.value.code)
    # Closed, not dropped: no "coroutine ... was never awaited" warning under the error.
    assert inspect.getcoroutinestate(command) == inspect.CORO_CLOSED
