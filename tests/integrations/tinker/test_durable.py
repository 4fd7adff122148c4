"""Runs survive the server: ``kill -9`` of ``skyrl tinker serve`` between two steps of an official
client's run, a new server on the same checkpoint directory, and the same client goes on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from tinker import types  # noqa: E402

from integrations.tinker import TINY_RANDOM_MODEL  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """``python -m integrations.tinker`` in a process of its own (so it can be killed for real)."""

    def __init__(self, checkpoint_dir: Path, port: int) -> None:
        self.args = [
            sys.executable,
            "-m",
            "integrations.tinker",
            "--port",
            str(port),
            "--checkpoint-dir",
            str(checkpoint_dir),
            "--log-level",
            "warning",
        ]
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, wait: bool = True) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            self.args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if "tinker server at" in line:
                return
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"the server exited with {self.proc.returncode}")
        raise AssertionError("the server did not start in time")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _datum(tokens: list[int]) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "weights": [1.0] * (len(tokens) - 1)},
    )


DATA = [_datum([3, 14, 15, 92, 65, 35]), _datum([27, 18, 28, 18, 28])]
PROBE = _datum([1, 2, 3, 4, 5, 6, 7])
ADAM = types.AdamParams(learning_rate=5e-3)


def _step(training) -> float:
    out = training.forward_backward(DATA, "cross_entropy").result()
    training.optim_step(ADAM).result()
    return out.metrics["loss:sum"]


def _probe(training) -> np.ndarray:
    return training.forward([PROBE], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_numpy()


@pytest.fixture
def servers(tmp_path):
    started: list[_Server] = []

    def make(name: str) -> _Server:
        server = _Server(tmp_path / name, _free_port())
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def test_a_run_goes_on_after_kill_9_between_steps(servers):
    # the reference: the same three steps on a server that is never killed
    ref_server = servers("ref")
    ref_server.start()
    ref_client = tinker.ServiceClient(base_url=ref_server.url, api_key="tml-ref")
    ref = ref_client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=5).result()
    ref_losses = [_step(ref) for _ in range(3)]
    ref_probe = _probe(ref)
    ref_client.close("success").result()
    ref_server.stop()

    server = servers("run")
    server.start()
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-run")
    training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=5).result()
    losses = [_step(training)]
    saved = training.save_state("after-step-1").result().path
    sampler = client.create_sampling_client(base_model=TINY_RANDOM_MODEL).result()
    params = types.SamplingParams(max_tokens=3, temperature=0.0, stop=[])
    before = sampler.sample(types.ModelInput.from_ints([5, 6, 7]), 1, params).result().sequences[0].tokens

    server.kill9()
    server.start(wait=False)  # the next request is sent while the new server is still starting
    losses.append(_step(training))  # the client retries until it answers
    server.wait_ready(timeout_s=5)  # it did start (its banner was read after the retries got through)
    losses.append(_step(training))
    assert losses == pytest.approx(ref_losses, rel=1e-5)  # same weights, optimizer state and seq order
    assert _probe(training) == pytest.approx(ref_probe, abs=1e-5)

    # a sampling client made before the kill, and a checkpoint saved before it, still work
    after = sampler.sample(types.ModelInput.from_ints([5, 6, 7]), 1, params).result().sequences[0].tokens
    assert after == before
    resumed = client.create_training_client_from_state(saved).result()
    assert _step(resumed) == pytest.approx(ref_losses[1], rel=1e-5)
    # the checkpoint listing shows the client's checkpoint, not the server's own durable state
    rest = tinker.RestClient(base_url=server.url, api_key="tml-run")
    listed = rest.list_checkpoints(training.model_id).result()
    assert [c.checkpoint_id for c in listed.checkpoints] == ["weights/after-step-1"]
    client.close("success").result()


def test_gradients_lost_in_a_restart_fail_the_next_optim_step(servers):
    server = servers("grads")
    server.start()
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-grads")
    training = client.create_lora_training_client(TINY_RANDOM_MODEL, rank=4, seed=6).result()
    _step(training)
    probe = _probe(training)
    training.forward_backward(DATA, "cross_entropy").result()  # accumulated, not applied
    server.kill9()
    server.start()
    with pytest.raises(tinker.RequestFailedError, match="gradients it accumulated are lost"):
        training.optim_step(ADAM).result()
    assert _probe(training) == pytest.approx(probe, abs=1e-6)  # the weights of the last optim_step
    _step(training)  # forward_backward again, then optim_step: the run goes on
    assert not np.allclose(_probe(training), probe)

    # an unloaded model stays gone after a restart (its durable state is deleted)
    import httpx

    answer = httpx.post(
        f"{server.url}/api/v1/unload_model",
        json={"model_id": training.model_id},
        headers={"X-API-Key": "tml-grads"},
    )
    assert answer.status_code == 200, answer.text
    server.kill9()
    server.start()
    with pytest.raises(tinker.RequestFailedError, match="unknown model_id"):
        _probe(training)
    client.close("success").result()
