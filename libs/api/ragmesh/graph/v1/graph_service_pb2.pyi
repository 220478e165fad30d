from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    DIRECTION_OUTGOING: _ClassVar[Direction]
    DIRECTION_INCOMING: _ClassVar[Direction]

class QueryTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUERY_TARGET_UNSPECIFIED: _ClassVar[QueryTarget]
    QUERY_TARGET_DATA: _ClassVar[QueryTarget]
    QUERY_TARGET_ONTOLOGY: _ClassVar[QueryTarget]
DIRECTION_UNSPECIFIED: Direction
DIRECTION_OUTGOING: Direction
DIRECTION_INCOMING: Direction
QUERY_TARGET_UNSPECIFIED: QueryTarget
QUERY_TARGET_DATA: QueryTarget
QUERY_TARGET_ONTOLOGY: QueryTarget

class Property(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: _struct_pb2.Value
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class Relation(_message.Message):
    __slots__ = ("type", "target_id", "target_type", "direction", "index")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    type: str
    target_id: str
    target_type: str
    direction: Direction
    index: int
    def __init__(self, type: _Optional[str] = ..., target_id: _Optional[str] = ..., target_type: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ..., index: _Optional[int] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("id", "type", "primary_key", "properties", "labels", "alternative_keys", "relations", "parent_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    primary_key: _containers.RepeatedCompositeFieldContainer[Property]
    properties: _containers.RepeatedCompositeFieldContainer[Property]
    labels: _containers.RepeatedScalarFieldContainer[str]
    alternative_keys: _containers.RepeatedScalarFieldContainer[str]
    relations: _containers.RepeatedCompositeFieldContainer[Relation]
    parent_id: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., primary_key: _Optional[_Iterable[_Union[Property, _Mapping]]] = ..., properties: _Optional[_Iterable[_Union[Property, _Mapping]]] = ..., labels: _Optional[_Iterable[str]] = ..., alternative_keys: _Optional[_Iterable[str]] = ..., relations: _Optional[_Iterable[_Union[Relation, _Mapping]]] = ..., parent_id: _Optional[str] = ...) -> None: ...

class UpsertEntitiesRequest(_message.Message):
    __slots__ = ("collection", "entities")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    def __init__(self, collection: _Optional[str] = ..., entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ...) -> None: ...

class UpsertEntitiesResponse(_message.Message):
    __slots__ = ("entities", "relations", "dangling_relations")
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    DANGLING_RELATIONS_FIELD_NUMBER: _ClassVar[int]
    entities: int
    relations: int
    dangling_relations: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entities: _Optional[int] = ..., relations: _Optional[int] = ..., dangling_relations: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteEntitiesRequest(_message.Message):
    __slots__ = ("collection", "ids")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, collection: _Optional[str] = ..., ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteEntitiesResponse(_message.Message):
    __slots__ = ("deleted_ids",)
    DELETED_IDS_FIELD_NUMBER: _ClassVar[int]
    deleted_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGraphRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class DeleteGraphResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class EntityType(_message.Message):
    __slots__ = ("name", "count", "properties", "primary_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    properties: _containers.RepeatedScalarFieldContainer[str]
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., properties: _Optional[_Iterable[str]] = ..., primary_key: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphInfo(_message.Message):
    __slots__ = ("collection", "entity_types", "relations", "entities")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entity_types: _containers.RepeatedCompositeFieldContainer[EntityType]
    relations: _containers.RepeatedCompositeFieldContainer[TypeRelation]
    entities: int
    def __init__(self, collection: _Optional[str] = ..., entity_types: _Optional[_Iterable[_Union[EntityType, _Mapping]]] = ..., relations: _Optional[_Iterable[_Union[TypeRelation, _Mapping]]] = ..., entities: _Optional[int] = ...) -> None: ...

class ListEntityTypesRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class ListEntityTypesResponse(_message.Message):
    __slots__ = ("graphs",)
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    graphs: _containers.RepeatedCompositeFieldContainer[GraphInfo]
    def __init__(self, graphs: _Optional[_Iterable[_Union[GraphInfo, _Mapping]]] = ...) -> None: ...

class TypeRelation(_message.Message):
    __slots__ = ("from_type", "type", "to_type", "count", "depth")
    FROM_TYPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TO_TYPE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    from_type: str
    type: str
    to_type: str
    count: int
    depth: int
    def __init__(self, from_type: _Optional[str] = ..., type: _Optional[str] = ..., to_type: _Optional[str] = ..., count: _Optional[int] = ..., depth: _Optional[int] = ...) -> None: ...

class ExploreOntologyRequest(_message.Message):
    __slots__ = ("collection", "entity_type", "depth")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entity_type: str
    depth: int
    def __init__(self, collection: _Optional[str] = ..., entity_type: _Optional[str] = ..., depth: _Optional[int] = ...) -> None: ...

class ExploreOntologyResponse(_message.Message):
    __slots__ = ("entity_type", "relations")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    entity_type: EntityType
    relations: _containers.RepeatedCompositeFieldContainer[TypeRelation]
    def __init__(self, entity_type: _Optional[_Union[EntityType, _Mapping]] = ..., relations: _Optional[_Iterable[_Union[TypeRelation, _Mapping]]] = ...) -> None: ...

class ExploreEntityRequest(_message.Message):
    __slots__ = ("collection", "entity_id", "depth", "limit")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entity_id: str
    depth: int
    limit: int
    def __init__(self, collection: _Optional[str] = ..., entity_id: _Optional[str] = ..., depth: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class Neighbour(_message.Message):
    __slots__ = ("id", "type", "relation", "direction", "depth", "via_id")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    VIA_ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    relation: str
    direction: Direction
    depth: int
    via_id: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., relation: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ..., depth: _Optional[int] = ..., via_id: _Optional[str] = ...) -> None: ...

class ExploreEntityResponse(_message.Message):
    __slots__ = ("entity", "neighbours", "truncated")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    neighbours: _containers.RepeatedCompositeFieldContainer[Neighbour]
    truncated: bool
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ..., neighbours: _Optional[_Iterable[_Union[Neighbour, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class GetEntityRequest(_message.Message):
    __slots__ = ("collection", "entity_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entity_id: str
    def __init__(self, collection: _Optional[str] = ..., entity_id: _Optional[str] = ...) -> None: ...

class GetEntityResponse(_message.Message):
    __slots__ = ("entity",)
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ...) -> None: ...

class ShortestPathsRequest(_message.Message):
    __slots__ = ("collection", "from_type", "to_type", "max_depth")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    FROM_TYPE_FIELD_NUMBER: _ClassVar[int]
    TO_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    collection: str
    from_type: str
    to_type: str
    max_depth: int
    def __init__(self, collection: _Optional[str] = ..., from_type: _Optional[str] = ..., to_type: _Optional[str] = ..., max_depth: _Optional[int] = ...) -> None: ...

class TypePath(_message.Message):
    __slots__ = ("cypher", "hops")
    CYPHER_FIELD_NUMBER: _ClassVar[int]
    HOPS_FIELD_NUMBER: _ClassVar[int]
    cypher: str
    hops: _containers.RepeatedCompositeFieldContainer[TypeRelation]
    def __init__(self, cypher: _Optional[str] = ..., hops: _Optional[_Iterable[_Union[TypeRelation, _Mapping]]] = ...) -> None: ...

class ShortestPathsResponse(_message.Message):
    __slots__ = ("paths",)
    PATHS_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedCompositeFieldContainer[TypePath]
    def __init__(self, paths: _Optional[_Iterable[_Union[TypePath, _Mapping]]] = ...) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("collection", "query", "target", "parameters", "row_limit")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    ROW_LIMIT_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: str
    target: QueryTarget
    parameters: _struct_pb2.Struct
    row_limit: int
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[str] = ..., target: _Optional[_Union[QueryTarget, str]] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., row_limit: _Optional[int] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("columns", "rows", "truncated")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedScalarFieldContainer[str]
    rows: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    truncated: bool
    def __init__(self, columns: _Optional[_Iterable[str]] = ..., rows: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...
