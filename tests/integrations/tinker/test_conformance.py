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
}


def test_the_pinned_client_is_installed():
    assert tinker.__version__ == CHECKED_CLIENT_VERSION


@pytest.mark.slow
def test_every_route_of_the_loop_is_served(tmp_path):
    flags = (("use_pyqwest_transport", True), ("proto_compress_fwdbwd", True))
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path), client_flags=flags)) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-conformance")
        training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=0).result()
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
        client.close("success").result()
        seen = {(method, route) for method, route, _ in server.state.requests}
        failed = [r for r in server.state.requests if r[2] >= 400]
    assert not failed, failed
    assert EXPECTED_ROUTES <= seen, EXPECTED_ROUTES - seen
