"""How many CPUs this process may really use.

torch and ONNX Runtime size their thread pools from the host's cores, not from the container's CPU quota: a
pod limited to 2 CPUs on a 64-core node would start 64 threads that fight over 2 CPUs (TEI issue #170
measured ~6x lost). The model's pool is sized from this instead.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def _quota_v2(root: Path) -> float | None:
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _quota_v1(root: Path) -> float | None:
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def available_cpus(cgroup: Path = CGROUP) -> int:
    """The CPU quota of this process's cgroup (v2 `cpu.max`, else v1 CFS quota) rounded up, capped by the
    CPUs it may be scheduled on; at least 1."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        affinity = os.cpu_count() or 1
    quota = _quota_v2(cgroup)
    if quota is None:
        quota = _quota_v1(cgroup)
    if quota is None:
        return max(1, affinity)
    return max(1, min(affinity, math.ceil(quota)))
