from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_UNSPECIFIED: _ClassVar[SearchMode]
    SEARCH_MODE_HYBRID: _ClassVar[SearchMode]
    SEARCH_MODE_DENSE: _ClassVar[SearchMode]
    SEARCH_MODE_SPARSE: _ClassVar[SearchMode]
    SEARCH_MODE_SEMANTIC: _ClassVar[SearchMode]
    SEARCH_MODE_KEYWORD: _ClassVar[SearchMode]

class Fusion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_UNSPECIFIED: _ClassVar[Fusion]
    FUSION_RRF: _ClassVar[Fusion]
    FUSION_DBSF: _ClassVar[Fusion]
    FUSION_RELATIVE_SCORE: _ClassVar[Fusion]
SEARCH_MODE_UNSPECIFIED: SearchMode
SEARCH_MODE_HYBRID: SearchMode
SEARCH_MODE_DENSE: SearchMode
SEARCH_MODE_SPARSE: SearchMode
SEARCH_MODE_SEMANTIC: SearchMode
SEARCH_MODE_KEYWORD: SearchMode
FUSION_UNSPECIFIED: Fusion
FUSION_RRF: Fusion
FUSION_DBSF: Fusion
FUSION_RELATIVE_SCORE: Fusion

class SearchRequest(_message.Message):
    __slots__ = ("query", "collections", "top_k", "mode", "filters", "group_by_document", "score_threshold", "fusion", "rrf_k")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    RRF_K_FIELD_NUMBER: _ClassVar[int]
    query: str
    collections: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    mode: SearchMode
    filters: _struct_pb2.Struct
    group_by_document: bool
    score_threshold: float
    fusion: Fusion
    rrf_k: int
    def __init__(self, query: _Optional[str] = ..., collections: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., filters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., group_by_document: _Optional[bool] = ..., score_threshold: _Optional[float] = ..., fusion: _Optional[_Union[Fusion, str]] = ..., rrf_k: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("query", "results", "mode", "fusion")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    query: str
    results: _containers.RepeatedCompositeFieldContainer[SearchResult]
    mode: SearchMode
    fusion: Fusion
    def __init__(self, query: _Optional[str] = ..., results: _Optional[_Iterable[_Union[SearchResult, _Mapping]]] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., fusion: _Optional[_Union[Fusion, str]] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("doc_id", "chunk_id", "chunk_index", "text", "score", "title", "collection", "metadata", "source", "filename", "url", "mime_type")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    chunk_id: str
    chunk_index: int
    text: str
    score: float
    title: str
    collection: str
    metadata: _struct_pb2.Struct
    source: str
    filename: str
    url: str
    mime_type: str
    def __init__(self, doc_id: _Optional[str] = ..., chunk_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., title: _Optional[str] = ..., collection: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[str] = ..., filename: _Optional[str] = ..., url: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("collection", "doc_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ...) -> None: ...

class GetDocumentResponse(_message.Message):
    __slots__ = ("doc_id", "collection", "title", "text", "chunks", "metadata", "source", "filename", "url", "mime_type", "content_hash", "ingested_at")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    INGESTED_AT_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    collection: str
    title: str
    text: str
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    metadata: _struct_pb2.Struct
    source: str
    filename: str
    url: str
    mime_type: str
    content_hash: str
    ingested_at: str
    def __init__(self, doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[str] = ..., filename: _Optional[str] = ..., url: _Optional[str] = ..., mime_type: _Optional[str] = ..., content_hash: _Optional[str] = ..., ingested_at: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("chunk_id", "chunk_index", "text")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    chunk_index: int
    text: str
    def __init__(self, chunk_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionInfo]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionInfo, _Mapping]]] = ...) -> None: ...

class CollectionInfo(_message.Message):
    __slots__ = ("name", "documents", "chunks")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    documents: int
    chunks: int
    def __init__(self, name: _Optional[str] = ..., documents: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...
