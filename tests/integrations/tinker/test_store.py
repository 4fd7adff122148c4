"""The Tinker server's database (``integrations.tinker._store``) on a real SQLite file."""

from __future__ import annotations

import sqlite3
import time

import pytest

from integrations.tinker._store import Store, StoredSession
from integrations.tinker.state import ServerState
from integrations.tinker.types import TinkerServerConfig
from skyrl_gym.errors import ConfigError


def test_rows_round_trip_through_a_reopened_file(tmp_path):
    store = Store(str(tmp_path), keep_results_s=60)
    store.add_session(StoredSession("s1", "0.38.0", ["a"]))
    store.add_model("s1:train:0", "s1", "tiny-random", {"rank": 4}, {"renderer_name": "role_colon"})
    store.update_model("s1:train:0", next_seq=7, steps=3, durable=True, grad_pending=True)
    for seq in range(1, 6):
        store.add_seq_request("s1:train:0", seq, f"r{seq}", keep=2)
    store.add_sampler("s1:sample:x", "s1", "base:tiny-random")
    store.add_result("fb-1", "forward_backward", b"\x01\x02", None)
    store.add_result("opt-1", "optim_step", {"type": "optim_step"}, None)
    store.add_result("bad-1", "sample", None, {"message": "no", "category": "user", "status": 400})
    store.close()

    again = Store(str(tmp_path), keep_results_s=60)
    assert again.sessions()[0].session_id == "s1" and again.sessions()[0].tags == ["a"]
    (model,) = again.models()
    assert (model.next_seq, model.steps, model.durable, model.grad_pending) == (7, 3, True, True)
    assert model.lora == {"rank": 4} and model.user_metadata == {"renderer_name": "role_colon"}
    assert again.seq_requests("s1:train:0") == {4: "r4", 5: "r5"}  # the latest `keep`
    assert again.samplers() == [("s1:sample:x", "s1", "base:tiny-random")]
    assert again.result("fb-1") == ("forward_backward", b"\x01\x02", None)
    assert again.result("opt-1") == ("optim_step", {"type": "optim_step"}, None)
    assert again.result("bad-1")[2]["message"] == "no" and again.result("nope") is None
    with pytest.raises(ValueError, match="update_model takes"):
        again.update_model("s1:train:0", session_id="s2")
    assert again.drop_session("s1") == ["s1:train:0"]
    assert again.models() == [] and again.samplers() == [] and again.seq_requests("s1:train:0") == {}


def test_results_expire_and_huge_ones_are_not_kept(tmp_path):
    store = Store(str(tmp_path), keep_results_s=0.2, max_result_bytes=10)
    store.add_result("big", "sample", b"x" * 11, None)
    store.add_result("small", "sample", b"x" * 10, None)
    assert store.result("big") is None and store.result("small") is not None
    time.sleep(0.3)
    assert store.result("small") is None


def test_a_database_of_another_schema_is_refused(tmp_path):
    Store(str(tmp_path), keep_results_s=1).close()
    with sqlite3.connect(tmp_path / "server.sqlite3") as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(ConfigError, match="schema 99.*move it away"):
        Store(str(tmp_path), keep_results_s=1)


def test_a_restart_restores_recent_sessions_and_drops_idle_ones(tmp_path):
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path), session_idle_timeout_s=600)
    first = ServerState(config)
    recent = first.create_session("0.38.0", [])
    idle = first.create_session("0.38.0", [])
    first.close()
    with sqlite3.connect(tmp_path / "server.sqlite3") as db:
        db.execute(
            "UPDATE sessions SET last_seen = ? WHERE session_id = ?", (time.time() - 3600, idle.session_id)
        )
    second = ServerState(config)
    try:
        assert second.session(recent.session_id).session_id == recent.session_id
        assert idle.session_id not in second.sessions
        assert [s.session_id for s in second.store.sessions()] == [recent.session_id]
    finally:
        second.close()
    off = ServerState(TinkerServerConfig(checkpoint_dir=str(tmp_path / "off"), durable=False))
    try:
        assert off.store is None and not (tmp_path / "off" / "server.sqlite3").exists()
    finally:
        off.close()
