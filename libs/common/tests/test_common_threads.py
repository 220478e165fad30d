"""Threads named for the operating system: what `top -H`, `ps -L`, perf and /proc show (Linux); and a thread's
own scheduling priority."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ragmesh_common import loop
from ragmesh_common.threads import lower_thread_priority, name_os_thread, named_pool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")


def os_name() -> str:
    """The calling thread's name as the kernel has it."""
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


def test_a_thread_takes_its_python_name_or_another_cut_to_what_the_kernel_keeps():
    names = []

    def named() -> None:
        name_os_thread()
        names.append(os_name())
        name_os_thread("embedder-runner-default-1")
        names.append(os_name())

    thread = threading.Thread(target=named, name="store-flush")
    thread.start()
    thread.join()
    assert names == ["store-flush", "embedder-runner"]  # 15 bytes: the rest of a long name is cut


def test_a_named_pools_threads_carry_its_prefix():
    with named_pool(2, "indexer-chunk") as pool:
        assert pool.submit(os_name).result() == "indexer-chunk_0"


def test_a_commands_event_loop_runs_its_blocking_calls_on_named_threads():
    async def main() -> str:
        return await asyncio.to_thread(os_name)

    with ThreadPoolExecutor(1) as pool:  # loop.run on a thread of its own, as test_common_loop explains
        assert pool.submit(loop.run, main()).result() == "event-loop-pool"


def in_a_thread(steps: int) -> tuple[bool, int, int]:
    """lower_thread_priority(steps) on a new thread: what it returned, and that thread's nice value and scheduling
    policy afterwards."""
    out = []

    def run() -> None:
        changed = lower_thread_priority(steps)
        thread = threading.get_native_id()
        out.append((changed, os.getpriority(os.PRIO_PROCESS, thread), os.sched_getscheduler(thread)))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def test_a_thread_lowers_its_own_priority_and_no_other_threads():
    """`top -H` shows the thread's NI raised by the steps asked, capped at 19, and `chrt -p` its policy as
    SCHED_BATCH; the caller keeps its own."""
    me = threading.get_native_id()
    own, policy = os.getpriority(os.PRIO_PROCESS, me), os.sched_getscheduler(me)
    assert policy == os.SCHED_OTHER
    assert in_a_thread(5) == (True, min(19, own + 5), os.SCHED_BATCH)
    assert in_a_thread(40) == (True, 19, os.SCHED_BATCH)
    assert in_a_thread(0) == (False, own, os.SCHED_OTHER)
    assert (os.getpriority(os.PRIO_PROCESS, me), os.sched_getscheduler(me)) == (own, policy)


def test_a_refused_priority_change_is_logged_and_the_thread_runs_on(monkeypatch, caplog):
    """A sandbox whose seccomp policy refuses setpriority(2): the thread keeps the process's priority."""
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    with caplog.at_level(logging.WARNING, logger="ragmesh_common.threads"):
        assert in_a_thread(5) == (False, own, os.SCHED_OTHER)
    assert "could not lower the priority of thread" in caplog.text
    assert "Operation not permitted" in caplog.text
