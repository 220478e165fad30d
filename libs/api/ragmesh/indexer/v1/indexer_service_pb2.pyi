from google.protobuf import struct_pb2 as _struct_pb2
from ragmesh.search.v1 import search_service_pb2 as _search_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_DONE: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_REJECTED: _ClassVar[JobState]

class IngestStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INGEST_STATUS_UNSPECIFIED: _ClassVar[IngestStatus]
    INGEST_STATUS_INDEXED: _ClassVar[IngestStatus]
    INGEST_STATUS_UNCHANGED: _ClassVar[IngestStatus]
    INGEST_STATUS_FAILED: _ClassVar[IngestStatus]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_DONE: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_REJECTED: JobState
INGEST_STATUS_UNSPECIFIED: IngestStatus
INGEST_STATUS_INDEXED: IngestStatus
INGEST_STATUS_UNCHANGED: IngestStatus
INGEST_STATUS_FAILED: IngestStatus

class EntityInput(_message.Message):
    __slots__ = ("type", "primary_key", "properties", "labels", "alternative_keys", "relations")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    type: str
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    properties: _struct_pb2.Struct
    labels: _containers.RepeatedScalarFieldContainer[str]
    alternative_keys: _containers.RepeatedScalarFieldContainer[str]
    relations: _containers.RepeatedCompositeFieldContainer[EntityRelation]
    def __init__(self, type: _Optional[str] = ..., primary_key: _Optional[_Iterable[str]] = ..., properties: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., labels: _Optional[_Iterable[str]] = ..., alternative_keys: _Optional[_Iterable[str]] = ..., relations: _Optional[_Iterable[_Union[EntityRelation, _Mapping]]] = ...) -> None: ...

class EntityRelation(_message.Message):
    __slots__ = ("type", "target_id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    target_id: str
    def __init__(self, type: _Optional[str] = ..., target_id: _Optional[str] = ...) -> None: ...

class IngestEntitiesRequest(_message.Message):
    __slots__ = ("collection", "entities", "files", "max_property_chars")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    MAX_PROPERTY_CHARS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    entities: _containers.RepeatedCompositeFieldContainer[EntityInput]
    files: _containers.RepeatedCompositeFieldContainer[FileInput]
    max_property_chars: int
    def __init__(self, collection: _Optional[str] = ..., entities: _Optional[_Iterable[_Union[EntityInput, _Mapping]]] = ..., files: _Optional[_Iterable[_Union[FileInput, _Mapping]]] = ..., max_property_chars: _Optional[int] = ...) -> None: ...

class IngestEntitiesResponse(_message.Message):
    __slots__ = ("entities", "relations", "entity_types", "relation_types", "entity_ids", "dangling_relations", "omitted_properties")
    class EntityTypesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class RelationTypesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TYPES_FIELD_NUMBER: _ClassVar[int]
    RELATION_TYPES_FIELD_NUMBER: _ClassVar[int]
    ENTITY_IDS_FIELD_NUMBER: _ClassVar[int]
    DANGLING_RELATIONS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    entities: int
    relations: int
    entity_types: _containers.ScalarMap[str, int]
    relation_types: _containers.ScalarMap[str, int]
    entity_ids: _containers.RepeatedScalarFieldContainer[str]
    dangling_relations: _containers.RepeatedScalarFieldContainer[str]
    omitted_properties: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, entities: _Optional[int] = ..., relations: _Optional[int] = ..., entity_types: _Optional[_Mapping[str, int]] = ..., relation_types: _Optional[_Mapping[str, int]] = ..., entity_ids: _Optional[_Iterable[str]] = ..., dangling_relations: _Optional[_Iterable[str]] = ..., omitted_properties: _Optional[_Iterable[str]] = ...) -> None: ...

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

class UrlList(_message.Message):
    __slots__ = ("urls",)
    URLS_FIELD_NUMBER: _ClassVar[int]
    urls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, urls: _Optional[_Iterable[str]] = ...) -> None: ...

class DocumentList(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInput]
    def __init__(self, documents: _Optional[_Iterable[_Union[DocumentInput, _Mapping]]] = ...) -> None: ...

class Archive(_message.Message):
    __slots__ = ("data", "filename")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    filename: str
    def __init__(self, data: _Optional[bytes] = ..., filename: _Optional[str] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("collection", "urls", "documents", "archive", "folder", "manifest_upload", "prune", "fresh_for_seconds")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    URLS_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_UPLOAD_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    FRESH_FOR_SECONDS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    urls: UrlList
    documents: DocumentList
    archive: Archive
    folder: str
    manifest_upload: ManifestUpload
    prune: bool
    fresh_for_seconds: int
    def __init__(self, collection: _Optional[str] = ..., urls: _Optional[_Union[UrlList, _Mapping]] = ..., documents: _Optional[_Union[DocumentList, _Mapping]] = ..., archive: _Optional[_Union[Archive, _Mapping]] = ..., folder: _Optional[str] = ..., manifest_upload: _Optional[_Union[ManifestUpload, _Mapping]] = ..., prune: _Optional[bool] = ..., fresh_for_seconds: _Optional[int] = ...) -> None: ...

class ManifestEntry(_message.Message):
    __slots__ = ("path", "sha256", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    size: int
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class Manifest(_message.Message):
    __slots__ = ("host", "folder", "entries")
    HOST_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    host: str
    folder: str
    entries: _containers.RepeatedCompositeFieldContainer[ManifestEntry]
    def __init__(self, host: _Optional[str] = ..., folder: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ManifestEntry, _Mapping]]] = ...) -> None: ...

class PlanUploadRequest(_message.Message):
    __slots__ = ("collection", "manifest", "prune")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    collection: str
    manifest: Manifest
    prune: bool
    def __init__(self, collection: _Optional[str] = ..., manifest: _Optional[_Union[Manifest, _Mapping]] = ..., prune: _Optional[bool] = ...) -> None: ...

class PlanUploadResponse(_message.Message):
    __slots__ = ("datasource_id", "upload_paths", "delete_paths", "unchanged")
    DATASOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_PATHS_FIELD_NUMBER: _ClassVar[int]
    DELETE_PATHS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    datasource_id: str
    upload_paths: _containers.RepeatedScalarFieldContainer[str]
    delete_paths: _containers.RepeatedScalarFieldContainer[str]
    unchanged: int
    def __init__(self, datasource_id: _Optional[str] = ..., upload_paths: _Optional[_Iterable[str]] = ..., delete_paths: _Optional[_Iterable[str]] = ..., unchanged: _Optional[int] = ...) -> None: ...

class ManifestUpload(_message.Message):
    __slots__ = ("manifest", "archive", "skipped_files", "partial")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FILES_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    manifest: Manifest
    archive: Archive
    skipped_files: _containers.RepeatedCompositeFieldContainer[SkippedFile]
    partial: bool
    def __init__(self, manifest: _Optional[_Union[Manifest, _Mapping]] = ..., archive: _Optional[_Union[Archive, _Mapping]] = ..., skipped_files: _Optional[_Iterable[_Union[SkippedFile, _Mapping]]] = ..., partial: _Optional[bool] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "collection", "state", "kind", "source", "total", "indexed", "unchanged", "failed", "skipped", "deleted", "bytes", "errors", "skipped_files", "created_at", "started_at", "finished_at", "documents_per_second", "bytes_per_second", "datasource_id", "error", "prune", "reindex")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    INDEXED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FILES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DATASOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    REINDEX_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    collection: str
    state: JobState
    kind: str
    source: str
    total: int
    indexed: int
    unchanged: int
    failed: int
    skipped: int
    deleted: int
    bytes: int
    errors: _containers.RepeatedCompositeFieldContainer[JobDocumentError]
    skipped_files: _containers.RepeatedCompositeFieldContainer[SkippedFile]
    created_at: str
    started_at: str
    finished_at: str
    documents_per_second: float
    bytes_per_second: float
    datasource_id: str
    error: str
    prune: bool
    reindex: ReindexInfo
    def __init__(self, job_id: _Optional[str] = ..., collection: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., kind: _Optional[str] = ..., source: _Optional[str] = ..., total: _Optional[int] = ..., indexed: _Optional[int] = ..., unchanged: _Optional[int] = ..., failed: _Optional[int] = ..., skipped: _Optional[int] = ..., deleted: _Optional[int] = ..., bytes: _Optional[int] = ..., errors: _Optional[_Iterable[_Union[JobDocumentError, _Mapping]]] = ..., skipped_files: _Optional[_Iterable[_Union[SkippedFile, _Mapping]]] = ..., created_at: _Optional[str] = ..., started_at: _Optional[str] = ..., finished_at: _Optional[str] = ..., documents_per_second: _Optional[float] = ..., bytes_per_second: _Optional[float] = ..., datasource_id: _Optional[str] = ..., error: _Optional[str] = ..., prune: _Optional[bool] = ..., reindex: _Optional[_Union[ReindexInfo, _Mapping]] = ...) -> None: ...

class ReindexInfo(_message.Message):
    __slots__ = ("from_version", "to_version", "settings", "tolerance", "force", "retention_seconds", "decision", "current", "candidate")
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    from_version: int
    to_version: int
    settings: _search_service_pb2.IndexSettings
    tolerance: float
    force: bool
    retention_seconds: int
    decision: str
    current: _search_service_pb2.Evaluation
    candidate: _search_service_pb2.Evaluation
    def __init__(self, from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., settings: _Optional[_Union[_search_service_pb2.IndexSettings, _Mapping]] = ..., tolerance: _Optional[float] = ..., force: _Optional[bool] = ..., retention_seconds: _Optional[int] = ..., decision: _Optional[str] = ..., current: _Optional[_Union[_search_service_pb2.Evaluation, _Mapping]] = ..., candidate: _Optional[_Union[_search_service_pb2.Evaluation, _Mapping]] = ...) -> None: ...

class ReindexCollectionRequest(_message.Message):
    __slots__ = ("collection", "chunk_tokens", "chunk_overlap_tokens", "model", "tolerance", "force", "retention_seconds")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_OVERLAP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    chunk_tokens: int
    chunk_overlap_tokens: int
    model: str
    tolerance: float
    force: bool
    retention_seconds: int
    def __init__(self, collection: _Optional[str] = ..., chunk_tokens: _Optional[int] = ..., chunk_overlap_tokens: _Optional[int] = ..., model: _Optional[str] = ..., tolerance: _Optional[float] = ..., force: _Optional[bool] = ..., retention_seconds: _Optional[int] = ...) -> None: ...

class ReindexCollectionResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class RollbackCollectionRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class RollbackCollectionResponse(_message.Message):
    __slots__ = ("collection", "version", "replaced_version")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLACED_VERSION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    version: int
    replaced_version: int
    def __init__(self, collection: _Optional[str] = ..., version: _Optional[int] = ..., replaced_version: _Optional[int] = ...) -> None: ...

class JobDocumentError(_message.Message):
    __slots__ = ("document", "error")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    document: str
    error: IngestError
    def __init__(self, document: _Optional[str] = ..., error: _Optional[_Union[IngestError, _Mapping]] = ...) -> None: ...

class SkippedFile(_message.Message):
    __slots__ = ("path", "reason")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    path: str
    reason: str
    def __init__(self, path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Datasource(_message.Message):
    __slots__ = ("datasource_id", "collection", "kind", "folder", "urls", "prune", "fresh_for_seconds", "fresh_until", "last_job_id", "last_synced_at", "due", "host")
    DATASOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    URLS_FIELD_NUMBER: _ClassVar[int]
    PRUNE_FIELD_NUMBER: _ClassVar[int]
    FRESH_FOR_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FRESH_UNTIL_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SYNCED_AT_FIELD_NUMBER: _ClassVar[int]
    DUE_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    datasource_id: str
    collection: str
    kind: str
    folder: str
    urls: _containers.RepeatedScalarFieldContainer[str]
    prune: bool
    fresh_for_seconds: int
    fresh_until: str
    last_job_id: str
    last_synced_at: str
    due: bool
    host: str
    def __init__(self, datasource_id: _Optional[str] = ..., collection: _Optional[str] = ..., kind: _Optional[str] = ..., folder: _Optional[str] = ..., urls: _Optional[_Iterable[str]] = ..., prune: _Optional[bool] = ..., fresh_for_seconds: _Optional[int] = ..., fresh_until: _Optional[str] = ..., last_job_id: _Optional[str] = ..., last_synced_at: _Optional[str] = ..., due: _Optional[bool] = ..., host: _Optional[str] = ...) -> None: ...

class ListDatasourcesRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class ListDatasourcesResponse(_message.Message):
    __slots__ = ("datasources",)
    DATASOURCES_FIELD_NUMBER: _ClassVar[int]
    datasources: _containers.RepeatedCompositeFieldContainer[Datasource]
    def __init__(self, datasources: _Optional[_Iterable[_Union[Datasource, _Mapping]]] = ...) -> None: ...

class SyncDatasourcesRequest(_message.Message):
    __slots__ = ("collection", "all")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    collection: str
    all: bool
    def __init__(self, collection: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class SyncDatasourcesResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class ExpiredDocument(_message.Message):
    __slots__ = ("doc_id", "fresh_until", "datasource_id")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    FRESH_UNTIL_FIELD_NUMBER: _ClassVar[int]
    DATASOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    fresh_until: str
    datasource_id: str
    def __init__(self, doc_id: _Optional[str] = ..., fresh_until: _Optional[str] = ..., datasource_id: _Optional[str] = ...) -> None: ...

class ListExpiredDocumentsRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class ListExpiredDocumentsResponse(_message.Message):
    __slots__ = ("documents",)
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[ExpiredDocument]
    def __init__(self, documents: _Optional[_Iterable[_Union[ExpiredDocument, _Mapping]]] = ...) -> None: ...

class PruneExpiredDocumentsRequest(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    def __init__(self, collection: _Optional[str] = ...) -> None: ...

class PruneExpiredDocumentsResponse(_message.Message):
    __slots__ = ("doc_ids",)
    DOC_IDS_FIELD_NUMBER: _ClassVar[int]
    doc_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, doc_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DocumentInput(_message.Message):
    __slots__ = ("collection", "doc_id", "title", "metadata", "text", "file", "url", "datasource_id", "fresh_until")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    DATASOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    FRESH_UNTIL_FIELD_NUMBER: _ClassVar[int]
    collection: str
    doc_id: str
    title: str
    metadata: _struct_pb2.Struct
    text: str
    file: FileInput
    url: str
    datasource_id: str
    fresh_until: str
    def __init__(self, collection: _Optional[str] = ..., doc_id: _Optional[str] = ..., title: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[str] = ..., file: _Optional[_Union[FileInput, _Mapping]] = ..., url: _Optional[str] = ..., datasource_id: _Optional[str] = ..., fresh_until: _Optional[str] = ...) -> None: ...

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
