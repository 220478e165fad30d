"""Fixtures of the deploy tests; the helpers live in deploy_support.py (importable from the test modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from deploy_support import all_renders  # noqa: E402


@pytest.fixture(scope="session")
def renders():
    """Every kustomization rendered once per session: name -> manifests."""
    return all_renders()
