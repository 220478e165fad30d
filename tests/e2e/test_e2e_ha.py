"""Faults in the replicated topology (deploy/local/topology.py): real `ragmesh serve` processes, two embedders,
two answer services on Redis sessions, two gateways behind Debian's HAProxy. Clients run throughout each fault
and every response is counted (deploy/local/faults.py, which bench/bench_ha.py records). One topology for the
module, with the hash embedder (the faults are under test, not the model); each fault leaves every replica
running again."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import redis

from deploy.local import faults
from deploy.local.haproxy import haproxy_binary
from deploy.local.topology import REDIS_URL, Topology
from tests.e2e.test_e2e_mcp_balanced import v2_session
from tests.support.mcp_v1 import V1Client

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def topology(tmp_path_factory):
    if haproxy_binary() is None:
        pytest.skip("haproxy is not installed (scripts/system-deps.sh installs it)")
    try:
        redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    topology = Topology(tmp_path_factory.mktemp("ha"), backend="hash", extra_env=faults.ANSWER_ENV)
    try:
        topology.start()
        faults.seed(topology)
        yield topology
    finally:
        codes = topology.stop()
        with contextlib.suppress(redis.RedisError):
            topology.forget_redis()
    # Every process exits cleanly on SIGTERM (the ones a test killed were started again).
    assert all(code == 0 for code in codes.values()), {
        name: (code, topology.replicas[name].log()[-1500:]) for name, code in codes.items() if code
    }


async def test_sigkill_of_one_embedder_fails_no_hybrid_search(topology):
    result = await faults.kill_embedder(topology)
    assert result["searches"]["failed"] == 0, result["failures"][:5]
    assert result["searches"]["ok"] >= 300


async def test_sigkill_of_one_gateway_fails_only_requests_in_flight(topology):
    # MCP clients of both SDK generations (ha-mcp's: tests/support/mcp_v1.py, the 2.x session of
    # test_e2e_mcp_balanced) make 5 tool calls through HAProxy, wait while a gateway is killed, then 5 more in
    # the same session, without re-initialising.
    v1 = await V1Client(topology.url, "mcp-v1", calls=10, pause_after=5).start()
    pause, paused = asyncio.Event(), asyncio.Event()
    v2 = asyncio.create_task(v2_session(topology.url, "mcp-v2", calls=10, pause=pause, paused=paused))
    await v1.paused()
    await paused.wait()

    async def mcp_clients_go_on() -> tuple[dict, dict]:
        await v1.resume()
        pause.set()
        return await v1.report(), await v2

    result = await faults.kill_gateway(topology, while_down=mcp_clients_go_on)
    for report in result["while_down"]:
        assert report["errors"] == [] and report["calls_ok"] == 10, report["errors"]
    # At most one request per client was in flight on the gateway that died; HAProxy retries the others.
    assert result["searches"]["failed"] <= faults.CLIENTS, result["failures"]
    # The MCP bridge's REST client retries what failed in transport: none of its searches fails.
    assert result["bridge_searches"]["ok"] > 0 and result["bridge_searches"]["failed"] == 0, result["bridge_failures"]


async def test_answer_replica_killed_mid_conversation_next_turn_sees_history(topology):
    result = await faults.kill_answer_mid_conversation(topology)
    assert result["statuses"] == [200, 200, 200], result
    # The surviving replica read the history from Redis: the follow-up was searched with every earlier turn.
    assert result["last_standalone_query"] == " ".join(result["queries"])
    assert result["session_queries"] == result["queries"]


async def test_rolling_restart_of_every_replicated_tier_during_search_and_a_folder_job(topology):
    result = await faults.rolling_restart(topology, files=120)
    assert result["searches"]["failed"] == 0, result["failures"][:5]
    assert result["job"] == {"state": "done", "total": 120, "indexed": 120, "failed": 0, "skipped": 0}, result
    # Every document stored once: one document and one chunk a page, none twice from a batch taken again.
    assert (result["documents"], result["chunks"]) == (120, 120)
