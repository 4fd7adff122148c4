"""Conformance with the pinned ``tinker`` client release: every route it calls in a full loop is
served (no 4xx/5xx), with its default transport (pyqwest) and zstd-compressed fwd/bwd bodies.

The client changes its wire protocol often (0.18 made /client/config mandatory, 0.25 made
protobuf mandatory, later releases added required fields), so this file pins the version the
server was checked against. When a different client is installed these tests skip with a
message: check the new release (run this file with it), then bump CHECKED_CLIENT_VERSION.
"""

from __future__ import annotations

import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from tinker import types  # noqa: E402

from integrations.tinker import CHECKED_CLIENT_VERSION, TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402

pytestmark = pytest.mark.skipif(
    tinker.__version__ != CHECKED_CLIENT_VERSION,
    reason=f"the server was checked against tinker {CHECKED_CLIENT_VERSION}, but tinker {tinker.__version__} "
    "is installed: run this file with it and bump integrations.tinker.CHECKED_CLIENT_VERSION",
)

#: Every route tinker 0.38 calls in the loop below (docs/decisions/0014-tinker-compatible-server.md).
EXPECTED_ROUTES = {
    ("POST", "/api/v1/client/config"),
    ("POST", "/api/v1/client/dynamic_config"),
    ("POST", "/api/v1/create_session"),
    ("POST", "/api/v1/create_model"),
    ("POST", "/api/v1/get_info"),
    ("POST", "/api/v1/forward_backward"),
    ("POST", "/api/v1/optim_step"),
    ("POST", "/api/v1/save_weights"),
    ("POST", "/api/v1/save_weights_for_sampler"),
    ("POST", "/api/v1/load_weights"),
    ("POST", "/api/v1/create_sampling_session"),
    ("GET", "/api/v1/samplers/{sampler_id}"),
    ("POST", "/api/v1/asample"),
    ("POST", "/api/v1/retrieve_future"),
    ("POST", "/api/v1/sessions/{session_id}/finish"),
    # RestClient: a resumed cookbook run reads its run's metadata (renderer_name) from these
    ("GET", "/api/v1/training_runs/{model_id}"),
    ("GET", "/api/v1/training_runs"),
    ("GET", "/api/v1/training_runs/{model_id}/checkpoints"),
    ("GET", "/api/v1/checkpoints"),
}


def test_the_pinned_client_is_installed():
    assert tinker.__version__ == CHECKED_CLIENT_VERSION


@pytest.mark.slow
def test_every_route_of_the_loop_is_served(tmp_path):
    flags = (("use_pyqwest_transport", True), ("proto_compress_fwdbwd", True))
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path), client_flags=flags)) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-conformance")
        training = client.create_lora_training_client(
            TINY_RANDOM_MODEL, rank=4, seed=0, user_metadata={"renderer_name": "role_colon"}
        ).result()
        tokenizer = training.get_tokenizer()  # offline: loaded from the tokenizer_id directory
        seq = tokenizer.encode("Tinker conformance: every route answers.")
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(seq[:-1]),
            loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)},
        )
        first = training.forward_backward([datum], "cross_entropy").result().metrics["loss:sum"]
        training.optim_step(types.AdamParams(learning_rate=1e-2, grad_clip_norm=1.0)).result()
        after = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
        assert after < first
        sampler = training.save_weights_and_get_sampling_client().result()
        out = sampler.sample(
            types.ModelInput.from_ints(seq[:3]), 2, types.SamplingParams(max_tokens=4)
        ).result()
        assert len(out.sequences) == 2 and all(s.sequence_id for s in out.sequences)
        assert len(sampler.compute_logprobs(types.ModelInput.from_ints(seq)).result()) == len(seq)
        state_path = training.save_state("ckpt").result().path
        sampler_path = training.save_weights_for_sampler("samp").result().path
        from_path = client.create_sampling_client(model_path=sampler_path).result()
        assert from_path.get_base_model() == TINY_RANDOM_MODEL
        from_path.sample(types.ModelInput.from_ints(seq[:3]), 1, types.SamplingParams(max_tokens=2)).result()
        restored = client.create_training_client_from_state_with_optimizer(state_path).result()
        assert restored.model_id.endswith(":train:1")
        rest = client.create_rest_client()
        run = rest.get_training_run(training.model_id).result()
        assert run.user_metadata == {"renderer_name": "role_colon"} and run.is_lora and run.lora_rank == 4
        assert run.base_model == TINY_RANDOM_MODEL
        assert run.last_checkpoint.tinker_path == state_path
        assert run.last_sampler_checkpoint.tinker_path == sampler_path
        runs = rest.list_training_runs(limit=10).result()
        assert {r.training_run_id for r in runs.training_runs} == {training.model_id, restored.model_id}
        assert runs.cursor.total_count == 2
        listed = rest.list_checkpoints(training.model_id).result().checkpoints
        assert {c.tinker_path for c in listed} == {state_path, sampler_path}
        assert {c.checkpoint_type for c in listed} == {"training", "sampler"} and all(
            c.size_bytes for c in listed
        )
        assert len(rest.list_user_checkpoints().result().checkpoints) == 2
        client.close("success").result()
        seen = {(method, route) for method, route, _ in server.state.requests}
        failed = [r for r in server.state.requests if r[2] >= 400]
    assert not failed, failed
    assert EXPECTED_ROUTES <= seen, EXPECTED_ROUTES - seen


@pytest.mark.slow
def test_training_runs_outlive_the_server(tmp_path):
    """A run's metadata and checkpoints are on disk beside each other, so a restarted server (or
    another one on the same directory) still answers for them."""
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path))) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-conformance")
        training = client.create_lora_training_client(
            TINY_RANDOM_MODEL, rank=4, seed=0, user_metadata={"renderer_name": "role_colon", "step": "3"}
        ).result()
        path = training.save_state("after-3").result().path
        model_id = training.model_id
        client.close("success").result()
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path))) as server:
        rest = tinker.ServiceClient(base_url=server.url, api_key="tml-conformance").create_rest_client()
        run = rest.get_training_run(model_id).result()
        assert run.user_metadata == {"renderer_name": "role_colon", "step": "3"} and run.lora_rank == 4
        assert run.last_checkpoint.tinker_path == path and run.last_sampler_checkpoint is None
        with pytest.raises(tinker.NotFoundError):
            rest.get_training_run("no-such-run").result()
