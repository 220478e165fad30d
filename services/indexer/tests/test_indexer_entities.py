"""Entities from their input form: ids, flattening, child entities, long properties, the searchable text, and
every refusal with the field it names."""

from __future__ import annotations

import grpc
import pytest
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_indexer import entities
from ragmesh_indexer.entities import Link, build, child_type
from ragmesh_indexer.entity_files import EntityFile, read


def order(**properties):
    return {
        "type": "Order",
        "primary_key": ["shop", "number"],
        "properties": {"shop": "north", "number": 42, **properties},
        "labels": ["sales"],
    }


def refusal(raw, field="entities[3]", **kwargs) -> RagmeshError:
    with pytest.raises(RagmeshError) as caught:
        build(raw, field=field, **kwargs)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.reason == Reason.ENTITY_INVALID
    return caught.value


def test_the_id_is_the_type_and_the_key_values_in_order():
    [entity] = build(order(), field="entities[0]")
    assert entity.id == "Order/north/42"
    assert entity.primary_key == [("shop", "north"), ("number", 42)]
    assert entity.labels == ["sales"]


def test_nested_objects_are_flattened_with_dots_and_scalar_lists_stay_lists():
    [entity] = build(order(customer={"address": {"city": "Oslo"}, "vip": True}, tags=["a", "b"], note=None), field="e")
    assert entity.properties["customer.address.city"] == "Oslo"
    assert entity.properties["customer.vip"] is True
    assert entity.properties["tags"] == ["a", "b"]
    [entity] = build(order(args=["--port", 8080, True], sizes=[1, 2.5]), field="e")
    assert entity.properties["args"] == ["--port", "8080", "true"]  # one type per list, as graph columns have
    assert entity.properties["sizes"] == [1.0, 2.5]
    assert "note" not in entity.properties  # a null is no property


def test_a_list_of_objects_becomes_child_entities_linked_by_has_with_their_index():
    parent, first, second = build(order(lines=[{"name": "pen", "qty": 2}, {"name": "ink", "qty": 1}]), field="e")
    assert [first.id, second.id] == ["OrderLine/north/42/pen", "OrderLine/north/42/ink"]
    assert first.parent_id == second.parent_id == parent.id
    assert first.properties["qty"] == 2
    assert first.primary_key == [("parent_key", "north/42"), ("name", "pen")]
    assert Link("HAS", "OrderLine/north/42/ink", 1) in parent.relations
    assert "lines" not in parent.properties and "lines.qty" not in parent.properties


def test_children_without_distinct_names_are_keyed_by_index_and_have_children_in_turn():
    parent, *children = build(order(parcels=[{"name": "box", "items": [{"sku": "x"}]}, {"name": "box"}]), field="e")
    assert [c.id for c in children] == [
        "OrderParcel/north/42/0",
        "OrderParcelItem/north/42/0/0",
        "OrderParcel/north/42/1",
    ]
    assert children[1].parent_id == "OrderParcel/north/42/0"
    assert children[0].properties["index"] == 0


def test_two_lists_that_would_share_a_child_type_take_in_more_of_their_keys():
    _, up, down, other = build(
        order(up={"rules": [{"name": "a"}]}, down={"rules": [{"name": "a"}]}, notes=[{"name": "n"}]), field="e"
    )
    assert [up.id, down.id, other.id] == ["OrderUpRule/north/42/a", "OrderDownRule/north/42/a", "OrderNote/north/42/n"]


def test_a_caller_may_name_a_lists_child_type():
    _, child = build(order(spec={"boxes": [{"name": "a"}]}), field="e", child_types={"spec.boxes": "Crate"})
    assert child.id == "Crate/north/42/a"


def test_an_id_given_twice_in_one_request_is_refused_naming_the_second():
    first = build(order(), field="entities[0]")
    second = build(order(), field="entities[1]")
    with pytest.raises(RagmeshError) as caught:
        entities.check_unique([*first, *second])
    assert caught.value.reason == Reason.ENTITY_INVALID
    assert caught.value.field_violations[0].field == "entities[1]"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("containers", "Container"),
        ("initContainers", "InitContainer"),
        ("policies", "Policy"),
        ("addresses", "Address"),
        ("spec.volumeMounts", "VolumeMount"),
        ("status", "Status"),
        ("my-list", "My_list"),
        ("2fa", "X2fa"),
    ],
)
def test_a_child_type_is_the_list_key_singularised_and_capitalised(key, expected):
    assert child_type(key) == expected


def test_long_properties_stay_out_of_the_graph_but_in_the_text():
    long = "x" * 251
    [entity] = build(order(story=long, short="y" * 250, many=["ab"] * 60), field="e")
    assert sorted(entity.omitted) == ["many", "story"]  # a list counts as its JSON
    assert "story" not in entity.properties and entity.properties["short"] == "y" * 250
    assert f"story: {long}" in entity.text()
    [entity] = build(order(story=long), field="e", max_property_chars=1000)
    assert entity.omitted == []


def test_the_text_starts_with_type_key_and_labels_then_one_line_per_property():
    [entity] = build(
        {
            **order(customer={"city": "Oslo"}, tags=["a", "b"]),
            "relations": [{"type": "PLACED_BY", "target_id": "Customer/7"}],
        },
        field="e",
    )
    lines = entity.text().splitlines()
    assert lines[0] == "Order north/42 (labels: sales)"
    assert {"shop: north", "number: 42", "customer.city: Oslo", "tags: a, b", "PLACED_BY: Customer/7"} <= set(lines)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({**order(), "type": "9lives"}, "entities[3].type"),
        ({**order(), "type": "Has Space"}, "entities[3].type"),
        ({**order(), "primary_key": []}, "entities[3].primary_key"),
        ({**order(), "primary_key": ["shop", "missing"]}, "entities[3].primary_key[1]"),
        (order(number=""), "entities[3].primary_key[1]"),
        (order(shop="a/b"), "entities[3].primary_key[0]"),
        (order(shop=["a"]), "entities[3].primary_key[0]"),
        ({**order(), "relations": [{"type": "placed-by", "target_id": "Customer/7"}]}, "entities[3].relations[0].type"),
        ({**order(), "relations": [{"type": "PLACED_BY", "target_id": "7"}]}, "entities[3].relations[0].target_id"),
        ({**order(), "labels": [""]}, "entities[3].labels[0]"),
        (order(mixed=[{"a": 1}, 2]), "entities[3].properties.mixed"),
        ({**order(), "properties": [1]}, "entities[3].properties"),
    ],
)
def test_a_bad_entity_is_refused_naming_the_field(raw, field):
    error = refusal(raw)
    assert [v.field for v in error.field_violations] == [field]


def test_jsonl_files_of_entity_inputs_are_read_and_bad_lines_named():
    import json

    lines = [json.dumps(order()), "", json.dumps({**order(), "primary_key": ["nope"]})]
    with pytest.raises(RagmeshError) as caught:
        read([EntityFile("\n".join(lines).encode(), "orders.jsonl")], max_property_chars=250)
    assert caught.value.reason == Reason.ENTITY_INVALID
    assert caught.value.field_violations[0].field == "files[0] line 3: primary_key[0]"

    [entity] = read([EntityFile(json.dumps(order()).encode() + b"\n", "orders.jsonl")], max_property_chars=250)
    assert entity.id == "Order/north/42"
    # JSON Lines without the name are recognised by their content
    both = read([EntityFile("\n".join(lines[:1] * 2).encode(), "orders.txt")], max_property_chars=250)
    assert [e.id for e in both] == ["Order/north/42"] * 2

    with pytest.raises(RagmeshError) as caught:
        read([EntityFile(b'{"type": "Order"\n', "orders.jsonl")], max_property_chars=250)
    assert caught.value.reason == Reason.GRAPH_FILE_INVALID
    assert caught.value.metadata["line"] == "1"


def test_default_max_property_chars_is_250():
    assert entities.DEFAULT_MAX_PROPERTY_CHARS == 250
