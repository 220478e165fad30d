"""The test tiers (conftest.py): every test of this run is in exactly one registered tier, and the unit tier that
`make test-fast` runs holds no test that starts a mesh, loads the real model, drives Chromium or renders the
manifests, whatever marks say."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = {"unit", "e2e", "slow", "browser", "deploy"}
# Fixtures that put a test outside the unit tier, and the folders whose tests are never unit.
NOT_UNIT_FIXTURES = {"mesh_factory", "answer_service", "local", "reference", "browser"}
NOT_UNIT_FOLDERS = ("tests/e2e/", "tests/deploy/")


def test_the_five_tiers_are_registered_and_markers_are_strict(request):
    registered = {line.split(":", 1)[0].strip() for line in request.config.getini("markers")}
    assert registered >= TIERS
    assert request.config.getoption("strict_markers")


def test_every_test_has_exactly_one_tier(request):
    tiers = {
        item.nodeid: sorted({m.name for m in item.iter_markers() if m.name in TIERS}) for item in request.session.items
    }
    assert {nodeid: marks for nodeid, marks in tiers.items() if len(marks) != 1} == {}


def test_no_unit_test_starts_a_mesh_loads_the_model_or_drives_a_browser(request):
    offenders = []
    for item in request.session.items:
        if item.get_closest_marker("unit") is None:
            continue
        path = Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
        heavy = NOT_UNIT_FIXTURES & set(getattr(item, "fixturenames", ()))
        if heavy or path.startswith(NOT_UNIT_FOLDERS):
            offenders.append((item.nodeid, sorted(heavy)))
    assert offenders == []
