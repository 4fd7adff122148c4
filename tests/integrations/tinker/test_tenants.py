"""Several clients on one server: training models and sampling sessions share the worker fairly,
and interleaving them changes no result. Official ``tinker`` client, tiny model, 127.0.0.1."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from tinker import types  # noqa: E402

from integrations.tinker import TINY_RANDOM_MODEL, TinkerServer, TinkerServerConfig  # noqa: E402

pytestmark = pytest.mark.slow


def _datum(seed: int, n: int = 96) -> types.Datum:
    tokens = np.random.default_rng(seed).integers(1, 200, n + 1).tolist()
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * n},
    )


BIG = [_datum(i) for i in range(64)]  # one request of 64 micro-batches (micro_batch_size 1)
SMALL = [_datum(1000 + i, 16) for i in range(2)]
ADAM = types.AdamParams(learning_rate=1e-2)


def _client(srv: TinkerServer, key: str):
    return tinker.ServiceClient(base_url=srv.url, api_key=key)


def _sample_while_training(fair: bool, tmp_path) -> tuple[float, float, float, float]:
    """(B's expected loss, B's loss, when A's sample finished, when B's forward_backward finished)."""
    config = TinkerServerConfig(
        checkpoint_dir=str(tmp_path / f"fair-{fair}"), micro_batch_size=1, fair_worker=fair
    )
    with TinkerServer(config) as srv:
        a, b = _client(srv, "tml-a"), _client(srv, "tml-b")
        sampler = a.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
        training = b.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=3).result()
        params = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
        sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1, params).result()  # build its model first
        expected = training.forward(BIG, "cross_entropy").result().metrics["loss:sum"]
        start = time.monotonic()
        done: dict[str, float] = {}
        out: dict[str, float] = {}

        def train() -> None:
            out["loss"] = training.forward_backward(BIG, "cross_entropy").result().metrics["loss:sum"]
            done["b"] = time.monotonic() - start

        thread = threading.Thread(target=train)
        thread.start()
        time.sleep(0.5)  # B's request is on the worker by now
        sampler.sample(types.ModelInput.from_ints([4, 5, 6]), 1, params).result()
        done["a"] = time.monotonic() - start
        thread.join(timeout=300)
        for client in (a, b):
            client.close("success").result()
        return expected, out["loss"], done["a"], done["b"]


def test_sampling_does_not_wait_for_another_client_s_whole_training_request(tmp_path):
    expected, loss, a_done, b_done = _sample_while_training(True, tmp_path)
    assert a_done < b_done, (a_done, b_done)  # A's sample ran between B's micro-batches
    assert loss == pytest.approx(expected, rel=1e-5)  # and B's result is what it is alone
    # the same request order on a first-in, first-out worker: A waits for all of B's request
    expected, loss, a_done, b_done = _sample_while_training(False, tmp_path)
    # (the sample now takes milliseconds on the engine, so both clients can see their results
    # within the same poll: their client-side clocks may then differ by microseconds either way)
    assert a_done > b_done - 0.05, (a_done, b_done)
    assert loss == pytest.approx(expected, rel=1e-5)


def test_two_clients_train_two_models_at_once_with_their_own_results(tmp_path):
    def run(clients, concurrent: bool) -> list[list[float]]:
        trainings = [
            c.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=10 + i).result()
            for i, c in enumerate(clients)
        ]
        losses: list[list[float]] = [[] for _ in trainings]

        def steps(i: int) -> None:
            for _ in range(3):
                fb = trainings[i].forward_backward(SMALL, "cross_entropy")
                trainings[i].optim_step(ADAM).result()
                losses[i].append(fb.result().metrics["loss:sum"])

        if concurrent:
            threads = [threading.Thread(target=steps, args=(i,)) for i in range(len(trainings))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=300)
        else:
            for i in range(len(trainings)):
                steps(i)
        return losses

    config = TinkerServerConfig(checkpoint_dir=str(tmp_path / "two"), micro_batch_size=1)
    with TinkerServer(config) as srv:
        clients = [_client(srv, key) for key in ("tml-x", "tml-y", "tml-x2", "tml-y2")]
        alone = run(clients[:2], concurrent=False)
        together = run(clients[2:], concurrent=True)
        for client in clients:
            client.close("success").result()
    assert all(len(x) == 3 for x in together)
    assert together[0] == pytest.approx(alone[0], rel=1e-5) and together[1] == pytest.approx(
        alone[1], rel=1e-5
    )
    assert alone[0][2] < alone[0][0]  # they did train
