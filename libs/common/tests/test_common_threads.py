"""Threads named for the operating system: what `top -H`, `ps -L`, perf and /proc show (Linux)."""

from __future__ import annotations

import asyncio
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ragmesh_common import loop
from ragmesh_common.threads import name_os_thread, named_pool

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
