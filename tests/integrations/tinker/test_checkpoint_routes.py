"""Checkpoint management through the official client's RestClient: weights_info, a TTL (set,
listed, refused out of range, removed, and applied when it passes), delete, the audit log of
those events, and the sessions listing. Tiny model, 127.0.0.1."""

from __future__ import annotations

import datetime
import json

import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402
from integrations.tinker._checkpoints import local_dir  # noqa: E402
from integrations.tinker.types import TinkerPath  # noqa: E402


def test_weights_info_ttl_and_delete_through_the_client(tmp_path):
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path))) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-checkpoints")
        training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=0).result()
        state_path = training.save_state("keep").result().path
        sampler_path = training.save_weights_for_sampler("gone").result().path
        rest = client.create_rest_client()

        info = rest.get_weights_info_by_tinker_path(state_path).result()
        assert (info.base_model, info.is_lora, info.lora_rank) == (TINY_RANDOM_MODEL, True, 4)
        assert (info.train_attn, info.train_mlp, info.train_unembed) == (True, True, True)

        rest.set_checkpoint_ttl_from_tinker_path(state_path, 86_400).result()
        listed = {c.tinker_path: c for c in rest.list_checkpoints(training.model_id).result().checkpoints}
        in_a_day = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
        assert abs((listed[state_path].expires_at - in_a_day).total_seconds()) < 60
        assert listed[sampler_path].expires_at is None
        for bad in (60, 11 * 365 * 86_400):
            with pytest.raises(tinker.BadRequestError, match="ttl_seconds must be a whole number from 3600"):
                rest.set_checkpoint_ttl_from_tinker_path(state_path, bad).result()
        rest.set_checkpoint_ttl_from_tinker_path(state_path, None).result()
        assert rest.list_checkpoints(training.model_id).result().checkpoints[0].expires_at is None

        rest.delete_checkpoint_from_tinker_path(sampler_path).result()
        assert [c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints] == [
            state_path
        ]
        with pytest.raises(tinker.NotFoundError):
            rest.delete_checkpoint_from_tinker_path(sampler_path).result()
        with pytest.raises(tinker.NotFoundError):
            rest.get_weights_info_by_tinker_path(sampler_path).result()
        with pytest.raises(tinker.NotFoundError):
            rest.delete_checkpoint(training.model_id + "-no-such-run", "weights/keep").result()

        # a TTL that has passed: the checkpoint is gone at the next look, listing and loading alike
        where = local_dir(tmp_path, TinkerPath.parse(state_path))
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
        (where / "ttl.json").write_text(json.dumps({"expires_at": past.isoformat()}))
        assert rest.list_checkpoints(training.model_id).result().checkpoints == []
        assert not where.exists()
        with pytest.raises(tinker.RequestFailedError, match="no checkpoint at"):
            client.create_training_client_from_state(state_path).result()
        # the audit log holds those events, in order, with what read each checkpoint
        admin = tinker.AdminClient(base_url=server.url, api_key="tml-checkpoints")
        events = [(e.event, e.tinker_path, e.purpose) for e in admin.get_audit_log().result().entries]
        assert events[:6] == [
            ("checkpoint_create", state_path, None),
            ("checkpoint_create", sampler_path, None),
            ("checkpoint_read", state_path, "weights_info"),
            ("checkpoint_ttl_set", state_path, None),
            ("checkpoint_ttl_set", state_path, None),
            ("checkpoint_delete", sampler_path, None),
        ]
        assert admin.get_audit_log("projects").result().entries == []
        assert admin.get_audit_log(day=datetime.date(2001, 1, 1)).result().entries == []

        # sessions: this client's, with its training run
        sessions = rest.list_sessions().result().sessions
        assert len(sessions) == 1
        session = rest.get_session(sessions[0]).result()
        assert session.training_run_ids == [training.model_id]
        with pytest.raises(tinker.NotFoundError):
            rest.get_session("s-no-such-session").result()
        client.close("success").result()
        failed = [r for r in server.state.requests if r[2] >= 500]
    assert not failed, failed


def test_an_opt_in_key_list_answers_other_keys_with_401(tmp_path):
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path), api_keys=("tml-alice",), durable=False)
    with TinkerServer(config) as server:
        rest = tinker.ServiceClient(base_url=server.url, api_key="tml-alice").create_rest_client()
        assert rest.list_training_runs().result().training_runs == []
        with pytest.raises(tinker.AuthenticationError, match="not one of them"):
            tinker.ServiceClient(base_url=server.url, api_key="tml-mallory").create_rest_client()
        import httpx

        assert httpx.get(f"{server.url}/api/v1/healthz", timeout=10).status_code == 200
        unsigned = httpx.get(f"{server.url}/api/v1/training_runs", timeout=10)
        assert unsigned.status_code == 401 and "no X-API-Key header" in unsigned.json()["error"]
