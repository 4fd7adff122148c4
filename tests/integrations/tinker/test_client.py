"""The official, unmodified ``tinker`` client against our server on 127.0.0.1, with a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from tinker import types  # noqa: E402

from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path_factory.mktemp("tinker-ckpt")))
    with TinkerServer(config) as srv:
        yield srv


@pytest.fixture(scope="module")
def service(server):
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-local-test")
    yield client
    client.close("success").result()


def _ce_datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


def _greedy(sampler, prompt: list[int], n: int) -> list[int]:
    params = types.SamplingParams(max_tokens=n, temperature=0.0, stop=[])
    return list(sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0].tokens)


def test_training_lowers_the_loss_and_sampling_follows_the_new_weights(service):
    base = service.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
    start = 504
    before = _greedy(base, [start], 4)
    target = next(
        t for t in range(1000, 2000) if t not in before
    )  # a continuation the base model does not pick
    seq = [start] + [target] * 4

    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=8, seed=0).result()
    assert training.get_info().is_lora and training.get_info().lora_rank == 8
    losses = []
    for _ in range(6):
        fwd_bwd = training.forward_backward([_ce_datum(seq)], "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=2e-2))
        losses.append(fwd_bwd.result().metrics["loss:sum"])
        assert "grad_norm:mean" in step.result().metrics
    assert losses[-1] < 0.5 * losses[0], losses

    sampler = training.save_weights_and_get_sampling_client().result()
    assert _greedy(sampler, [start], 4) == [target] * 4, f"before training: {before}"
    # the sampler scores the sequence exactly as the trained model does
    trained_lp = training.forward([_ce_datum(seq)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"]
    sampled_lp = sampler.compute_logprobs(types.ModelInput.from_ints(seq)).result()
    assert sampled_lp[0] is None
    assert np.allclose(np.array(sampled_lp[1:]), trained_lp.to_numpy(), atol=1e-4)
    base_lp = base.compute_logprobs(types.ModelInput.from_ints(seq)).result()
    assert sum(sampled_lp[1:]) > sum(base_lp[1:]) + 5  # the target got much likelier


def test_sample_returns_tokens_logprobs_and_stop_reasons(service):
    sampler = service.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
    prompt = types.ModelInput.from_ints([10, 20, 30])
    params = types.SamplingParams(max_tokens=5, temperature=1.0, seed=7)
    res = sampler.sample(prompt, 3, params, include_prompt_logprobs=True).result()
    assert len(res.sequences) == 3
    for seq in res.sequences:
        assert 1 <= len(seq.tokens) <= 5 and len(seq.logprobs) == len(seq.tokens)
        assert all(lp <= 0 for lp in seq.logprobs)
        assert seq.stop_reason in ("stop", "length") and seq.sequence_id
    assert res.prompt_logprobs[0] is None and all(x < 0 for x in res.prompt_logprobs[1:])
    again = sampler.sample(prompt, 3, params).result()  # a seed makes sampling repeatable
    top = sampler.sample(prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=4).result()
    assert top.topk_prompt_logprobs[0] is None and len(top.topk_prompt_logprobs) == 3
    for pos in (1, 2):  # the top entries are sorted and bound the logprob of the actual token
        ranked = top.topk_prompt_logprobs[pos]
        assert len(ranked) == 4 and [lp for _, lp in ranked] == sorted((lp for _, lp in ranked), reverse=True)
        assert ranked[0][1] >= top.prompt_logprobs[pos] - 1e-5
    last = sampler.sample(prompt, 1, params, include_prompt_logprobs=True, prompt_logprobs_last_n=1).result()
    assert last.prompt_logprobs[:2] == [None, None]
    assert last.prompt_logprobs[2] == pytest.approx(res.prompt_logprobs[2], abs=1e-5)
    assert [s.tokens for s in again.sequences] == [s.tokens for s in res.sequences]
    stop_token = res.sequences[0].tokens[1] if len(res.sequences[0].tokens) > 1 else None
    if stop_token is not None:
        cut = sampler.sample(
            prompt, 1, types.SamplingParams(max_tokens=5, seed=7, stop=[stop_token])
        ).result()
        assert (
            cut.sequences[0].tokens == res.sequences[0].tokens[:2] and cut.sequences[0].stop_reason == "stop"
        )


def _rl_datum(seq: list[int], sampler_lp: list[float], adv: list[float]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(seq[:-1]),
        loss_fn_inputs={"target_tokens": seq[1:], "logprobs": sampler_lp, "advantages": adv},
    )


def test_top_k_of_sampled_tokens_target_prompt_logprobs_and_alt_tokens(service):
    """Each is checked against a full forward pass over the same weights (prompt logprobs)."""
    sampler = service.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
    prompt = [10, 20, 30, 40]
    params = types.SamplingParams(max_tokens=4, temperature=1.0, seed=3, stop=[])
    seq = sampler.sample(types.ModelInput.from_ints(prompt), 1, params, topk_sample_logprobs=3).result()
    seq = seq.sequences[0]
    # the same positions scored by a forward pass over prompt + sampled tokens
    full = prompt + list(seq.tokens)
    one = types.SamplingParams(max_tokens=1)
    ref = sampler.sample(
        types.ModelInput.from_ints(full), 1, one, include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result()
    assert len(seq.topk_logprobs) == len(seq.tokens) == 4
    for i, ranked in enumerate(seq.topk_logprobs):
        want = ref.topk_prompt_logprobs[len(prompt) + i]
        assert [t for t, _ in ranked] == [t for t, _ in want]
        assert [lp for _, lp in ranked] == pytest.approx([lp for _, lp in want], abs=1e-4)
        assert seq.logprobs[i] <= ranked[0][1] + 1e-5

    # target_prompt_logprobs: row i scores position i + 1; -1 asks nothing and gets 0
    top1 = [ref.topk_prompt_logprobs[i + 1][0][0] for i in range(len(full) - 1)]
    ids = np.array([[full[i + 1], top1[i], -1] for i in range(len(full) - 1)], dtype=np.int64)
    res = sampler.sample(
        types.ModelInput.from_ints(full), 1, one, target_prompt_logprobs=types.TensorData.from_numpy(ids)
    ).result()
    got = res.target_prompt_logprobs.to_numpy()
    assert got.shape == ids.shape and got.dtype == np.float32
    assert got[:, 0] == pytest.approx(ref.prompt_logprobs[1:], abs=1e-4)
    assert got[:, 1] == pytest.approx(
        [ref.topk_prompt_logprobs[i + 1][0][1] for i in range(len(full) - 1)], abs=1e-4
    )
    assert (got[:, 2] == 0).all()
    # sparse CSR in, sparse CSR with the same layout out
    import torch

    dense = torch.full((len(full) - 1, 2), -1, dtype=torch.int64)
    dense[1, 1], dense[4, 0] = full[2], top1[4]
    sparse = types.TensorData.from_torch_sparse(dense, pad_value=-1)
    res = sampler.sample(types.ModelInput.from_ints(full), 1, one, target_prompt_logprobs=sparse).result()
    out = res.target_prompt_logprobs
    assert (
        out.sparse_crow_indices == sparse.sparse_crow_indices
        and out.sparse_col_indices == sparse.sparse_col_indices
    )
    assert list(out.data) == pytest.approx(
        [ref.prompt_logprobs[2], ref.topk_prompt_logprobs[5][0][1]], abs=1e-4
    )

    # prompt_alt_tokens: greedy draws are the top token; seeded draws repeat; logprobs are the model's
    greedy = types.SamplingParams(max_tokens=1, temperature=0.0)
    alt = sampler.sample(types.ModelInput.from_ints(full), 1, greedy, prompt_alt_tokens_k=2).result()
    alt_ids = alt.prompt_alt_tokens.tokens.to_numpy()
    assert alt_ids.shape == (len(full) - 1, 2) and (alt_ids == np.array(top1)[:, None]).all()
    warm = types.SamplingParams(max_tokens=1, temperature=1.0, seed=11)
    a = (
        sampler.sample(types.ModelInput.from_ints(full), 1, warm, prompt_alt_tokens_k=5)
        .result()
        .prompt_alt_tokens
    )
    b = (
        sampler.sample(types.ModelInput.from_ints(full), 1, warm, prompt_alt_tokens_k=5)
        .result()
        .prompt_alt_tokens
    )
    drawn = a.tokens.to_numpy()
    assert (drawn == b.tokens.to_numpy()).all() and len(set(drawn.ravel().tolist())) > 1
    scored = sampler.sample(
        types.ModelInput.from_ints(full), 1, one, target_prompt_logprobs=types.TensorData.from_numpy(drawn)
    ).result()
    assert a.logprobs.to_numpy() == pytest.approx(scored.target_prompt_logprobs.to_numpy(), abs=1e-4)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro", "gspo"])
def test_rl_losses_are_token_sums(service, loss_fn):
    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=1).result()
    seq = [11, 12, 13, 14, 15, 16]
    probe = training.forward([_ce_datum(seq)], "cross_entropy").result()
    lp = probe.loss_fn_outputs[0]["logprobs"].to_numpy()  # the current logprobs of tokens 12..16
    sampler_lp = (lp + np.array([0.0, 0.5, -0.5, 0.1, -0.3], np.float32)).tolist()  # ratios != 1
    adv = [1.0, -1.0, 2.0, 0.0, 0.5]
    config = {
        "importance_sampling": None,
        "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        "cispo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
        "dro": {"beta": 0.3},
        "gspo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    }[loss_fn]
    datum = _rl_datum(seq, sampler_lp, adv)
    out = training.forward_backward([datum, datum], loss_fn, config).result()
    ratio = np.exp(lp - np.array(sampler_lp))
    a = np.array(adv)
    trained = a != 0  # gspo: one ratio, the geometric mean over the tokens with an advantage
    s = np.exp((lp - np.array(sampler_lp))[trained].mean())
    per_token = {
        "importance_sampling": -ratio * a,
        "ppo": -np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a),
        "cispo": -np.clip(ratio, 0.8, 1.2) * lp * a,
        "dro": -(lp * a) + 0.5 * 0.3 * (lp - np.array(sampler_lp)) ** 2,
        "gspo": -np.minimum(s * a, np.clip(s, 0.8, 1.2) * a) * trained,
    }[loss_fn]
    assert out.metrics["loss:sum"] == pytest.approx(2 * per_token.sum(), rel=1e-4, abs=1e-4)
    assert np.allclose(out.loss_fn_outputs[1]["elementwise_loss"].to_numpy(), per_token, atol=1e-4)
    assert training.optim_step(types.AdamParams(learning_rate=1e-3)).result() is not None


def test_chunked_requests_run_in_seq_id_order(tmp_path):
    # chunks of one datum: the client sends them concurrently, the first one last
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path), client_flags=(("fwdbwd_max_chunk_len", 1),))
    with TinkerServer(config) as srv:
        client = tinker.ServiceClient(base_url=srv.url, api_key="tml-local-test")
        training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=2).result()
        data = [_ce_datum([5 + i, 6 + i, 7 + i]) for i in range(4)]
        whole = [training.forward([d], "cross_entropy").result().metrics["loss:sum"] for d in data]
        out = training.forward(data, "cross_entropy").result()
        assert out.metrics["loss:sum"] == pytest.approx(sum(whole), rel=1e-5)
        assert len(out.loss_fn_outputs) == 4
        fwd = [r for r in srv.state.requests if r[1] == "/api/v1/forward_backward"]
        assert len(fwd) == 8 and all(status == 200 for _, _, status in fwd)
        client.close("success").result()


def test_save_and_load_state_round_trip(service):
    seq = [300, 301, 302, 303, 304]
    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=3).result()
    for _ in range(2):
        training.forward_backward([_ce_datum(seq)], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-2))
    path = training.save_state("after-2").result().path
    assert path == f"tinker://{training.model_id}/weights/after-2"

    restored = service.create_training_client_from_state_with_optimizer(path).result()
    assert restored.model_id != training.model_id and restored.get_info().lora_rank == 4

    def logprobs(client):
        return (
            client.forward([_ce_datum(seq)], "cross_entropy")
            .result()
            .loss_fn_outputs[0]["logprobs"]
            .to_numpy()
        )

    assert np.allclose(logprobs(restored), logprobs(training), atol=1e-6)
    # with the optimizer state restored, one more step lands on the same weights
    for client in (training, restored):
        client.forward_backward([_ce_datum(seq)], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    assert np.allclose(logprobs(restored), logprobs(training), atol=1e-5)

    # named sampler weights: a new sampling client from the path samples the same weights
    sampler_path = training.save_weights_for_sampler("final").result().path
    assert sampler_path.endswith("/sampler_weights/final")
    sampler = service.create_sampling_client(model_path=sampler_path).result()
    sampled = np.array(sampler.compute_logprobs(types.ModelInput.from_ints(seq)).result()[1:])
    assert np.allclose(sampled, logprobs(training), atol=1e-4)

    # legacy load_state into an existing model (weights only)
    other = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=9).result()
    assert not np.allclose(logprobs(other), logprobs(restored), atol=1e-3)
    with pytest.warns(FutureWarning, match="load_state"):
        other.load_state(path).result()
    assert np.allclose(
        logprobs(other), logprobs(restored) if False else _logprobs_at(service, path, seq), atol=1e-6
    )


def _logprobs_at(service, path, seq):
    client = service.create_training_client_from_state(path).result()
    return (
        client.forward([_ce_datum(seq)], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    )


def test_unsupported_requests_fail_with_a_clear_error(service):
    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4).result()
    with pytest.raises(
        tinker.RequestFailedError, match="StableReinforce is not supported by this server"
    ) as info:
        training.forward_backward([_ce_datum([1, 2, 3])], "stable_reinforce").result()
    assert info.value.category == "user"
    fresh = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4).result()
    with pytest.raises(tinker.RequestFailedError, match=r"missing \['weights'\]"):
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([1, 2]), loss_fn_inputs={"target_tokens": [2, 3]}
        )
        fresh.forward_backward([datum], "cross_entropy").result()
    with pytest.raises(tinker.RequestFailedError, match="unknown base model 'no-such-model'"):
        service.create_lora_training_client("no-such-model", rank=4).result()
    sampler = service.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
    with pytest.raises(tinker.RequestFailedError, match="topk_sample_logprobs 100000 is more than"):
        params = types.SamplingParams(max_tokens=2)
        sampler.sample(types.ModelInput.from_ints([1, 2]), 1, params, topk_sample_logprobs=100000).result()
    with pytest.raises(
        tinker.RequestFailedError, match="target_prompt_logprobs has 3 rows; the prompt has 2"
    ):
        ids = types.TensorData.from_numpy(np.zeros((3, 1), dtype=np.int64))
        sampler.sample(types.ModelInput.from_ints([1, 2]), 1, params, target_prompt_logprobs=ids).result()
    with pytest.raises(tinker.RequestFailedError, match="no checkpoint at"):
        service.create_training_client_from_state("tinker://nope:train:0/weights/missing").result()


def test_full_fine_tune_through_the_official_client(service, server):
    """A model without lora_config is a full fine-tune: created over plain HTTP (the client only
    creates LoRA models), saved, then trained by the official client from that checkpoint."""
    import httpx

    with httpx.Client(base_url=server.url, timeout=60) as http:
        session = http.post(
            "/api/v1/create_session", json={"tags": [], "user_metadata": {}, "sdk_version": "raw"}
        ).json()
        sid = session["session_id"]
        rid = http.post(
            "/api/v1/create_model",
            json={"session_id": sid, "model_seq_id": 0, "base_model": TINY_RANDOM_MODEL},
        ).json()
        model_id = http.post("/api/v1/retrieve_future", json={"request_id": rid["request_id"]}).json()[
            "model_id"
        ]
        assert http.post("/api/v1/get_info", json={"model_id": model_id}).json()["is_lora"] is False
        saved = http.post(
            "/api/v1/save_weights", json={"model_id": model_id, "path": "full-0", "seq_id": 1}
        ).json()
        path = http.post("/api/v1/retrieve_future", json={"request_id": saved["request_id"]}).json()["path"]
        # a submit sent again (the client retries when it lost the answer) gets the same future
        again = http.post(
            "/api/v1/save_weights", json={"model_id": model_id, "path": "full-0", "seq_id": 1}
        ).json()
        assert again["request_id"] == saved["request_id"]
        bad = http.post(
            "/api/v1/create_model", json={"session_id": sid, "model_seq_id": 1, "base_model": ""}
        ).json()
        failed = http.post("/api/v1/retrieve_future", json={"request_id": bad["request_id"]})
        assert failed.status_code == 200
        assert failed.json() == {"error": "create_model needs base_model", "category": "user"}

    training = service.create_training_client_from_state(path).result()
    assert training.get_info().is_lora is False
    seq = [40, 41, 42, 43]
    losses = []
    for _ in range(3):
        fwd_bwd = training.forward_backward([_ce_datum(seq)], "cross_entropy")
        training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
        losses.append(fwd_bwd.result().metrics["loss:sum"])
    assert losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)


@pytest.mark.gpu
def test_training_and_sampling_on_a_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path), device="cuda", dtype="bfloat16")
    with TinkerServer(config) as srv:
        client = tinker.ServiceClient(base_url=srv.url, api_key="tml-gpu-test")
        training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=8, seed=0).result()
        seq = [504] + [1234] * 4
        losses = []
        for _ in range(6):
            fwd_bwd = training.forward_backward([_ce_datum(seq)], "cross_entropy")
            training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
            losses.append(fwd_bwd.result().metrics["loss:sum"])
        assert losses[-1] < 0.5 * losses[0], losses
        sampler = training.save_weights_and_get_sampling_client().result()
        assert _greedy(sampler, [504], 4) == [1234] * 4
        client.close("success").result()


def test_client_side_custom_loss(service):
    """``forward_backward_custom`` runs the loss in the client on our forward logprobs and sends
    its gradient back as ``cross_entropy`` weights."""
    pytest.importorskip("torch")  # the client needs torch for custom losses
    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=5).result()
    datum = _ce_datum([70, 71, 72, 73])

    def squared_nll(data, logprobs_list):
        loss = sum((lp**2).sum() for lp in logprobs_list)
        return loss, {"squared:sum": float(loss.detach())}

    lp = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    out = training.forward_backward_custom([datum], squared_nll).result()
    assert out.metrics["squared:sum"] == pytest.approx(float((lp**2).sum()), rel=1e-4)
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    after = training.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()
    assert float((after**2).sum()) < float((lp**2).sum())  # the custom loss went down


def test_gradients_accumulate_until_the_optimizer_step(service):
    """Two forward_backward calls then one step equal one call with both datums (losses are sums)."""
    a, b = _ce_datum([90, 91, 92]), _ce_datum([93, 94, 95, 96])
    split = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=11).result()
    joint = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=11).result()
    split.forward_backward([a], "cross_entropy")
    split.forward_backward([b], "cross_entropy")
    joint.forward_backward([a, b], "cross_entropy")
    adam = types.AdamParams(learning_rate=1e-2)
    split_norm = split.optim_step(adam).result().metrics["grad_norm:mean"]
    joint_norm = joint.optim_step(adam).result().metrics["grad_norm:mean"]
    assert split_norm == pytest.approx(joint_norm, rel=1e-4)

    def logprobs(client):
        return client.forward([a, b], "cross_entropy").result().loss_fn_outputs[1]["logprobs"].to_numpy()

    assert np.allclose(logprobs(split), logprobs(joint), atol=1e-5)


def test_closing_the_client_frees_its_models(server):
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-local-test")
    training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4).result()
    assert training.model_id in server.state.models
    client.close("success").result()
    assert training.model_id not in server.state.models
    session_id = training.model_id.split(":", 1)[0]
    assert server.state.sessions[session_id].finished


def test_cross_entropy_with_several_targets_per_position(service):
    """``target_tokens`` of shape [N, K] with ``weights`` [N, K] (e.g. a distillation target)."""
    training = service.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=12).result()
    inputs, targets = [20, 21, 22], [[21, 500], [22, 501], [23, 502]]
    weights = [[0.75, 0.25], [0.5, 0.5], [1.0, 0.0]]
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(inputs),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=sum(targets, []), dtype="int64", shape=[3, 2]),
            "weights": types.TensorData(data=sum(weights, []), dtype="float32", shape=[3, 2]),
        },
    )
    out = training.forward_backward([datum, _ce_datum(inputs + [23])], "cross_entropy").result()
    lp = out.loss_fn_outputs[0]["logprobs"].to_numpy()
    assert lp.shape == (3, 2)
    single = out.loss_fn_outputs[1]["logprobs"].to_numpy()  # the first column's targets, one per position
    assert np.allclose(lp[:, 0], single, atol=1e-5)
    assert out.metrics["loss:sum"] == pytest.approx(
        float(-(lp * np.array(weights)).sum() - single.sum()), rel=1e-5
    )


def test_capabilities_and_unsupported_routes(service, server):
    import httpx

    caps = tinker.RestClient(base_url=server.url, api_key="tml-local-test").get_server_capabilities().result()
    assert {m.model_name for m in caps.supported_models} >= {"smollm2-135m", TINY_RANDOM_MODEL}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        assert http.get("/api/v1/healthz").json() == {"status": "ok"}
        missing = http.post("/api/v1/retrieve_futures", json={})
    assert missing.status_code == 404
    assert missing.json() == {
        "error": "POST /api/v1/retrieve_futures is not supported by this Tinker-compatible server",
        "category": "user",
    }
