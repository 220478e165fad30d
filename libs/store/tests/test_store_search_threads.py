"""RAGMESH_STORE_SEARCH_THREADS sizes each embedded collection's search pool (qdrant-edge's threads are named
edge-search-<n>, which is how a process shows them to an operator)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # each case opens the store in a child process

SCRIPT = """
import glob
from ragmesh_store import Query, open_store
from ragmesh_store.config import StoreSettings

store = open_store(StoreSettings(), 4)
store.ensure_collection("docs")
store.query("docs", Query(mode="dense", limit=3, dense=[1.0, 0.0, 0.0, 0.0]))
names = [open(path).read().strip() for path in glob.glob("/proc/self/task/*/comm")]
print(sum(name.startswith("edge-search") for name in names))
store.close()
"""


def search_threads(tmp_path, value: str | None) -> int:
    """How many search threads a store opened from the environment (the setting as given, or unset) runs."""
    env = {k: v for k, v in os.environ.items() if k != "RAGMESH_STORE_SEARCH_THREADS"}
    env["RAGMESH_DATA_DIR"] = str(tmp_path / (value or "default"))
    if value is not None:
        env["RAGMESH_STORE_SEARCH_THREADS"] = value
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
def test_the_search_pool_has_the_threads_asked_for(tmp_path):
    assert search_threads(tmp_path, "3") == 3
    assert search_threads(tmp_path, None) == 1  # the default: a query runs on its caller's thread


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc (Linux)")
def test_a_search_thread_count_below_one_is_refused(tmp_path):
    env = {**os.environ, "RAGMESH_DATA_DIR": str(tmp_path), "RAGMESH_STORE_SEARCH_THREADS": "0"}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "RAGMESH_STORE_SEARCH_THREADS" in done.stderr
