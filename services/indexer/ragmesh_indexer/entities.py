"""Graph entities from their input form (an `EntityInput` as a plain dict: from the proto, or one line of a JSON
Lines file, or made by the Kubernetes reader): flattened, split into a parent and its child entities, with the
text each one is searched by. Pure: no I/O, no gRPC.

The rules, as a user sees them in the graph and in search:

- The id is "<type>/<primary key values joined by '/'>" ("Deployment/default/frontend"). Key values are strings,
  numbers or booleans, never empty and never containing "/" (two different keys would share an id).
- Nested objects are flattened with dots: {"spec": {"replicas": 2}} is the property "spec.replicas". A null is
  no property. A list of scalars stays a list, of one type (numbers if it mixes whole and fractional ones,
  else strings when its items are of more than one type).
- A list of objects becomes child entities, one per item, each linked from its parent by a HAS relation carrying
  the item's index. The child's type is the parent's type followed by the list's key (its last dotted part)
  singularised and capitalised (`child_type`): an Order's "lines" -> "OrderLine", a Service's "ports" ->
  "ServicePort", "policies" -> "...Policy", "addresses" -> "...Address" (characters other than letters, digits
  and "_" become "_"; at most 64 characters); where two lists of one entity would give one type (an HPA's
  spec.behavior.scaleUp.policies and scaleDown.policies) every list's type takes in its key's parts before the
  last, one at a time, until they differ ("HorizontalPodAutoscalerScaleUpPolicy"). The parent's type is part of
  it so that two kinds' lists of the same name (a Service's and a NetworkPolicy rule's ports) never share ids,
  nor a child type a type of its own (a NetworkPolicy's "ingress" rules and the Ingress kind). A caller may
  name a list's child type instead (`child_types`: the Kubernetes reader's "Container").
  A child's id is "<ChildType>/<the parent's key values>/<the item's name or index>": the item's "name" when
  every item of the list has a distinct scalar "name", else its index. The child's primary key is
  ("parent_key", "name" or "index"), its parent_id is the parent's id, and its own lists of objects become its
  children in turn.
- A property whose value is longer than `max_property_chars` (a list counted as its JSON) stays out of the graph
  but is in the entity's searchable text; it is reported as "<id>#<property>". Key properties always stay.
- The searchable text: a first line with the type, the key and the labels ("Deployment default/frontend (labels:
  app=frontend)"), then one "name: value" line per property (lists joined by ", ") and one "RELATION: target id"
  line per relation. A caller leaves out what must never be stored (a Secret's values) before it gets here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason
from ragmesh_common.validation import DOC_ID_MAX_CHARS

DEFAULT_MAX_PROPERTY_CHARS = 250
MAX_VALUES = 100_000  # values of one input entity, its children's included (see _Budget)
TYPE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
RELATION_TYPE_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
HAS = "HAS"
Scalar = str | int | float | bool
Value = Scalar | list[Scalar]


@dataclass(frozen=True)
class Link:
    """One outgoing relation: its type, the other entity's id and, for HAS to a child, the child's list index."""

    type: str
    target_id: str
    index: int | None = None


@dataclass
class GraphEntity:
    """One entity as it is stored: its graph node (`properties` holds those short enough) and its text."""

    id: str
    type: str
    primary_key: list[tuple[str, Scalar]]
    properties: dict[str, Value]
    labels: list[str] = field(default_factory=list)
    alternative_keys: list[str] = field(default_factory=list)
    relations: list[Link] = field(default_factory=list)
    parent_id: str = ""
    omitted: list[str] = field(default_factory=list)  # property names kept out of the graph for their length
    all_properties: dict[str, Value] = field(default_factory=dict)  # every property, for the text
    field: str = ""  # where the request gave it, for errors

    @property
    def key(self) -> str:
        """The primary key values joined by "/" (the id without its type)."""
        return self.id.split("/", 1)[1]

    def text(self) -> str:
        """What the entity is searched by (see the module's docstring)."""
        first = f"{self.type} {self.key}"
        if self.labels:
            first += f" (labels: {', '.join(self.labels)})"
        lines = [first]
        if self.parent_id:
            lines.append(f"parent: {self.parent_id}")
        lines.extend(f"{name}: {_shown(value)}" for name, value in self.all_properties.items())
        if self.alternative_keys:
            lines.append(f"alternative keys: {', '.join(self.alternative_keys)}")
        lines.extend(f"{link.type}: {link.target_id}" for link in self.relations)
        return "\n".join(lines)


def at(field: str, sub: str) -> str:
    """`sub` inside `field`: "entities[3]" + "type" -> "entities[3].type"; "files[0] line 3: " + "type" ->
    "files[0] line 3: type"."""
    return f"{field}{sub}" if not field or field.endswith(" ") else f"{field}.{sub}"


def entity_invalid(message: str, field: str) -> RagmeshError:
    return invalid_argument(Reason.ENTITY_INVALID, message, field=field)


def build(
    raw: Mapping[str, Any],
    *,
    field: str,
    max_property_chars: int = DEFAULT_MAX_PROPERTY_CHARS,
    child_types: Mapping[str, str] | None = None,
) -> list[GraphEntity]:
    """The entity `raw` describes ({"type", "primary_key", "properties", "labels", "alternative_keys",
    "relations": [{"type", "target_id"}]}) followed by its child entities, depth first. `field` names `raw` in
    errors ("entities[3]"); `child_types` maps a list's flattened key to its child type where the rule of the
    module's docstring is not wanted ({"spec.template.spec.containers": "Container"}). Raises ENTITY_INVALID
    naming the field."""
    if not isinstance(raw, Mapping):
        raise entity_invalid("an entity is an object", field)
    type_ = raw.get("type")
    if not isinstance(type_, str) or not TYPE_RE.fullmatch(type_):
        raise entity_invalid(
            f"the entity type {str(type_)[:70]!r} is not letters, digits and '_' starting with a letter (at most 64)",
            at(field, "type"),
        )
    properties = raw.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise entity_invalid("properties is an object", at(field, "properties"))
    budget = _Budget(field)
    flat, lists = _flatten(properties, at(field, "properties"), budget)
    names = raw.get("primary_key") or []
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise entity_invalid(
            "give the primary key: the names of the properties whose values make the id", at(field, "primary_key")
        )
    key: list[tuple[str, Scalar]] = []
    for i, name in enumerate(names):
        value = flat.get(name) if isinstance(name, str) else None
        if value is None:
            raise entity_invalid(
                f"the primary key property {str(name)[:70]!r} is not in the properties", at(field, f"primary_key[{i}]")
            )
        key.append((name, _key_value(value, at(field, f"primary_key[{i}]"))))
    entity = GraphEntity(
        id=_entity_id(type_, [v for _, v in key], at(field, "primary_key")),
        type=type_,
        primary_key=key,
        properties={},
        labels=_strings(raw.get("labels"), at(field, "labels")),
        alternative_keys=_strings(raw.get("alternative_keys"), at(field, "alternative_keys")),
        relations=[
            _link(r, at(field, f"relations[{i}]"))
            for i, r in enumerate(_items(raw.get("relations"), at(field, "relations")))
        ],
        field=field,
    )
    return [entity, *_finish(entity, flat, lists, field, max_property_chars, child_types or {}, budget)]


def check_unique(entities: Iterable[GraphEntity]) -> None:
    """Refuse a request that gives one id twice (which one would be stored?), naming the second."""
    seen: set[str] = set()
    for entity in entities:
        if entity.id in seen:
            raise entity_invalid(f"the entity {entity.id!r} is given twice", entity.field or "entities")
        seen.add(entity.id)


def child_type(list_key: str) -> str:
    """The type of the child entities a list of objects becomes (see the module's docstring)."""
    word = re.sub(r"[^A-Za-z0-9_]", "_", list_key.rsplit(".", 1)[-1]) or "Item"
    lower = word.lower()
    if lower.endswith("ies") and len(word) > 3:
        word = word[:-3] + "y"
    elif lower.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif lower.endswith("s") and not lower.endswith(("ss", "us", "is")):
        word = word[:-1]
    word = word[:1].upper() + word[1:]
    return word if word[:1].isalpha() else f"X{word}"[:64]


def _finish(
    entity: GraphEntity,
    flat: dict[str, Value],
    lists: dict[str, list[Mapping[str, Any]]],
    field: str,
    max_chars: int,
    child_types: Mapping[str, str],
    budget: _Budget,
) -> list[GraphEntity]:
    """Set the entity's properties (long ones left out of the graph) and make its children."""
    keys = {name for name, _ in entity.primary_key}
    entity.all_properties = flat
    for name, value in flat.items():
        if name not in keys and _length(value) > max_chars:
            entity.omitted.append(name)
        else:
            entity.properties[name] = value
    children: list[GraphEntity] = []
    types = _child_types(entity.type, list(lists), child_types)
    for list_key, items in lists.items():
        type_ = types[list_key]
        names = [item.get("name") for item in items]
        by_name = all(isinstance(n, (str, int)) and not isinstance(n, bool) and str(n) for n in names) and len(
            set(map(str, names))
        ) == len(names)
        for index, item in enumerate(items):
            where = at(field, f"properties.{list_key}[{index}]")
            last: tuple[str, Scalar] = (
                ("name", _key_value(names[index], at(where, "name"))) if by_name else ("index", index)
            )
            flat_child, child_lists = _flatten(item, where, budget)
            child = GraphEntity(
                id=_entity_id(type_, [entity.key, last[1]], where),
                type=type_,
                primary_key=[("parent_key", entity.key), last],
                properties={},
                parent_id=entity.id,
                field=where,
            )
            entity.relations.append(Link(HAS, child.id, index))
            own = {**flat_child, "parent_key": entity.key, **({} if by_name else {"index": index})}
            nested = {k[len(list_key) + 1 :]: v for k, v in child_types.items() if k.startswith(f"{list_key}.")}
            children.append(child)
            children.extend(_finish(child, own, child_lists, where, max_chars, nested, budget))
    return children


def _child_types(parent: str, list_keys: list[str], given: Mapping[str, str]) -> dict[str, str]:
    """Each list's child type: the parent's type and the list key's last part; where two lists of the parent would
    share a type (spec.scaleUp.policies, spec.scaleDown.policies), more parts of their keys, until they differ."""
    types: dict[str, str] = {}
    for parts in range(1, 1 + max((k.count(".") + 1 for k in list_keys), default=1)):
        types = {
            k: given.get(k) or f"{parent}{''.join(_capital(p) for p in k.split('.')[-parts:-1])}{child_type(k)}"[:64]
            for k in list_keys
        }
        mine = [t for k, t in types.items() if k not in given]
        if len(mine) == len(set(mine)):
            break
    return types


def _capital(part: str) -> str:
    word = re.sub(r"[^A-Za-z0-9_]", "_", part)
    return word[:1].upper() + word[1:]


class _Budget:
    """The values one input entity may hold, its children's included: YAML aliases can make a small file stand
    for an exponentially large tree (a "billion laughs"), which is refused before it is walked."""

    def __init__(self, field: str) -> None:
        self.left = MAX_VALUES
        self.field = field

    def spend(self, value: Any) -> None:
        self.left -= 1
        if isinstance(value, list):
            for item in value:
                if isinstance(item, list):
                    self.spend(item)
                else:
                    self.left -= 1
        if self.left < 0:
            raise entity_invalid(f"an entity holds at most {MAX_VALUES} values, its children's included", self.field)


def _flatten(
    obj: Mapping[str, Any], field: str, budget: _Budget
) -> tuple[dict[str, Value], dict[str, list[Mapping[str, Any]]]]:
    """(flat properties, lists of objects by their flattened key)."""
    flat: dict[str, Value] = {}
    lists: dict[str, list[Mapping[str, Any]]] = {}

    def walk(prefix: str, value: Any) -> None:
        budget.spend(value)
        if value is None:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            if value and all(isinstance(v, Mapping) for v in value):
                lists[prefix] = value
            elif any(isinstance(v, Mapping) for v in value):
                raise entity_invalid("a list holds objects or scalars, not both", at(field, f"{prefix}"))
            else:  # scalars (a nested list is kept as its JSON)
                items = [_scalar(v) if not isinstance(v, list) else json.dumps(v) for v in value if v is not None]
                kinds = {type(v) for v in items}
                if kinds == {int, float}:  # [1, 2.5]: numbers
                    items = [float(v) for v in items]
                elif len(kinds) > 1:  # ["--port", 8080]: one type, as the graph's columns have
                    items = [_text(v) for v in items]
                flat[prefix] = items
        else:
            flat[prefix] = _scalar(value)

    walk("", obj)
    return flat, lists


def _scalar(value: Any) -> Scalar:
    if isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    return str(value)  # a date or time that YAML parsed


def _key_value(value: Any, field: str) -> Scalar:
    if isinstance(value, list) or value is None or value == "":
        raise entity_invalid("a primary key value is a non-empty string, number or boolean", field)
    scalar = _scalar(value)
    if "/" in str(scalar):
        raise entity_invalid(
            f"the primary key value {str(scalar)[:70]!r} contains '/', which separates key values in ids", field
        )
    return scalar


def _entity_id(type_: str, values: Iterable[Scalar], field: str) -> str:
    entity_id = "/".join([type_, *(_text(v) for v in values)])
    if len(entity_id) > DOC_ID_MAX_CHARS or not entity_id.isprintable():
        raise entity_invalid(f"the entity id is longer than {DOC_ID_MAX_CHARS} characters or not printable", field)
    return entity_id


def _link(raw: Any, field: str) -> Link:
    if not isinstance(raw, Mapping):
        raise entity_invalid("a relation is an object with type and target_id", field)
    type_, target = raw.get("type"), raw.get("target_id")
    if not isinstance(type_, str) or not RELATION_TYPE_RE.fullmatch(type_):
        raise entity_invalid(
            f"the relation type {str(type_)[:70]!r} is not UPPER_SNAKE_CASE (at most 64)", at(field, "type")
        )
    if not isinstance(target, str) or "/" not in target or not TYPE_RE.fullmatch(target.split("/", 1)[0]):
        raise entity_invalid(f"the target id {str(target)[:70]!r} is not '<type>/<key>'", at(field, "target_id"))
    return Link(type_, target)


def _items(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise entity_invalid("a list is expected", field)
    return value


def _strings(value: Any, field: str) -> list[str]:
    items = _items(value, field)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise entity_invalid("a non-empty string is expected", f"{field}[{i}]")
    return list(items)


def _text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _shown(value: Value) -> str:
    return ", ".join(map(_text, value)) if isinstance(value, list) else _text(value)


def _length(value: Value) -> int:
    return len(json.dumps(value, ensure_ascii=False)) if isinstance(value, list) else len(_text(value))
