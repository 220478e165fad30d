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
    FUSION_ADAPTIVE: _ClassVar[Fusion]
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
FUSION_ADAPTIVE: Fusion

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
    __slots__ = ("query", "results", "mode", "fusion", "versions")
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    QUERY_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    query: str
    results: _containers.RepeatedCompositeFieldContainer[SearchResult]
    mode: SearchMode
    fusion: Fusion
    versions: _containers.ScalarMap[str, int]
    def __init__(self, query: _Optional[str] = ..., results: _Optional[_Iterable[_Union[SearchResult, _Mapping]]] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., fusion: _Optional[_Union[Fusion, str]] = ..., versions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("doc_id", "chunk_id", "chunk_index", "text", "score", "title", "collection", "metadata", "source", "filename", "url", "mime_type", "location")
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
    LOCATION_FIELD_NUMBER: _ClassVar[int]
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
    location: SourceLocation
    def __init__(self, doc_id: _Optional[str] = ..., chunk_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., title: _Optional[str] = ..., collection: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., source: _Optional[str] = ..., filename: _Optional[str] = ..., url: _Optional[str] = ..., mime_type: _Optional[str] = ..., location: _Optional[_Union[SourceLocation, _Mapping]] = ...) -> None: ...

class SourceLocation(_message.Message):
    __slots__ = ("path", "language", "start_line", "end_line")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    END_LINE_FIELD_NUMBER: _ClassVar[int]
    path: str
    language: str
    start_line: int
    end_line: int
    def __init__(self, path: _Optional[str] = ..., language: _Optional[str] = ..., start_line: _Optional[int] = ..., end_line: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("chunk_id", "chunk_index", "text", "location")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    chunk_index: int
    text: str
    location: SourceLocation
    def __init__(self, chunk_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., location: _Optional[_Union[SourceLocation, _Mapping]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[CollectionInfo]
    def __init__(self, collections: _Optional[_Iterable[_Union[CollectionInfo, _Mapping]]] = ...) -> None: ...

class CollectionInfo(_message.Message):
    __slots__ = ("name", "documents", "chunks", "version", "versions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    documents: int
    chunks: int
    version: int
    versions: _containers.RepeatedCompositeFieldContainer[CollectionVersion]
    def __init__(self, name: _Optional[str] = ..., documents: _Optional[int] = ..., chunks: _Optional[int] = ..., version: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[CollectionVersion, _Mapping]]] = ...) -> None: ...

class CollectionVersion(_message.Message):
    __slots__ = ("version", "state", "settings", "created_at", "retained_until", "job_id", "documents", "chunks")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    RETAINED_UNTIL_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    version: int
    state: str
    settings: IndexSettings
    created_at: str
    retained_until: str
    job_id: str
    documents: int
    chunks: int
    def __init__(self, version: _Optional[int] = ..., state: _Optional[str] = ..., settings: _Optional[_Union[IndexSettings, _Mapping]] = ..., created_at: _Optional[str] = ..., retained_until: _Optional[str] = ..., job_id: _Optional[str] = ..., documents: _Optional[int] = ..., chunks: _Optional[int] = ...) -> None: ...

class IndexSettings(_message.Message):
    __slots__ = ("model", "model_id", "dimension", "sparse_model_id", "chunk_tokens", "chunk_overlap_tokens", "chunker_fingerprint")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    SPARSE_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_OVERLAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNKER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    model: str
    model_id: str
    dimension: int
    sparse_model_id: str
    chunk_tokens: int
    chunk_overlap_tokens: int
    chunker_fingerprint: str
    def __init__(self, model: _Optional[str] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., sparse_model_id: _Optional[str] = ..., chunk_tokens: _Optional[int] = ..., chunk_overlap_tokens: _Optional[int] = ..., chunker_fingerprint: _Optional[str] = ...) -> None: ...

class GoldenQuery(_message.Message):
    __slots__ = ("query_id", "text", "relevant")
    class RelevantEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    QUERY_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RELEVANT_FIELD_NUMBER: _ClassVar[int]
    query_id: str
    text: str
    relevant: _containers.ScalarMap[str, int]
    def __init__(self, query_id: _Optional[str] = ..., text: _Optional[str] = ..., relevant: _Optional[_Mapping[str, int]] = ...) -> None: ...

class SetGoldenSetRequest(_message.Message):
    __slots__ = ("collection", "queries")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    queries: _containers.RepeatedCompositeFieldContainer[GoldenQuery]
    def __init__(self, collection: _Optional[str] = ..., queries: _Optional[_Iterable[_Union[GoldenQuery, _Mapping]]] = ...) -> None: ...

class SetGoldenSetResponse(_message.Message):
    __slots__ = ("collection", "queries", "judgments", "updated_at", "golden_set_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    JUDGMENTS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_SET_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    queries: int
    judgments: int
    updated_at: str
    golden_set_id: str
    def __init__(self, collection: _Optional[str] = ..., queries: _Optional[int] = ..., judgments: _Optional[int] = ..., updated_at: _Optional[str] = ..., golden_set_id: _Optional[str] = ...) -> None: ...

class GetGoldenSetRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class GetGoldenSetResponse(_message.Message):
    __slots__ = ("collection", "queries", "updated_at", "golden_set_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_SET_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    queries: _containers.RepeatedCompositeFieldContainer[GoldenQuery]
    updated_at: str
    golden_set_id: str
    def __init__(self, collection: _Optional[str] = ..., queries: _Optional[_Iterable[_Union[GoldenQuery, _Mapping]]] = ..., updated_at: _Optional[str] = ..., golden_set_id: _Optional[str] = ...) -> None: ...

class DeleteGoldenSetRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class DeleteGoldenSetResponse(_message.Message):
    __slots__ = ("collection", "deleted_queries")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DELETED_QUERIES_FIELD_NUMBER: _ClassVar[int]
    collection: str
    deleted_queries: int
    def __init__(self, collection: _Optional[str] = ..., deleted_queries: _Optional[int] = ...) -> None: ...

class EvaluateCollectionRequest(_message.Message):
    __slots__ = ("collection", "modes", "version")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    MODES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    modes: _containers.RepeatedScalarFieldContainer[SearchMode]
    version: int
    def __init__(self, collection: _Optional[str] = ..., modes: _Optional[_Iterable[_Union[SearchMode, str]]] = ..., version: _Optional[int] = ...) -> None: ...

class EvaluateCollectionResponse(_message.Message):
    __slots__ = ("evaluations",)
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    evaluations: _containers.RepeatedCompositeFieldContainer[Evaluation]
    def __init__(self, evaluations: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ...) -> None: ...

class Evaluation(_message.Message):
    __slots__ = ("collection", "evaluated_at", "mode", "fusion", "queries", "ndcg_at_10", "recall_at_10", "mrr_at_10", "documents", "chunks", "model", "golden_set_id", "took_ms", "version")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_AT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    NDCG_AT_10_FIELD_NUMBER: _ClassVar[int]
    RECALL_AT_10_FIELD_NUMBER: _ClassVar[int]
    MRR_AT_10_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GOLDEN_SET_ID_FIELD_NUMBER: _ClassVar[int]
    TOOK_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    evaluated_at: str
    mode: SearchMode
    fusion: Fusion
    queries: int
    ndcg_at_10: float
    recall_at_10: float
    mrr_at_10: float
    documents: int
    chunks: int
    model: str
    golden_set_id: str
    took_ms: float
    version: int
    def __init__(self, collection: _Optional[str] = ..., evaluated_at: _Optional[str] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., fusion: _Optional[_Union[Fusion, str]] = ..., queries: _Optional[int] = ..., ndcg_at_10: _Optional[float] = ..., recall_at_10: _Optional[float] = ..., mrr_at_10: _Optional[float] = ..., documents: _Optional[int] = ..., chunks: _Optional[int] = ..., model: _Optional[str] = ..., golden_set_id: _Optional[str] = ..., took_ms: _Optional[float] = ..., version: _Optional[int] = ...) -> None: ...

class ListEvaluationsRequest(_message.Message):
    __slots__ = ("collection", "mode", "limit")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    collection: str
    mode: SearchMode
    limit: int
    def __init__(self, collection: _Optional[str] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., limit: _Optional[int] = ...) -> None: ...

class ListEvaluationsResponse(_message.Message):
    __slots__ = ("evaluations",)
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    evaluations: _containers.RepeatedCompositeFieldContainer[Evaluation]
    def __init__(self, evaluations: _Optional[_Iterable[_Union[Evaluation, _Mapping]]] = ...) -> None: ...
