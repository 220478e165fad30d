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

class DenseFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DENSE_FORMAT_UNSPECIFIED: _ClassVar[DenseFormat]
    DENSE_FORMAT_FLOATS: _ClassVar[DenseFormat]
    DENSE_FORMAT_PACKED_FLOAT32: _ClassVar[DenseFormat]

class VectorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VECTOR_KIND_UNSPECIFIED: _ClassVar[VectorKind]
    VECTOR_KIND_DENSE: _ClassVar[VectorKind]
    VECTOR_KIND_SPARSE: _ClassVar[VectorKind]
INPUT_TYPE_UNSPECIFIED: InputType
INPUT_TYPE_QUERY: InputType
INPUT_TYPE_DOCUMENT: InputType
DENSE_FORMAT_UNSPECIFIED: DenseFormat
DENSE_FORMAT_FLOATS: DenseFormat
DENSE_FORMAT_PACKED_FLOAT32: DenseFormat
VECTOR_KIND_UNSPECIFIED: VectorKind
VECTOR_KIND_DENSE: VectorKind
VECTOR_KIND_SPARSE: VectorKind

class EmbedRequest(_message.Message):
    __slots__ = ("texts", "input_type", "kinds", "dense_format", "model", "token_ids")
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    DENSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: InputType
    kinds: _containers.RepeatedScalarFieldContainer[VectorKind]
    dense_format: DenseFormat
    model: str
    token_ids: TokenIds
    def __init__(self, texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[InputType, str]] = ..., kinds: _Optional[_Iterable[_Union[VectorKind, str]]] = ..., dense_format: _Optional[_Union[DenseFormat, str]] = ..., model: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("tokenizer", "ids", "lengths")
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    LENGTHS_FIELD_NUMBER: _ClassVar[int]
    tokenizer: str
    ids: bytes
    lengths: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tokenizer: _Optional[str] = ..., ids: _Optional[bytes] = ..., lengths: _Optional[_Iterable[int]] = ...) -> None: ...

class EmbedResponse(_message.Message):
    __slots__ = ("embeddings", "model_id", "dimension", "dense_matrix", "model")
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    DENSE_MATRIX_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model_id: str
    dimension: int
    dense_matrix: DenseMatrix
    model: str
    def __init__(self, embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., dense_matrix: _Optional[_Union[DenseMatrix, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class EmbedStreamRequest(_message.Message):
    __slots__ = ("request_id", "texts", "input_type", "kinds", "dense_format", "model", "token_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    DENSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    input_type: InputType
    kinds: _containers.RepeatedScalarFieldContainer[VectorKind]
    dense_format: DenseFormat
    model: str
    token_ids: TokenIds
    def __init__(self, request_id: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., input_type: _Optional[_Union[InputType, str]] = ..., kinds: _Optional[_Iterable[_Union[VectorKind, str]]] = ..., dense_format: _Optional[_Union[DenseFormat, str]] = ..., model: _Optional[str] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ...) -> None: ...

class EmbedStreamResponse(_message.Message):
    __slots__ = ("request_id", "embeddings", "model_id", "dimension", "dense_matrix", "model")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    DENSE_MATRIX_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    embeddings: _containers.RepeatedCompositeFieldContainer[Embedding]
    model_id: str
    dimension: int
    dense_matrix: DenseMatrix
    model: str
    def __init__(self, request_id: _Optional[str] = ..., embeddings: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., dense_matrix: _Optional[_Union[DenseMatrix, _Mapping]] = ..., model: _Optional[str] = ...) -> None: ...

class DenseMatrix(_message.Message):
    __slots__ = ("data", "rows", "columns")
    DATA_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    rows: int
    columns: int
    def __init__(self, data: _Optional[bytes] = ..., rows: _Optional[int] = ..., columns: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("model_id", "dimension", "max_sequence_length", "sparse_model_id", "backend", "max_batch_size", "runtime", "device", "precision", "model", "models", "tokenizer")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SPARSE_MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    dimension: int
    max_sequence_length: int
    sparse_model_id: str
    backend: str
    max_batch_size: int
    runtime: str
    device: str
    precision: str
    model: str
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    tokenizer: str
    def __init__(self, model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., max_sequence_length: _Optional[int] = ..., sparse_model_id: _Optional[str] = ..., backend: _Optional[str] = ..., max_batch_size: _Optional[int] = ..., runtime: _Optional[str] = ..., device: _Optional[str] = ..., precision: _Optional[str] = ..., model: _Optional[str] = ..., models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., tokenizer: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "is_default", "model_id", "dimension", "max_sequence_length", "backend", "runtime", "device", "precision", "tokenizer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    name: str
    is_default: bool
    model_id: str
    dimension: int
    max_sequence_length: int
    backend: str
    runtime: str
    device: str
    precision: str
    tokenizer: str
    def __init__(self, name: _Optional[str] = ..., is_default: _Optional[bool] = ..., model_id: _Optional[str] = ..., dimension: _Optional[int] = ..., max_sequence_length: _Optional[int] = ..., backend: _Optional[str] = ..., runtime: _Optional[str] = ..., device: _Optional[str] = ..., precision: _Optional[str] = ..., tokenizer: _Optional[str] = ...) -> None: ...
