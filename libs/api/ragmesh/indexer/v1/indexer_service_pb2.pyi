from google.protobuf import struct_pb2 as _struct_pb2
from ragmesh.search.v1 import search_service_pb2 as _search_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class IngestStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INGEST_STATUS_UNSPECIFIED: _ClassVar[IngestStatus]
    INGEST_STATUS_INDEXED: _ClassVar[IngestStatus]
    INGEST_STATUS_UNCHANGED: _ClassVar[IngestStatus]
    INGEST_STATUS_FAILED: _ClassVar[IngestStatus]
INGEST_STATUS_UNSPECIFIED: IngestStatus
INGEST_STATUS_INDEXED: IngestStatus
INGEST_STATUS_UNCHANGED: IngestStatus
INGEST_STATUS_FAILED: IngestStatus

class DocumentInput(_message.Message):
    __slots__ = ("collection", "doc_id", "title", "metadata", "text", "file", "url")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    title: str
    metadata: _struct_pb2.Struct
    text: str
    file: FileInput
    url: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ..., title: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[str] = ..., file: _Optional[_Union[FileInput, _Mapping]] = ..., url: _Optional[str] = ...) -> None: ...

class FileInput(_message.Message):
    __slots__ = ("data", "filename", "mime_type", "path")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    filename: str
    mime_type: str
    path: str
    def __init__(self, data: _Optional[bytes] = ..., filename: _Optional[str] = ..., mime_type: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class IngestDocumentRequest(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: DocumentInput
    def __init__(self, document: _Optional[_Union[DocumentInput, _Mapping]] = ...) -> None: ...

class IngestDocumentResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: IngestResult
    def __init__(self, result: _Optional[_Union[IngestResult, _Mapping]] = ...) -> None: ...

class IngestResult(_message.Message):
    __slots__ = ("status", "doc_id", "chunks", "collection", "title", "mime_type", "url", "content_hash")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    status: IngestStatus
    doc_id: str
    chunks: int
    collection: str
    title: str
    mime_type: str
    url: str
    content_hash: str
    def __init__(self, status: _Optional[_Union[IngestStatus, str]] = ..., doc_id: _Optional[str] = ..., chunks: _Optional[int] = ..., collection: _Optional[str] = ..., title: _Optional[str] = ..., mime_type: _Optional[str] = ..., url: _Optional[str] = ..., content_hash: _Optional[str] = ...) -> None: ...

class IngestDocumentsRequest(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInput]
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentInput, _Mapping]]] = ...) -> None: ...

class IngestDocumentsResponse(_message.Message):
    __slots__ = ("index", "result", "error", "completed", "total")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    index: int
    result: IngestResult
    error: IngestError
    completed: int
    total: int
    def __init__(self, index: _Optional[int] = ..., result: _Optional[_Union[IngestResult, _Mapping]] = ..., error: _Optional[_Union[IngestError, _Mapping]] = ..., completed: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class IngestError(_message.Message):
    __slots__ = ("code", "reason", "domain", "message", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: str
    reason: str
    domain: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, code: _Optional[str] = ..., reason: _Optional[str] = ..., domain: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("collection", "doc_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ("deleted_chunks",)
    DELETED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    deleted_chunks: int
    def __init__(self, deleted_chunks: _Optional[int] = ...) -> None: ...

class CreateCollectionRequest(_message.Message):
    __slots__ = ("name", "default_fusion", "default_rrf_k")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FUSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RRF_K_FIELD_NUMBER: _ClassVar[int]
    name: str
    default_fusion: _search_service_pb2.Fusion
    default_rrf_k: int
    def __init__(self, name: _Optional[str] = ..., default_fusion: _Optional[_Union[_search_service_pb2.Fusion, str]] = ..., default_rrf_k: _Optional[int] = ...) -> None: ...

class CreateCollectionResponse(_message.Message):
    __slots__ = ("name", "created", "default_fusion", "default_rrf_k")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_FUSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RRF_K_FIELD_NUMBER: _ClassVar[int]
    name: str
    created: bool
    default_fusion: _search_service_pb2.Fusion
    default_rrf_k: int
    def __init__(self, name: _Optional[str] = ..., created: _Optional[bool] = ..., default_fusion: _Optional[_Union[_search_service_pb2.Fusion, str]] = ..., default_rrf_k: _Optional[int] = ...) -> None: ...

class DeleteCollectionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteCollectionResponse(_message.Message):
    __slots__ = ("name", "deleted_chunks")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DELETED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    deleted_chunks: int
    def __init__(self, name: _Optional[str] = ..., deleted_chunks: _Optional[int] = ...) -> None: ...
