"""A small zoo of documents the answer, gateway, web-page and `ragmesh chat` tests ask about, ingested through
the real indexer (gRPC) or the gateway (REST)."""

from __future__ import annotations

DOCS = {
    "panda": (
        "Giant pandas",
        "# Giant pandas\n\nThe giant panda eats bamboo almost exclusively, up to twelve "
        "kilograms of bamboo a day. Giant pandas live in the mountain forests of Sichuan in China.\n\n"
        "## Cubs\n\nA newborn panda cub weighs about one hundred grams at birth.",
    ),
    "rocket": (
        "Rockets",
        "Liquid-fuel rockets burn kerosene and liquid oxygen in a combustion chamber. The hot "
        "exhaust leaves the nozzle and pushes the rocket upwards.",
    ),
    "bread": (
        "Bread",
        "Bread dough needs flour, water, yeast and salt. Knead the dough, let it rise, then bake "
        "the loaf in a hot oven.",
    ),
}
# The fake chat model quotes the first sentence of the source that best matches the question.
PANDA_ANSWER = "The giant panda eats bamboo almost exclusively, up to twelve kilograms of bamboo a day."
# Shares no word with any document: nothing is relevant.
NOTHING_RELEVANT = "xylophone zeppelin quartz"


async def ingest(mesh, collection: str = "zoo", docs: dict = DOCS) -> None:
    """Ingest the documents through the mesh's indexer (gRPC)."""
    from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb

    indexer = mesh.stub("indexer")
    documents = [
        indexer_pb.DocumentInput(collection=collection, doc_id=doc_id, title=title, text=text)
        for doc_id, (title, text) in docs.items()
    ]
    events = [e async for e in indexer.IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))]
    assert all(e.result.status != indexer_pb.INGEST_STATUS_FAILED for e in events), events
