"""Every field of the messages the CLI writes as JSON (`ragmesh_cli.conversions`) reaches its JSON, or is listed
with the reason it is left out. A field added to a proto is set by `filled` and fails here until it is written or
listed."""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.message import Message
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_cli import conversions

from tests.support.messages import filled, unread

_JOB_ONLY = "a re-index's JSON is the job's state and its re-index fields; `ragmesh jobs show` prints the rest"
# conversion -> (the message it reads, the fields it leaves out and why)
READS: dict[str, tuple[type[Message], Callable[[Any], Any], dict[str, str]]] = {
    "evaluation_json": (
        search_pb.Evaluation,
        conversions.evaluation_json,
        {
            "Evaluation.collection": "the command names the collection",
            "Evaluation.version": "`ragmesh eval --collection` scores the active version; reindex_json adds it",
            "Evaluation.fusion": "not in the CLI's JSON so far (the REST API writes it)",
        },
    ),
    "settings_json": (search_pb.IndexSettings, conversions.settings_json, {}),
    "reindex_json": (
        indexer_pb.Job,
        conversions.reindex_json,
        {
            **{
                f"Job.{name}": _JOB_ONLY
                for name in (
                    "kind",
                    "source",
                    "unchanged",
                    "skipped",
                    "deleted",
                    "bytes",
                    "errors",
                    "skipped_files",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "documents_per_second",
                    "bytes_per_second",
                    "datasource_id",
                    "prune",
                )
            },
            "Evaluation.collection": "the job names the collection",
            "Evaluation.fusion": "not in the CLI's JSON so far (the REST API writes it)",
        },
    ),
    "rollback_json": (indexer_pb.RollbackCollectionResponse, conversions.rollback_json, {}),
}


@pytest.mark.parametrize("name", READS)
def test_every_field_reaches_the_json_or_is_listed(name: str) -> None:
    cls, convert, left_out = READS[name]
    message = filled(cls, {"ReindexInfo.decision": "forced"})
    json.dumps(convert(message))  # JSON, as written on stdout
    assert unread(message, convert) == left_out.keys()


def test_every_conversion_is_checked_here() -> None:
    functions = {
        name
        for name, f in vars(conversions).items()
        if inspect.isfunction(f)
        and any(inspect.isclass(t) and issubclass(t, Message) for t in typing.get_type_hints(f).values())
    }
    assert functions == READS.keys()
