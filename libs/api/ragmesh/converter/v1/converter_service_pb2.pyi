from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConvertRequest(_message.Message):
    __slots__ = ("content", "url", "filename", "mime_type")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    url: str
    filename: str
    mime_type: str
    def __init__(self, content: _Optional[bytes] = ..., url: _Optional[str] = ..., filename: _Optional[str] = ..., mime_type: _Optional[str] = ...) -> None: ...

class ConvertResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: ConvertedDocument
    def __init__(self, document: _Optional[_Union[ConvertedDocument, _Mapping]] = ...) -> None: ...

class ConvertStreamRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: ConvertStreamHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[ConvertStreamHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class ConvertStreamHeader(_message.Message):
    __slots__ = ("filename", "mime_type", "size_bytes")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    filename: str
    mime_type: str
    size_bytes: int
    def __init__(self, filename: _Optional[str] = ..., mime_type: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ConvertStreamResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: ConvertedDocument
    def __init__(self, document: _Optional[_Union[ConvertedDocument, _Mapping]] = ...) -> None: ...

class ConvertedDocument(_message.Message):
    __slots__ = ("markdown", "title", "mime_type", "size_bytes", "url", "filename")
    MARKDOWN_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    markdown: str
    title: str
    mime_type: str
    size_bytes: int
    url: str
    filename: str
    def __init__(self, markdown: _Optional[str] = ..., title: _Optional[str] = ..., mime_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., url: _Optional[str] = ..., filename: _Optional[str] = ...) -> None: ...
