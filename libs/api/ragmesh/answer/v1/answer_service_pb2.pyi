from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Generator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GENERATOR_UNSPECIFIED: _ClassVar[Generator]
    GENERATOR_MODEL: _ClassVar[Generator]
    GENERATOR_EXTRACTIVE: _ClassVar[Generator]
GENERATOR_UNSPECIFIED: Generator
GENERATOR_MODEL: Generator
GENERATOR_EXTRACTIVE: Generator

class AskRequest(_message.Message):
    __slots__ = ("query", "collections", "top_k", "filters", "session_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    collections: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    filters: _struct_pb2.Struct
    session_id: str
    def __init__(self, query: _Optional[str] = ..., collections: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class AskResponse(_message.Message):
    __slots__ = ("answer",)
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    answer: Answer
    def __init__(self, answer: _Optional[_Union[Answer, _Mapping]] = ...) -> None: ...

class AskStreamRequest(_message.Message):
    __slots__ = ("query", "collections", "top_k", "filters", "session_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    collections: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    filters: _struct_pb2.Struct
    session_id: str
    def __init__(self, query: _Optional[str] = ..., collections: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., filters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class AskStreamResponse(_message.Message):
    __slots__ = ("delta", "answer")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    delta: str
    answer: Answer
    def __init__(self, delta: _Optional[str] = ..., answer: _Optional[_Union[Answer, _Mapping]] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("text", "sources", "matched_chunks", "session_id", "generator", "model", "standalone_query", "input_tokens", "output_tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    MATCHED_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STANDALONE_QUERY_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    matched_chunks: _containers.RepeatedCompositeFieldContainer[MatchedChunk]
    session_id: str
    generator: Generator
    model: str
    standalone_query: str
    input_tokens: int
    output_tokens: int
    def __init__(self, text: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., matched_chunks: _Optional[_Iterable[_Union[MatchedChunk, _Mapping]]] = ..., session_id: _Optional[str] = ..., generator: _Optional[_Union[Generator, str]] = ..., model: _Optional[str] = ..., standalone_query: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("number", "doc_id", "collection", "title", "url", "filename", "cited", "snippet", "relevance_score")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    CITED_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    number: int
    doc_id: str
    collection: str
    title: str
    url: str
    filename: str
    cited: bool
    snippet: str
    relevance_score: float
    def __init__(self, number: _Optional[int] = ..., doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., title: _Optional[str] = ..., url: _Optional[str] = ..., filename: _Optional[str] = ..., cited: _Optional[bool] = ..., snippet: _Optional[str] = ..., relevance_score: _Optional[float] = ...) -> None: ...

class MatchedChunk(_message.Message):
    __slots__ = ("chunk_id", "doc_id", "collection", "chunk_index", "text", "relevance_score", "source_number")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    doc_id: str
    collection: str
    chunk_index: int
    text: str
    relevance_score: float
    source_number: int
    def __init__(self, chunk_id: _Optional[str] = ..., doc_id: _Optional[str] = ..., collection: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., relevance_score: _Optional[float] = ..., source_number: _Optional[int] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session_id", "turns")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    def __init__(self, session_id: _Optional[str] = ..., turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ...) -> None: ...

class Turn(_message.Message):
    __slots__ = ("query", "standalone_query", "answer", "sources", "generator", "created_at")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STANDALONE_QUERY_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    query: str
    standalone_query: str
    answer: str
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    generator: Generator
    created_at: str
    def __init__(self, query: _Optional[str] = ..., standalone_query: _Optional[str] = ..., answer: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., generator: _Optional[_Union[Generator, str]] = ..., created_at: _Optional[str] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted_turns",)
    DELETED_TURNS_FIELD_NUMBER: _ClassVar[int]
    deleted_turns: int
    def __init__(self, deleted_turns: _Optional[int] = ...) -> None: ...
