"""The futures store and the seq_id-ordered scheduler, without models."""

from __future__ import annotations

import asyncio
import time

import pytest

from integrations.tinker._futures import Futures, Scheduler
from integrations.tinker.state import ServerState
from integrations.tinker.types import TinkerRequestError, TinkerServerConfig


def test_a_models_requests_run_in_seq_id_order_whatever_the_arrival_order():
    async def main():
        futures = Futures(ttl_s=60)
        sched = Scheduler(futures, gap_timeout_s=60)
        sched.open_model("m")
        ran = []
        rids = {}
        for seq in (3, 1, 4, 2):  # the first chunk of a call arrives last
            rid = futures.new("fb")
            rids[seq] = rid
            sched.submit("m", seq, rid, lambda s=seq: ran.append(s) or {"seq": s})
        results = [await futures.wait(rids[s], 5) for s in (1, 2, 3, 4)]
        sched.shutdown()
        return ran, [r.result for r in results]

    ran, results = asyncio.run(main())
    assert ran == [1, 2, 3, 4]
    assert results == [{"seq": 1}, {"seq": 2}, {"seq": 3}, {"seq": 4}]


def test_gaps_wait_then_are_skipped_and_errors_reach_the_future():
    async def main():
        futures = Futures(ttl_s=60)
        sched = Scheduler(futures, gap_timeout_s=0.2)
        sched.open_model("m")
        late = futures.new("fb")
        sched.submit("m", 2, late, lambda: {"ok": 2})  # seq 1 never comes
        assert await futures.wait(late, 0.1) is None  # still waiting for seq 1
        await asyncio.sleep(0.25)
        sched.skip_stale_gaps()
        done = await futures.wait(late, 5)
        bad = futures.new("fb")

        def fail():
            raise TinkerRequestError("nope")

        sched.submit("m", 3, bad, fail)
        failed = await futures.wait(bad, 5)
        reused = futures.new("fb")
        sched.submit("m", 3, reused, lambda: {})
        reused_entry = await futures.wait(reused, 5)
        crash = futures.new("fb")
        sched.submit("m", 4, crash, lambda: 1 / 0)
        crashed = await futures.wait(crash, 5)
        sched.shutdown()
        return done, failed, reused_entry, crashed

    done, failed, reused, crashed = asyncio.run(main())
    assert done.result == {"ok": 2}
    assert failed.error.body() == {"error": "nope", "category": "user"}
    assert "seq_id 3 of model m was already used" in reused.error.message
    assert crashed.error.category == "server" and "ZeroDivisionError" in crashed.error.message


def test_unknown_request_ids_and_expiry():
    async def main():
        futures = Futures(ttl_s=0.0)
        rid = futures.new("x")
        futures.finish(rid, {"a": 1})
        assert (await futures.wait(rid, 1)).result == {"a": 1}  # re-polls get the same answer
        assert (await futures.wait(rid, 1)).result == {"a": 1}
        time.sleep(0.01)
        futures.new("y")  # expires finished entries older than the TTL
        with pytest.raises(TinkerRequestError, match="unknown request_id"):
            await futures.wait(rid, 1)

    asyncio.run(main())


def test_delivered_results_are_dropped_sooner():
    async def main():
        futures = Futures(ttl_s=3600, delivered_ttl_s=0.0)
        kept, handed_out = futures.new("x"), futures.new("x")
        futures.finish(kept, {"a": 1})
        futures.finish(handed_out, {"b": 2})
        assert (await futures.wait(handed_out, 1)).result == {"b": 2}
        time.sleep(0.01)
        futures.new("y")
        assert (await futures.wait(kept, 1)).result == {"a": 1}  # never handed out: kept
        with pytest.raises(TinkerRequestError, match="unknown request_id"):
            await futures.wait(handed_out, 1)

    asyncio.run(main())


def test_idle_sessions_are_closed(tmp_path):
    state = ServerState(TinkerServerConfig(checkpoint_dir=str(tmp_path), session_idle_timeout_s=60))
    try:
        old = state.create_session("0.38.0", [])
        state.sessions[old.session_id].last_seen -= 120
        fresh = state.create_session("0.38.0", [])  # creating a session reaps idle ones
        assert state.sessions[old.session_id].finished and not state.sessions[fresh.session_id].finished
        with pytest.raises(TinkerRequestError, match="unknown or finished session"):
            state.session(old.session_id)
    finally:
        state.close()
