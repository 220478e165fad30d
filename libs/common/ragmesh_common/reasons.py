"""Every error reason ragmesh gives (google.rpc.ErrorInfo `reason`, the `reason` of a REST error body), with its
canonical gRPC code and what it means: the one registry of them.

Code raises `RagmeshError(grpc.StatusCode.NOT_FOUND, Reason.COLLECTION_NOT_FOUND, ...)` (or a helper of
`.errors`); a `Reason` is a `str`, so what goes on the wire, into logs and into JSON is its name.
docs/reference/errors.md is generated from this class (`python scripts/gen_docs.py`), and
tests/test_docs_reference.py checks that every reason the code passes is a member, that every member is used,
and that each is raised with the code given here. A failure that the callee's code did not describe (a proxy's
answer, a peer that sent no details) has its gRPC code's name as its reason (`errors.transport_error`).
"""

from __future__ import annotations

from enum import StrEnum

import grpc

_C = grpc.StatusCode


class Reason(StrEnum):
    """An error reason: its value is its name; `code` is the gRPC code it is raised with, `meaning` says when."""

    code: grpc.StatusCode
    meaning: str

    def __new__(cls, value: str, code: grpc.StatusCode, meaning: str) -> Reason:
        member = str.__new__(cls, value)
        member._value_ = value
        member.code = code
        member.meaning = meaning
        return member

    API_KEY_INVALID = "API_KEY_INVALID", _C.UNAUTHENTICATED, "The bearer key is not one of RAGMESH_API_KEYS."
    API_KEY_MISSING = (
        "API_KEY_MISSING",
        _C.UNAUTHENTICATED,
        "The gateway has API keys and the request sent none (`Authorization: Bearer <key>`).",
    )
    ARCHIVE_INVALID = "ARCHIVE_INVALID", _C.INVALID_ARGUMENT, "An ingest job's archive is not a ZIP archive."
    CANCELLED = (
        "CANCELLED",
        _C.CANCELLED,
        "A call to a backend service was cancelled before it answered (the service names it).",
    )
    CHAT_MODEL_NOT_CONFIGURED = (
        "CHAT_MODEL_NOT_CONFIGURED",
        _C.UNAVAILABLE,
        "No chat model is configured and RAGMESH_ANSWER_REQUIRE_MODEL=true refuses extractive answers.",
    )
    CHAT_MODEL_RATE_LIMITED = (
        "CHAT_MODEL_RATE_LIMITED",
        _C.RESOURCE_EXHAUSTED,
        "The chat model's API answered 429 (rate limited) after the retries.",
    )
    CHAT_MODEL_REJECTED = (
        "CHAT_MODEL_REJECTED",
        _C.UNAVAILABLE,
        "The chat model's API refused the request (an HTTP 4xx other than 429: a wrong key, model or URL).",
    )
    CHAT_MODEL_TIMEOUT = (
        "CHAT_MODEL_TIMEOUT",
        _C.DEADLINE_EXCEEDED,
        "The chat model did not answer within RAGMESH_ANSWER_TIMEOUT_SECONDS.",
    )
    CHAT_MODEL_UNAVAILABLE = (
        "CHAT_MODEL_UNAVAILABLE",
        _C.UNAVAILABLE,
        "The chat model's API could not be reached, failed (5xx) or gave an answer that could not be read.",
    )
    CHUNK_OVERLAP_OUT_OF_RANGE = (
        "CHUNK_OVERLAP_OUT_OF_RANGE",
        _C.INVALID_ARGUMENT,
        "chunk_overlap_tokens is negative or not less than half of chunk_tokens.",
    )
    CHUNK_TOKENS_OUT_OF_RANGE = (
        "CHUNK_TOKENS_OUT_OF_RANGE",
        _C.INVALID_ARGUMENT,
        "A re-index asked for chunk_tokens outside 16..8192.",
    )
    COLLECTION_FORBIDDEN = (
        "COLLECTION_FORBIDDEN",
        _C.PERMISSION_DENIED,
        "The API key is limited to some collections and the request names another.",
    )
    COLLECTION_NAME_INVALID = (
        "COLLECTION_NAME_INVALID",
        _C.INVALID_ARGUMENT,
        "A collection name is empty or not 1-63 characters a-z, 0-9, '_' or '-' starting with a letter or digit.",
    )
    COLLECTION_NOT_FOUND = "COLLECTION_NOT_FOUND", _C.NOT_FOUND, "The collection does not exist."
    COLLECTION_REQUIRED = (
        "COLLECTION_REQUIRED",
        _C.PERMISSION_DENIED,
        "The API key is limited to some collections: a sync of every datasource must name the collection.",
    )
    CONFIRMATION_REQUIRED = (
        "CONFIRMATION_REQUIRED",
        _C.FAILED_PRECONDITION,
        "Deleting a whole collection needs confirm=true.",
    )
    DEADLINE_EXCEEDED = (
        "DEADLINE_EXCEEDED",
        _C.DEADLINE_EXCEEDED,
        "A backend service did not answer in time, or no time was left to call it (the service names it).",
    )
    DENSE_FORMAT_INVALID = (
        "DENSE_FORMAT_INVALID",
        _C.INVALID_ARGUMENT,
        "An Embed request's dense_format is not a known DenseFormat.",
    )
    DEPTH_OUT_OF_RANGE = (
        "DEPTH_OUT_OF_RANGE",
        _C.INVALID_ARGUMENT,
        "A graph walk's depth is outside its range (explore 1..3, shortest paths 1..6).",
    )
    DOCUMENT_CONTENT_MISSING = (
        "DOCUMENT_CONTENT_MISSING",
        _C.INVALID_ARGUMENT,
        "A document to ingest has no text, file or URL.",
    )
    DOCUMENT_CONVERSION_FAILED = (
        "DOCUMENT_CONVERSION_FAILED",
        _C.INVALID_ARGUMENT,
        "The converter could not read the document (corrupt or truncated).",
    )
    DOCUMENT_ENCRYPTED = (
        "DOCUMENT_ENCRYPTED",
        _C.INVALID_ARGUMENT,
        "The document (or a member of an archive) is password-protected.",
    )
    DOCUMENT_ID_INVALID = (
        "DOCUMENT_ID_INVALID",
        _C.INVALID_ARGUMENT,
        "A doc_id is missing, too long or not printable characters without surrounding spaces.",
    )
    DOCUMENT_NOT_FOUND = "DOCUMENT_NOT_FOUND", _C.NOT_FOUND, "The collection holds no document with this doc_id."
    EMBEDDER_STOPPING = (
        "EMBEDDER_STOPPING",
        _C.UNAVAILABLE,
        "The embedder is shutting down; another replica (or a retry) serves the texts.",
    )
    EMBEDDING_BACKEND_FAILED = (
        "EMBEDDING_BACKEND_FAILED",
        _C.UNAVAILABLE,
        "The OpenAI-compatible embeddings API behind the embedder failed.",
    )
    EMBEDDING_COUNT_MISMATCH = (
        "EMBEDDING_COUNT_MISMATCH",
        _C.INTERNAL,
        "The embedder returned a different number of embeddings than the indexer sent chunks.",
    )
    EMBEDDING_DIMENSION_MISMATCH = (
        "EMBEDDING_DIMENSION_MISMATCH",
        _C.FAILED_PRECONDITION,
        "The embedder's model makes vectors of another dimension than the store holds.",
    )
    EMPTY_DOCUMENT = (
        "EMPTY_DOCUMENT",
        _C.INVALID_ARGUMENT,
        "The document has no bytes or no text to convert or index (scanned images are not OCR'd).",
    )
    ENTITY_INVALID = (
        "ENTITY_INVALID",
        _C.INVALID_ARGUMENT,
        "An entity of a graph write is malformed (its id, type, a property or a relation); the field is named.",
    )
    ENTITY_NOT_FOUND = (
        "ENTITY_NOT_FOUND",
        _C.NOT_FOUND,
        "The collection's graph has no entity with that id.",
    )
    ENTITY_TYPE_NOT_FOUND = (
        "ENTITY_TYPE_NOT_FOUND",
        _C.NOT_FOUND,
        "The collection's graph has no entity of that type.",
    )
    FILE_NOT_FOUND = "FILE_NOT_FOUND", _C.NOT_FOUND, "A local path names no file (or folder)."
    FILE_UNREADABLE = "FILE_UNREADABLE", _C.NOT_FOUND, "A file of a folder job could not be read."
    FILTER_INVALID = (
        "FILTER_INVALID",
        _C.INVALID_ARGUMENT,
        "A search filter's key or value is not one a filter can take (a string, number or boolean, or a list of them).",
    )
    FOLDER_NOT_FOUND = "FOLDER_NOT_FOUND", _C.NOT_FOUND, "A local path names no folder."
    FRESH_FOR_INVALID = (
        "FRESH_FOR_INVALID",
        _C.INVALID_ARGUMENT,
        "A datasource's fresh_for_seconds is negative or longer than 100 years.",
    )
    GOLDEN_DOCUMENT_NOT_FOUND = (
        "GOLDEN_DOCUMENT_NOT_FOUND",
        _C.NOT_FOUND,
        "Relevant documents of the golden set are not in the collection (ingest them first).",
    )
    GOLDEN_GRADE_INVALID = (
        "GOLDEN_GRADE_INVALID",
        _C.INVALID_ARGUMENT,
        "A judgment of the golden set has a grade outside 0..10 (0: judged not relevant).",
    )
    GOLDEN_QUERY_DUPLICATE = (
        "GOLDEN_QUERY_DUPLICATE",
        _C.INVALID_ARGUMENT,
        "Two queries of the golden set have the same query_id.",
    )
    GOLDEN_QUERY_INVALID = (
        "GOLDEN_QUERY_INVALID",
        _C.INVALID_ARGUMENT,
        "A query of the golden set has a blank or too long query_id or text, or no relevant document.",
    )
    GOLDEN_SET_EMPTY = "GOLDEN_SET_EMPTY", _C.INVALID_ARGUMENT, "The golden set has no queries."
    GOLDEN_SET_NOT_FOUND = "GOLDEN_SET_NOT_FOUND", _C.NOT_FOUND, "The collection has no golden set; store one first."
    GOLDEN_SET_TOO_LARGE = (
        "GOLDEN_SET_TOO_LARGE",
        _C.INVALID_ARGUMENT,
        "The golden set has more queries, or more judgments, than the limit.",
    )
    GRAPH_BUFFER_POOL_FULL = (
        "GRAPH_BUFFER_POOL_FULL",
        _C.RESOURCE_EXHAUSTED,
        "A graph write needs more page cache than RAGMESH_GRAPH_BUFFER_POOL_MB gives it; nothing of the batch was "
        "written (send smaller batches, or raise the setting).",
    )
    GRAPH_DISABLED = (
        "GRAPH_DISABLED",
        _C.FAILED_PRECONDITION,
        "A graph call reached a service whose graph feature is off (RAGMESH_GRAPH_ENABLED is not true).",
    )
    GRAPH_FILE_INVALID = (
        "GRAPH_FILE_INVALID",
        _C.INVALID_ARGUMENT,
        "A file of entities (Kubernetes YAML or JSON, JSON Lines) cannot be parsed; the file and line are given.",
    )
    GRAPH_NOT_FOUND = (
        "GRAPH_NOT_FOUND",
        _C.NOT_FOUND,
        "The collection has no graph (no entity was ever written to it).",
    )
    INGEST_RESULT_MISSING = (
        "INGEST_RESULT_MISSING",
        _C.INTERNAL,
        "The indexer finished a batch without a result for one of its documents.",
    )
    INPUT_TYPE_INVALID = (
        "INPUT_TYPE_INVALID",
        _C.INVALID_ARGUMENT,
        "An Embed request's input_type is not a known InputType.",
    )
    INTERNAL_ERROR = (
        "INTERNAL_ERROR",
        _C.INTERNAL,
        "An unexpected exception; it is logged by the service that raised it, never shown.",
    )
    JOBS_DISABLED = "JOBS_DISABLED", _C.UNIMPLEMENTED, "This indexer runs no jobs (it was started without them)."
    JOB_ID_INVALID = "JOB_ID_INVALID", _C.INVALID_ARGUMENT, "A job_id is missing."
    JOB_NOT_FOUND = "JOB_NOT_FOUND", _C.NOT_FOUND, "There is no job with this id (or it expired)."
    JOB_SOURCE_MISSING = (
        "JOB_SOURCE_MISSING",
        _C.INVALID_ARGUMENT,
        "An ingest job names no URLs, documents, archive or folder.",
    )
    LIMIT_OUT_OF_RANGE = "LIMIT_OUT_OF_RANGE", _C.INVALID_ARGUMENT, "A list's limit is outside its allowed range."
    LOCAL_PATHS_DISABLED = (
        "LOCAL_PATHS_DISABLED",
        _C.PERMISSION_DENIED,
        "A local path was given to a server that reads no local files (its roots setting is empty).",
    )
    MANIFEST_HASH_INVALID = (
        "MANIFEST_HASH_INVALID",
        _C.INVALID_ARGUMENT,
        "A manifest entry's sha256 is not 64 lowercase hex digits.",
    )
    MANIFEST_MISMATCH = (
        "MANIFEST_MISMATCH",
        _C.INVALID_ARGUMENT,
        "A manifest upload's archive holds a file that is not in the manifest, or not with the manifest's SHA-256.",
    )
    MANIFEST_PATH_INVALID = (
        "MANIFEST_PATH_INVALID",
        _C.INVALID_ARGUMENT,
        "A manifest names no folder, or an entry's path is empty, absolute, has '.' or '..' parts, or repeats one.",
    )
    MANIFEST_TOO_LARGE = "MANIFEST_TOO_LARGE", _C.INVALID_ARGUMENT, "A manifest lists more files than the limit."
    MESH_TOKEN_INVALID = (
        "MESH_TOKEN_INVALID",
        _C.UNAUTHENTICATED,
        "A gRPC call between services lacks the right RAGMESH_MESH_TOKEN.",
    )
    METADATA_INVALID = (
        "METADATA_INVALID",
        _C.INVALID_ARGUMENT,
        "Document metadata is not a JSON object, or a key or value breaks the metadata rules.",
    )
    METHOD_NOT_ALLOWED = (
        "METHOD_NOT_ALLOWED",
        _C.UNIMPLEMENTED,
        "The REST route exists but not with this HTTP method.",
    )
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND", _C.NOT_FOUND, "The embedder serves no model of this name."
    MODE_INVALID = "MODE_INVALID", _C.INVALID_ARGUMENT, "A search mode is not a known SearchMode."
    NO_PREVIOUS_VERSION = (
        "NO_PREVIOUS_VERSION",
        _C.FAILED_PRECONDITION,
        "A rollback was asked for a collection that keeps no previous version.",
    )
    NO_RESULTS = (
        "NO_RESULTS",
        _C.NOT_FOUND,
        "No chunk of the collections scored at least RAGMESH_ANSWER_MIN_RELEVANCE for the question.",
    )
    PATH_INVALID = "PATH_INVALID", _C.INVALID_ARGUMENT, "A local path cannot be used (not a valid path)."
    PATH_OUTSIDE_ROOTS = (
        "PATH_OUTSIDE_ROOTS",
        _C.PERMISSION_DENIED,
        "A local path lies outside the folders this server may read (RAGMESH_INDEXER_ROOTS, RAGMESH_MCP_ROOTS).",
    )
    PAYLOAD_TOO_LARGE = (
        "PAYLOAD_TOO_LARGE",
        _C.INVALID_ARGUMENT,
        "A request body, document or unpacked archive is larger than its limit.",
    )
    PERMISSION_DENIED = (
        "PERMISSION_DENIED",
        _C.PERMISSION_DENIED,
        "The REST framework refused the request (HTTP 403) before a route's own check.",
    )
    QUERY_EMPTY = "QUERY_EMPTY", _C.INVALID_ARGUMENT, "The query or question is empty."
    QUERY_INVALID = (
        "QUERY_INVALID",
        _C.INVALID_ARGUMENT,
        "The graph engine could not parse or bind a Cypher query; the message is the engine's.",
    )
    QUERY_NOT_READ_ONLY = (
        "QUERY_NOT_READ_ONLY",
        _C.PERMISSION_DENIED,
        "A raw graph query writes, touches the server's files, changes settings, or is more than one statement.",
    )
    QUERY_TIMEOUT = (
        "QUERY_TIMEOUT",
        _C.DEADLINE_EXCEEDED,
        "A raw graph query ran longer than RAGMESH_GRAPH_QUERY_TIMEOUT_SECONDS.",
    )
    QUERY_TOO_LONG = (
        "QUERY_TOO_LONG",
        _C.INVALID_ARGUMENT,
        "The query or question is longer than its service's max_query_chars.",
    )
    QUEUE_FULL = (
        "QUEUE_FULL",
        _C.RESOURCE_EXHAUSTED,
        "The embedder's queue for the model is full (back-pressure); retry after the time given.",
    )
    RATE_LIMITED = (
        "RATE_LIMITED",
        _C.RESOURCE_EXHAUSTED,
        "The API key (or client address) sent more than RAGMESH_RATE_LIMIT_PER_SECOND allows; retry after the "
        "time given.",
    )
    REINDEX_ABANDONED = (
        "REINDEX_ABANDONED",
        _C.ABORTED,
        "The version a re-index was building was dropped (the job was cancelled or replaced).",
    )
    REINDEX_IN_PROGRESS = (
        "REINDEX_IN_PROGRESS",
        _C.FAILED_PRECONDITION,
        "The collection is being re-indexed; wait for the job or cancel it.",
    )
    REMOTE_UNREACHABLE = (
        "REMOTE_UNREACHABLE",
        _C.UNAVAILABLE,
        "`ragmesh mcp --remote`: the remote gateway did not answer.",
    )
    REQUEST_INVALID = (
        "REQUEST_INVALID",
        _C.INVALID_ARGUMENT,
        "The request does not match its schema (the field violations say where).",
    )
    RERANKER_UNAVAILABLE = (
        "RERANKER_UNAVAILABLE",
        _C.UNAVAILABLE,
        "The rerank endpoint (RAGMESH_SEARCH_RERANK_URL) failed or did not answer.",
    )
    RESOURCE_EXHAUSTED = (
        "RESOURCE_EXHAUSTED",
        _C.RESOURCE_EXHAUSTED,
        "A backend service refused a call for lack of resources without saying more (e.g. a message too large).",
    )
    RETENTION_OUT_OF_RANGE = (
        "RETENTION_OUT_OF_RANGE",
        _C.INVALID_ARGUMENT,
        "A re-index's retention_seconds is negative or longer than a year.",
    )
    ROUTE_NOT_FOUND = "ROUTE_NOT_FOUND", _C.NOT_FOUND, "No REST route has this path."
    RRF_K_OUT_OF_RANGE = "RRF_K_OUT_OF_RANGE", _C.INVALID_ARGUMENT, "rrf_k (or default_rrf_k) is outside its range."
    SCOPE_INSUFFICIENT = (
        "SCOPE_INSUFFICIENT",
        _C.PERMISSION_DENIED,
        "The API key's scope does not allow this (e.g. a read key writing).",
    )
    SERVICES_NOT_READY = (
        "SERVICES_NOT_READY",
        _C.UNAVAILABLE,
        "/ready: some backend services do not report SERVING.",
    )
    SERVICE_UNAVAILABLE = (
        "SERVICE_UNAVAILABLE",
        _C.UNAVAILABLE,
        "A backend service could not be reached (the service names it).",
    )
    SESSION_ID_INVALID = (
        "SESSION_ID_INVALID",
        _C.INVALID_ARGUMENT,
        "A session_id is not 1-128 characters A-Z, a-z, 0-9, '_', '.', ':' or '-'.",
    )
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND", _C.NOT_FOUND, "There is no answer session with this id (or it expired)."
    SESSION_STORE_UNAVAILABLE = (
        "SESSION_STORE_UNAVAILABLE",
        _C.UNAVAILABLE,
        "The answer service's session store (Redis or SQLite) failed.",
    )
    SOURCE_MISSING = "SOURCE_MISSING", _C.INVALID_ARGUMENT, "A Convert request has neither content nor a URL."
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE", _C.UNAVAILABLE, "The vector store (embedded or Qdrant) failed."
    STREAM_HEADER_DUPLICATE = (
        "STREAM_HEADER_DUPLICATE",
        _C.INVALID_ARGUMENT,
        "A ConvertStream message after the first one is a header.",
    )
    STREAM_HEADER_MISSING = (
        "STREAM_HEADER_MISSING",
        _C.INVALID_ARGUMENT,
        "The first message of ConvertStream is not a header.",
    )
    STREAM_SIZE_MISMATCH = (
        "STREAM_SIZE_MISMATCH",
        _C.INVALID_ARGUMENT,
        "A ConvertStream upload ended with another size than its header announced.",
    )
    TEXTS_EMPTY = "TEXTS_EMPTY", _C.INVALID_ARGUMENT, "An Embed request holds no texts."
    TEXT_EMPTY = "TEXT_EMPTY", _C.INVALID_ARGUMENT, "A text of an Embed request is empty or blank."
    TEXT_INVALID = (
        "TEXT_INVALID",
        _C.INVALID_ARGUMENT,
        "The request holds text that is not valid Unicode (e.g. a lone surrogate).",
    )
    TEXT_TOO_LONG = "TEXT_TOO_LONG", _C.INVALID_ARGUMENT, "A text of an Embed request is longer than the limit."
    TOKENIZER_MISMATCH = (
        "TOKENIZER_MISMATCH",
        _C.INVALID_ARGUMENT,
        "token_ids were made by another tokenizer than the model's (or the model takes none).",
    )
    TOKEN_IDS_INVALID = (
        "TOKEN_IDS_INVALID",
        _C.INVALID_ARGUMENT,
        "token_ids do not fit the texts (their count, byte length or values).",
    )
    TOLERANCE_OUT_OF_RANGE = (
        "TOLERANCE_OUT_OF_RANGE",
        _C.INVALID_ARGUMENT,
        "A re-index gate's tolerance is outside 0..1.",
    )
    TOOL_CALL_INVALID = (
        "TOOL_CALL_INVALID",
        _C.INVALID_ARGUMENT,
        "`ragmesh chat`: the model called an unknown tool or left out its arguments (told to the model).",
    )
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND", _C.NOT_FOUND, "MCP: there is no tool of this name."
    TOO_MANY_TEXTS = "TOO_MANY_TEXTS", _C.INVALID_ARGUMENT, "An Embed request holds more texts than the limit."
    TOO_MANY_URLS = "TOO_MANY_URLS", _C.INVALID_ARGUMENT, "An ingest job names more URLs than the limit."
    TOP_K_OUT_OF_RANGE = "TOP_K_OUT_OF_RANGE", _C.INVALID_ARGUMENT, "top_k is outside its range."
    UNAUTHENTICATED = (
        "UNAUTHENTICATED",
        _C.UNAUTHENTICATED,
        "The REST framework refused the request (HTTP 401) before a route's own check.",
    )
    UNSUPPORTED_MEDIA_TYPE = (
        "UNSUPPORTED_MEDIA_TYPE",
        _C.INVALID_ARGUMENT,
        "The document's format is not one the converter reads, or a request body has the wrong content type.",
    )
    URI_SCHEME_UNSUPPORTED = (
        "URI_SCHEME_UNSUPPORTED",
        _C.INVALID_ARGUMENT,
        "MCP: a uri is neither an http(s) URL nor a local path.",
    )
    URL_FETCH_FAILED = (
        "URL_FETCH_FAILED",
        _C.INVALID_ARGUMENT,
        "A well-formed URL could not be fetched (no such host, the server's own error, too many redirects).",
    )
    URL_FETCH_TIMEOUT = (
        "URL_FETCH_TIMEOUT",
        _C.DEADLINE_EXCEEDED,
        "Fetching a URL took longer than RAGMESH_CONVERTER_FETCH_TIMEOUT_SECONDS.",
    )
    URL_INVALID = "URL_INVALID", _C.INVALID_ARGUMENT, "A URL is not a well-formed http(s) URL."
    URL_NOT_ALLOWED = (
        "URL_NOT_ALLOWED",
        _C.PERMISSION_DENIED,
        "A URL's host resolves to a private, loopback or other non-public address (the converter's SSRF guard).",
    )
    VECTOR_KIND_INVALID = (
        "VECTOR_KIND_INVALID",
        _C.INVALID_ARGUMENT,
        "An Embed request asks for an unknown vector kind.",
    )
    VERSION_INVALID = (
        "VERSION_INVALID",
        _C.INVALID_ARGUMENT,
        "A collection version is negative (0 means the active one).",
    )
    VERSION_NOT_FOUND = "VERSION_NOT_FOUND", _C.NOT_FOUND, "The collection keeps no version of this number."
