"""Threads named for the operating system, not only for Python.

Before 3.14 Python keeps a thread's name to itself: `top -H`, `ps -L`, perf, py-spy's native view and anything
reading /proc/<pid>/task/*/comm see every thread of a ragmesh process under the process's own name. The threads
that do the work name themselves (the model threads and the feeder, the store's flusher, the pools): an SRE sees
which one burns the CPU, and `bench.report` splits the mesh's CPU time by thread. The kernel keeps 15 bytes of a
name; a longer one is cut there. Elsewhere than Linux this names nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

_PR_SET_NAME = 15
NAME_BYTES = 15  # the kernel's TASK_COMM_LEN, less the terminating NUL


@functools.cache
def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def name_os_thread(name: str | None = None) -> None:
    """Give the calling thread `name` (default: its Python name) at the operating system's level."""
    prctl = _prctl()
    if prctl is None:
        return
    prctl(_PR_SET_NAME, (name or threading.current_thread().name).encode()[:NAME_BYTES], 0, 0, 0)


def named_pool(max_workers: int | None = None, prefix: str = "") -> ThreadPoolExecutor:
    """A thread pool whose threads carry their Python names (`prefix`_N) for the operating system too."""
    return ThreadPoolExecutor(max_workers, thread_name_prefix=prefix, initializer=name_os_thread)


def lower_thread_priority(steps: int) -> bool:
    """Make the calling thread give way to the process's other threads under contention: raise its nice value by
    `steps` (capped at 19) and give it the SCHED_BATCH policy (sched(7): taken for CPU-bound work, so that its
    wake-ups do not preempt a running thread). On Linux, where both belong to the thread (setpriority(2) and
    sched_setscheduler(2) with the thread's id); elsewhere they belong to the whole process, and nothing is changed.
    Needs no privilege (only lowering a nice value or taking a real-time policy does). True when changed; a refusal
    (a sandbox's seccomp policy) is logged, not raised, and the thread runs on."""
    if steps <= 0 or not sys.platform.startswith("linux"):
        return False
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + steps))
        os.sched_setscheduler(thread, os.SCHED_BATCH, os.sched_param(0))
    except OSError as exc:
        log.warning("could not lower the priority of thread %s (%s); it runs on as it is", thread, exc)
        return False
    return True
