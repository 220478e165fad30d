"""Changing the chunking or the model without downtime, on the real mesh (`ragmesh up`, the real model, with the
hash embedder served beside it as a deliberately worse model), through REST:

- a collection of msmarco passages with a golden set (its judged queries) is re-indexed from one chunking to
  another while 8 clients search continuously: zero errors, every response from exactly one version, each
  client sees the switch once (1s, then 2s), the job reports both scores;
- a re-index to the hash model is rejected by the gate with both scores, and search is unchanged;
- `rollback` restores the previous version;
- `kill -9` in the middle of a re-index, then a restart: the job resumes and finishes, every document stored
  once in the new version.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from .mesh_process import Mesh, Proc, wait_ready

DATASET = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "msmarco-5k"
COLLECTION = "passages"
EXTRA_MODELS = json.dumps([{"name": "hash", "backend": "hash"}])
# Small batches on one worker, so that a kill lands in the middle of a re-index.
ENV = {
    "RAGMESH_EMBEDDER_EXTRA_MODELS": EXTRA_MODELS,
    "RAGMESH_INDEXER_JOB_BATCH_SIZE": "8",
    "RAGMESH_INDEXER_JOB_WORKERS": "1",
}


def _lines(path: Path) -> list[str]:
    """A JSON-lines file's lines (split on newlines only: passages hold other Unicode line separators)."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _dataset(queries: int = 24, passages: int = 240, judged_per_query: int = 5) -> tuple[list[dict], list[dict]]:
    """Golden queries, each with its best-graded judged passages (msmarco-5k judges ~100 per query: all of them
    would make the collection thousands of passages), and the passages: those judged ones plus passages judged for
    none of the chosen queries, `passages` in all."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (DATASET / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(grade)
    texts = {q["_id"]: q["text"] for q in map(json.loads, _lines(DATASET / "queries.jsonl"))}
    chosen = [qid for qid in qrels if qid in texts][:queries]
    kept = {
        qid: dict(sorted(qrels[qid].items(), key=lambda item: (-item[1], item[0]))[:judged_per_query]) for qid in chosen
    }
    golden = [{"query_id": qid, "text": texts[qid], "relevant": kept[qid]} for qid in chosen]
    judged = {doc for grades in kept.values() for doc in grades}
    corpus = [json.loads(line) for line in _lines(DATASET / "corpus.jsonl")]
    picked = [d for d in corpus if d["_id"] in judged]
    picked += [d for d in corpus if not any(d["_id"] in qrels[qid] for qid in chosen)][: passages - len(picked)]
    assert len(picked) == passages, len(picked)
    return golden, [{"doc_id": d["_id"], "text": d["text"]} for d in picked]


def _up(mesh: Mesh, tmp_path: Path, name: str) -> Proc:
    proc = Proc(["up"], mesh.env(), tmp_path / f"{name}.log").start()
    wait_ready(mesh.url, [proc], timeout=240)
    return proc


async def _job(http: httpx.AsyncClient, job_id: str, timeout: float = 300) -> dict:
    async with asyncio.timeout(timeout):
        while True:
            job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
            if job["state"] in ("done", "failed", "cancelled", "rejected"):
                return job
            await asyncio.sleep(0.2)


async def _search(http: httpx.AsyncClient, query: str) -> httpx.Response:
    return await http.post("/api/v1/search", json={"query": query, "collection": COLLECTION, "top_k": 5})


@pytest.fixture(scope="module")
def data():
    return _dataset()


async def test_reindex_under_search_load_gate_rollback_and_resume(tmp_path, data):
    golden, passages = data
    mesh = Mesh(tmp_path / "data", extra_env=ENV)
    proc = _up(mesh, tmp_path, "first")
    try:
        async with httpx.AsyncClient(base_url=mesh.url, timeout=120) as http:
            for i in range(0, len(passages), 100):
                r = await http.post(
                    "/api/v1/ingest/batch", json={"collection": COLLECTION, "documents": passages[i : i + 100]}
                )
                assert r.status_code == 200, r.text
            r = await http.put(f"/api/v1/collections/{COLLECTION}/golden", json={"queries": golden})
            assert r.status_code == 200, r.text

            # --- 1. a new chunking while 8 clients search ------------------------------------------------
            seen: list[list[int]] = [[] for _ in range(8)]
            errors: list[str] = []
            done = asyncio.Event()

            async def client(n: int) -> None:
                k = 0
                while not done.is_set():
                    response = await _search(http, golden[(n + k) % len(golden)]["text"])
                    k += 1
                    if response.status_code != 200:
                        errors.append(response.text)
                        continue
                    versions = response.json()["versions"]
                    assert set(versions) == {COLLECTION}, versions  # exactly one version answered
                    seen[n].append(versions[COLLECTION])

            clients = [asyncio.create_task(client(n)) for n in range(8)]
            await asyncio.sleep(1)
            r = await http.post(f"/api/v1/collections/{COLLECTION}/reindex", json={"chunk_tokens": 64})
            assert r.status_code == 202, r.text
            job = await _job(http, r.json()["job_id"])
            await asyncio.sleep(1)
            done.set()
            await asyncio.gather(*clients)
            assert job["state"] == "done" and job["reindex"]["decision"] == "switched", job
            assert job["indexed"] == len(passages) and job["failed"] == 0
            current, candidate = job["reindex"]["current"], job["reindex"]["candidate"]
            assert (current["version"], candidate["version"]) == (1, 2)
            assert candidate["ndcg_at_10"] >= current["ndcg_at_10"] - job["reindex"]["tolerance"]
            assert not errors, errors[:3]
            for versions in seen:
                assert versions and versions[0] == 1 and versions[-1] == 2, versions[:3] + versions[-3:]
                switches = sum(a != b for a, b in zip(versions, versions[1:], strict=False))
                assert switches == 1, versions  # 1s, then 2s: never back
            listed = {c["name"]: c for c in (await http.get("/api/v1/collections")).json()["collections"]}
            assert listed[COLLECTION]["version"] == 2
            assert {v["version"]: v["state"] for v in listed[COLLECTION]["versions"]} == {1: "previous", 2: "active"}

            # --- 2. a worse model is refused by the gate ---------------------------------------------------
            query = golden[0]["text"]
            before = (await _search(http, query)).json()
            r = await http.post(f"/api/v1/collections/{COLLECTION}/reindex", json={"model": "hash"})
            assert r.status_code == 202, r.text
            rejected = await _job(http, r.json()["job_id"])
            assert rejected["state"] == "rejected", rejected
            gate = rejected["reindex"]
            assert gate["decision"] == "rejected"
            assert gate["candidate"]["ndcg_at_10"] < gate["current"]["ndcg_at_10"] - gate["tolerance"]
            after = (await _search(http, query)).json()
            assert after["versions"] == {COLLECTION: 2}
            assert [h["chunk_id"] for h in after["results"]] == [h["chunk_id"] for h in before["results"]]

            # --- 3. rollback ------------------------------------------------------------------------------
            r = await http.post(f"/api/v1/collections/{COLLECTION}/rollback")
            assert r.status_code == 200 and r.json()["version"] == 1, r.text
            assert (await _search(http, query)).json()["versions"] == {COLLECTION: 1}

            # --- 4. kill -9 mid re-index, restart: it resumes ----------------------------------------------
            r = await http.post(f"/api/v1/collections/{COLLECTION}/reindex", json={"chunk_tokens": 48, "force": True})
            job_id = r.json()["job_id"]
            async with asyncio.timeout(120):
                while (progress := (await http.get(f"/api/v1/jobs/{job_id}")).json())["indexed"] == 0:
                    await asyncio.sleep(0.05)
            assert progress["indexed"] < len(passages), progress  # killed in the middle
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(30)
        proc.stop()
        proc = _up(mesh, tmp_path, "second")
        async with httpx.AsyncClient(base_url=mesh.url, timeout=120) as http:
            resumed = await _job(http, job_id)
            assert resumed["state"] == "done", resumed
            assert resumed["indexed"] + resumed["unchanged"] == len(passages) and resumed["failed"] == 0
            listed = {c["name"]: c for c in (await http.get("/api/v1/collections")).json()["collections"]}
            info = listed[COLLECTION]
            assert info["version"] == resumed["reindex"]["to_version"] and info["documents"] == len(passages)
            assert (await _search(http, query)).json()["versions"] == {COLLECTION: info["version"]}
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-3000:]
