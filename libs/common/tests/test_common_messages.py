from dataclasses import dataclass

import pytest
from pydantic import BaseModel
from ragmesh.answer.v1 import answer_service_pb2 as pb
from ragmesh_common.messages import message_from, model_from


@dataclass
class _Source:
    number: int = 2
    doc_id: str = "d"
    collection: str = "c"
    title: str = "t"
    url: str = "u"
    filename: str = "f"
    cited: bool = True
    relevance_score: float = 0.5


def test_each_field_comes_from_the_attribute_of_its_name_unless_given_or_skipped():
    message = message_from(pb.Source, _Source(), snippet="s")
    assert message == pb.Source(
        number=2, doc_id="d", collection="c", title="t", url="u", filename="f", cited=True, snippet="s",
        relevance_score=0.5,
    )  # fmt: skip
    assert message_from(pb.Source, _Source(), skip=("snippet", "relevance_score"), title="other") == pb.Source(
        number=2, doc_id="d", collection="c", title="other", url="u", filename="f", cited=True
    )


def test_a_field_the_source_lacks_is_an_error_not_a_default():
    with pytest.raises(AttributeError, match="snippet"):
        message_from(pb.Source, _Source())


class _Cited(BaseModel):
    number: int
    title: str
    uri: str


def test_a_model_is_built_the_same_way():
    assert model_from(_Cited, _Source(), uri="ragmesh://c/d") == _Cited(number=2, title="t", uri="ragmesh://c/d")
    with pytest.raises(AttributeError, match="uri"):
        model_from(_Cited, _Source())


def test_struct_carries_plain_values_and_none_is_empty():
    from google.protobuf.json_format import MessageToDict
    from ragmesh_common.messages import struct

    assert MessageToDict(struct({"kind": "space", "year": 2020, "tags": ["a", "b"]})) == {
        "kind": "space",
        "year": 2020.0,
        "tags": ["a", "b"],
    }
    assert MessageToDict(struct(None)) == {} and MessageToDict(struct({})) == {}
