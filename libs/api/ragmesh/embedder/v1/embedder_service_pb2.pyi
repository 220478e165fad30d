from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InputType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INPUT_TYPE_UNSPECIFIED: _ClassVar[InputType]
    INPUT_TYPE_QUERY: _ClassVar[InputType]
    INPUT_TYPE_DOCUMENT: _ClassVar[InputType]

class VectorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VECTOR_KIND_UNSPECIFIED: _ClassVar[VectorKind]
    VECTOR_KIND_DENSE: _ClassVar[VectorKind]
    VECTOR_KIND_SPARSE: _ClassVar[VectorKind]
INPUT_TYPE_UNSPECIFIED: InputType
INPUT_TYPE_QUERY: InputType
INPUT_TYPE_DOCUMENT: InputType
VECTOR_KIND_UNSPECIFIED: VectorKind
VECTOR_KIND_DENSE: VectorKind
VECTOR_KIND_SPARSE: VectorKind

class EmbedRequest(_message.Message):
    __slots__ = ("texts", "input_type", "kinds")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: InputType
    kinds: _containers.RepeatedScalarFieldContainer[VectorKind]
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[InputType, str]] = ..., kinds: _Optional[_Iterable[_Union[VectorKind, str]]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "model_id", "dimension")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model_id: str
    dimension: int
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ...) -> None: ...

class EmbedStreamRequest(_message.Message):
    __slots__ = ("request_id", "texts", "input_type", "kinds")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: InputType
    kinds: _containers.RepeatedScalarFieldContainer[VectorKind]
    def __init__(self, request_id: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[InputType, str]] = ..., kinds: _Optional[_Iterable[_Union[VectorKind, str]]] = ...) -> None: ...

class EmbedStreamResponse(_message.Message):
    __slots__ = ("request_id", "embeddings", "model_id", "dimension")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model_id: str
    dimension: int
    def __init__(self, request_id: _Optional[str] = ..., embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("dense", "sparse", "token_count", "truncated")
    DENSE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    dense: _containers.RepeatedScalarFieldContainer[float]
    sparse: SparseVector
    token_count: int
    truncated: bool
    def __init__(self, dense: _Optional[_Iterable[float]] = ..., sparse: _Optional[_Union[SparseVector, _Mapping]] = ..., token_count: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class SparseVector(_message.Message):
    __slots__ = ("indices", "values")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    indices: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, indices: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("model_id", "dimension", "max_sequence_length", "sparse_model_id", "backend", "max_batch_size")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SPARSE_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    max_sequence_length: int
    sparse_model_id: str
    backend: str
    max_batch_size: int
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., max_sequence_length: _Optional[int] = ..., sparse_model_id: _Optional[str] = ..., backend: _Optional[str] = ..., max_batch_size: _Optional[int] = ...) -> None: ...
