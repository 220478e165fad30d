"""How an entity ingest is cut into writes, and the journal of undos it keeps on disk."""

from __future__ import annotations

import grpc
import pytest
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_indexer.entities import build
from ragmesh_indexer.entity_ingest import Journal, batches, max_property_chars


def family(n: int, children: int) -> list:
    return build(
        {
            "type": "Order",
            "primary_key": ["n"],
            "properties": {"n": n, "lines": [{"name": f"l{i}"} for i in range(children)]},
        },
        field="e",
    )


def test_batches_never_split_an_entity_from_its_children():
    entities = [*family(1, 2), *family(2, 4), *family(3, 0), *family(4, 1)]
    cut = list(batches(entities, 4))
    assert [[e.id for e in b] for b in cut] == [
        ["Order/1", "OrderLine/1/l0", "OrderLine/1/l1"],
        ["Order/2", "OrderLine/2/l0", "OrderLine/2/l1", "OrderLine/2/l2", "OrderLine/2/l3"],  # larger than 4
        ["Order/3", "Order/4", "OrderLine/4/l0"],
    ]
    assert [e for b in cut for e in b] == entities


def test_the_journal_keeps_its_ids_across_a_restart(tmp_path):
    path = tmp_path / "jobs" / "graph-pending.json"
    journal = Journal(path)
    journal.add("k8s", ["A/1", "A/2"])
    journal.add("k8s", ["A/2", "A/3"])
    journal.add("other", ["B/1"])
    journal.remove("other", ["B/1"])
    again = Journal(path)
    assert again.pending == {"k8s": ["A/1", "A/2", "A/3"]}
    again.remove("k8s", ["A/1", "A/2", "A/3"])
    assert Journal(path).pending == {}


def test_max_property_chars_zero_is_the_default_and_negative_is_refused():
    assert max_property_chars(0) == 250
    assert max_property_chars(10) == 10
    with pytest.raises(RagmeshError) as caught:
        max_property_chars(-1)
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, Reason.REQUEST_INVALID)
